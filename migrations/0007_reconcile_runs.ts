// The self-update outcome's reconciliation (the boot-reconcile chart) keeps its snapshot like every
// other chart: one row per run, written after each transition, so the machine-state view shows real
// runs rather than ones derived from the self-update rows.
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('reconcile_runs')
    .addColumn('run_id', 'uuid', (c) => c.primaryKey())
    .addColumn('request_id', 'uuid', (c) => c.references('self_update_requests.request_id').onDelete('set null'))
    .addColumn('worker', 'text', (c) => c.notNull())
    .addColumn('snapshot', 'jsonb')
    .addColumn('chart_version', 'text', (c) => c.notNull())
    .addColumn('started_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('finished_at', 'timestamptz')
    .execute();
  await db.schema.createIndex('reconcile_runs_started').on('reconcile_runs').columns(['started_at desc']).execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

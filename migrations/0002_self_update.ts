// Self-update: the request (desired state, written by the API) and its status (observed state,
// written by the self-update controller and the boot reconciliation). At most one update is in
// flight: the API decides that under an advisory lock, and a partial unique index backs it up.
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('self_update_requests')
    .addColumn('request_id', 'uuid', (c) => c.primaryKey())
    .addColumn('actor', 'text', (c) => c.notNull())
    .addColumn('actor_email', 'text')
    .addColumn('generation', 'integer', (c) => c.notNull().defaultTo(1))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable('self_update_status')
    .addColumn('request_id', 'uuid', (c) => c.primaryKey().references('self_update_requests.request_id').onDelete('cascade'))
    .addColumn('phase', 'text', (c) =>
      c.notNull().check(sql`phase in ('requested', 'preflight', 'newest', 'unresolved', 'aborted', 'helper-running', 'completed', 'rolled-back', 'neither')`),
    )
    .addColumn('conditions', 'jsonb', (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn('snapshot', 'jsonb')
    .addColumn('chart_version', 'text')
    .addColumn('claimed_by', 'text')
    .addColumn('channel', 'text')
    .addColumn('target_tag', 'text')
    .addColumn('target_digest', 'text')
    .addColumn('target_image_id', 'text')
    .addColumn('previous_reference', 'text')
    .addColumn('previous_digest', 'text')
    .addColumn('previous_image_id', 'text')
    .addColumn('pre_update_migration', 'text')
    .addColumn('action_id', 'bigint')
    .addColumn('helper_container_id', 'text')
    .addColumn('helper_deadline', 'timestamptz')
    .addColumn('helper_exit_code', 'integer')
    .addColumn('abort_code', 'text')
    .addColumn('detail', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('finished_at', 'timestamptz')
    .execute();

  // One self-update in flight, whatever races the API loses.
  await sql`create unique index self_update_one_in_flight on self_update_status ((true)) where phase in ('requested', 'preflight', 'helper-running')`.execute(db);
  await db.schema.createIndex('self_update_status_newest').on('self_update_status').columns(['created_at desc']).execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

// What a stop or kill of the platform on a Swarm put aside (docs/adr/0056-platform-on-a-swarm.md):
// a replicated service is scaled to zero, so its replica count before the stop is desired state the
// next start restores; a global service is held off every node by a placement constraint the next
// deploy lifts. One row per stack and service while it is stopped; the start that restores it
// deletes it. Expand-only: a new table, which the build before it never names.
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('platform_stopped_services')
    .addColumn('stack', 'text', (c) => c.notNull())
    .addColumn('service', 'text', (c) => c.notNull())
    // null for a global service (it has no replica count).
    .addColumn('replicas', 'integer')
    .addColumn('job_id', 'text', (c) => c.notNull())
    .addColumn('stopped_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('platform_stopped_services_pkey', ['stack', 'service'])
    .execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

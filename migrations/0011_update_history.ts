// The downtime of a self-update as the installer measures it itself (docs/adr/0031-update-history.md):
// the old backend writes the time of its last answer when it stops while the update's helper runs,
// the new one the time it first listens; the outcome reconciliation turns both into the downtime,
// or leaves it null with the reason.
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('self_update_status')
    .addColumn('last_answer_at', 'timestamptz')
    .addColumn('first_ready_at', 'timestamptz')
    .addColumn('downtime_ms', 'integer', (c) => c.check(sql`downtime_ms >= 0`))
    .addColumn('downtime_note', 'text')
    .execute();
  // The history reads the updates that ran their helper, newest first.
  await sql`create index self_update_status_history on self_update_status (created_at desc, request_id desc) where action_id is not null`.execute(db);
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

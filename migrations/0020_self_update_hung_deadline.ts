// A self-update in preflight gets a hung deadline like a job's, moved at each step of its chart:
// the runtime's watchdog aborts a preflight past it (docs/adr/0042-reconcile-contract.md).
// Expand-only: an older build ignores the column.
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('self_update_status').addColumn('hung_deadline', 'timestamptz').execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

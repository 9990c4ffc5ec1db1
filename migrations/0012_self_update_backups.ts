// The database backup a self-update takes in preflight (docs/adr/0032-backup-before-the-switch.md):
// its file name in the backups volume, so that the schema alarm after a rollback names it.
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('self_update_status').addColumn('backup_file', 'text').execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

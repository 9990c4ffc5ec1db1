// The sha256 of the compose file a self-update staged, recorded with its status when it is staged:
// the helper checks the staged file against it before installing it
// (docs/adr/0041-trusted-sources-and-staging.md). Nullable: builds before it never write it.
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('self_update_status').addColumn('staged_compose_sha256', 'text').execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

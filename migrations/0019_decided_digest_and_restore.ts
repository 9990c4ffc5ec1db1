// A policy start carries the digest the policy decided on, and preflight installs only that digest
// (docs/adr/0044-restore-and-decided-digest.md). An update whose outcome was taken back by a
// database restore and re-derived at boot from its helper says so (`restored_at`). Nullable and
// expand-only: an older build ignores both columns.
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('self_update_requests').addColumn('decided_digest', 'text').execute();
  await db.schema.alterTable('self_update_status').addColumn('restored_at', 'timestamptz').execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

// The audit trail filtered by actor (GET /api/deployment/actions?actor=…, and its CSV export) reads
// one actor's rows newest first, page after page: an index in that order keeps each page a short
// range scan however long the trail grows (docs/adr/0021-audit-filters-and-export.md). Kind has its
// index since 0001; status and time filters ride on the newest-first index.
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.createIndex('deployment_actions_actor').on('deployment_actions').columns(['actor', 'created_at desc', 'id desc']).execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

// `self_update_requests.generation` goes (docs/adr/0051-status-that-tells-the-truth.md): a
// self-update request is never changed nor cancelled, so its generation was 1 on every row, and no
// build ever wrote it (it took its default) or read it. A contract step, marked as such: the build
// before it does not name the column, so it keeps inserting and reading requests as before.
import type { Kysely } from 'kysely';

export const step = 'contract';
export const release = '0.2.0';
export const reason = 'no build ever wrote or read self_update_requests.generation: inserts took its default, and no query names it';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('self_update_requests').dropColumn('generation').execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

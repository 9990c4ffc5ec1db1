// Every self-update is also a job (kind `self-update`): its transcript (preflight steps, the pull,
// the helper's whole output read after the restart, the outcome) is a job event stream like any
// other. The request names its job; the job row is written in the request's own transaction.
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('self_update_requests').addColumn('job_id', 'uuid').execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

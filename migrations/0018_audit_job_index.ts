// The audit rows of a job (`job_id`): the boot's check for jobs that ended without their end fully
// recorded looks them up for each recently ended job, and the finishing of a job updates them. On a
// trail of a million rows, without an index, that check took seconds per job and held the boot
// (docs/adr/0043-healthy-means-reconciling.md). Expand only: an index.
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.createIndex('deployment_actions_job').on('deployment_actions').column('job_id').where('job_id', 'is not', null).execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

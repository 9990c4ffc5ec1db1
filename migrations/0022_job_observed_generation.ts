// A job's status says which generation of its request it answers (docs/adr/0051-status-that-tells-the-truth.md):
// a cancel bumps `deployment_jobs.generation`, and the jobs controller writes the generation it acted
// on here (at the claim, when it sends the chart CANCEL, when the cancel's reconciler ends or finds
// the job ended). Expand-only: nullable, so the build before it (which neither writes nor reads it)
// inserts and claims as before, and a row no controller has looked at since says so with null.
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('deployment_job_status').addColumn('observed_generation', 'integer').execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

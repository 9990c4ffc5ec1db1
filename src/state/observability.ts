// Read-only summaries for /metrics and the diagnostics bundle. Counts come from the stored rows,
// so they survive restarts and agree with what the API reports.
import { sql, type Kysely } from 'kysely';
import type { ActionKind, DB, JobPhase, SelfUpdatePhase } from '../db/schema.ts';

export interface JobCount {
  kind: ActionKind;
  phase: JobPhase;
  count: number;
}

/** Jobs by kind and phase (queued, running, completed, failed). */
export async function jobCounts(db: Kysely<DB>): Promise<JobCount[]> {
  const rows = await db
    .selectFrom('deployment_jobs as j')
    .innerJoin('deployment_job_status as s', 's.job_id', 'j.job_id')
    .select(['j.kind', 's.phase', (eb) => eb.fn.countAll<string>().as('count')])
    .groupBy(['j.kind', 's.phase'])
    .execute();
  return rows.map((r) => ({ kind: r.kind, phase: r.phase, count: Number(r.count) }));
}

export interface JobDuration {
  kind: ActionKind;
  outcome: 'completed' | 'failed';
  seconds: number;
}

/** How long each finished job ran, from its start to its end (jobs that never started have none). */
export async function finishedJobDurations(db: Kysely<DB>): Promise<JobDuration[]> {
  const rows = await db
    .selectFrom('deployment_jobs as j')
    .innerJoin('deployment_job_status as s', 's.job_id', 'j.job_id')
    .select(['j.kind', 's.phase', sql<string>`extract(epoch from (s.finished_at - s.started_at))`.as('seconds')])
    .where('s.phase', 'in', ['completed', 'failed'])
    .where('s.started_at', 'is not', null)
    .where('s.finished_at', 'is not', null)
    .execute();
  return rows.map((r) => ({ kind: r.kind, outcome: r.phase as 'completed' | 'failed', seconds: Math.max(0, Number(r.seconds)) }));
}

/** Self-updates by the phase they are in or ended in. */
export async function selfUpdateCounts(db: Kysely<DB>): Promise<{ phase: SelfUpdatePhase; count: number }[]> {
  const rows = await db
    .selectFrom('self_update_status')
    .select(['phase', (eb) => eb.fn.countAll<string>().as('count')])
    .groupBy('phase')
    .execute();
  return rows.map((r) => ({ phase: r.phase, count: Number(r.count) }));
}

/** The most recent jobs with their observed state, newest first. */
export async function recentJobs(db: Kysely<DB>, limit: number) {
  return db
    .selectFrom('deployment_jobs as j')
    .leftJoin('deployment_job_status as s', 's.job_id', 'j.job_id')
    .select([
      'j.job_id as jobId', 'j.kind', 'j.params', 'j.actor', 'j.created_at as createdAt', 'j.cancel_requested_by as cancelRequestedBy',
      's.phase', 's.detail', 's.exit_code as exitCode', 's.started_at as startedAt', 's.finished_at as finishedAt', 's.chart_version as chartVersion',
    ])
    .orderBy('j.created_at', 'desc')
    .limit(limit)
    .execute();
}

/** The most recent audit rows, newest first. */
export async function recentActions(db: Kysely<DB>, limit: number) {
  return db
    .selectFrom('deployment_actions')
    .select(['id', 'kind', 'status', 'exit_code as exitCode', 'actor', 'detail', 'job_id as jobId', 'target_digest as targetDigest', 'schema_migration as schemaMigration', 'created_at as createdAt', 'finished_at as finishedAt'])
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .execute();
}

/** The most recent self-updates, newest first. */
export async function recentSelfUpdates(db: Kysely<DB>, limit: number) {
  return db
    .selectFrom('self_update_status')
    .select([
      'request_id as requestId', 'phase', 'channel', 'target_tag as targetTag', 'target_digest as targetDigest', 'previous_reference as previousReference',
      'previous_digest as previousDigest', 'pre_update_migration as preUpdateMigration', 'helper_container_id as helperContainerId', 'helper_exit_code as helperExitCode',
      'detail', 'created_at as createdAt', 'finished_at as finishedAt',
    ])
    .orderBy('created_at', 'desc')
    .limit(limit)
    .execute();
}

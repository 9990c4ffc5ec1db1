// Jobs: the request row (desired state, written by the API) and the status row (observed state,
// written by the jobs controller). A request is claimed with FOR UPDATE SKIP LOCKED, so one job is
// never run twice at once, whatever number of controllers wake.
import { randomUUID } from 'node:crypto';
import { sql, type Kysely, type Transaction } from 'kysely';
import type { DB, JobPhase } from '../db/schema.ts';
import { conditionsOf, type Condition } from '../contracts/conditions.ts';
import type { JobKind } from '../contracts/job-kinds.ts';
import type { ActorKind, RecordedActor } from '../auth/actor.ts';
import { refuseConflicting } from './exclusion.ts';
import { enqueueNotification } from './notifications.ts';
import { withReconciled } from './conditions.ts';

type Conn = Kysely<DB> | Transaction<DB>;

export const JOBS_CHANNEL = 'deployment_jobs';

export interface JobParams {
  services?: string[];
  /** cancel-job: the job to cancel. */
  targetJobId?: string;
  [k: string]: unknown;
}

export interface JobView {
  jobId: string;
  kind: JobKind;
  params: JobParams;
  actor: string;
  actorEmail: string | null;
  /** Null for a request written before kinds were recorded. */
  actorKind: ActorKind | null;
  phase: JobPhase;
  state: string | null;
  detail: string | null;
  exitCode: number | null;
  createdAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
  hungDeadline: Date | null;
  cancelRequestedBy: string | null;
  /** The request's generation: 1, bumped by a cancel. */
  generation: number;
  /** The generation the jobs controller last acted on; null until it looked (or on a row from before migration 0022). */
  observedGeneration: number | null;
  conditions: Condition[];
}

/** The job's conditions: whether it is still at work (`Progressing`), and how it ended (`Succeeded`). */
export function jobConditions(end: { state: string; phase: 'completed' | 'failed'; detail: string | null } | null): Condition[] {
  const observedAt = new Date().toISOString();
  if (!end) return [{ type: 'Progressing', status: 'True', reason: 'Running', message: 'the job is running', observedAt }];
  return [
    { type: 'Progressing', status: 'False', reason: end.state, message: `the job ended ${end.phase}`, observedAt },
    { type: 'Succeeded', status: end.phase === 'completed' ? 'True' : 'False', reason: end.state, message: end.detail ?? '', observedAt },
  ];
}

/** Inserts a job request with its queued status and wakes the controllers, in one transaction. */
export async function createJob(db: Conn, input: { kind: JobKind; params: JobParams; actor: RecordedActor }): Promise<string> {
  const jobId = randomUUID();
  const write = async (tx: Transaction<DB>) => {
    if (input.kind !== 'cancel-job') {
      // A job never starts while the installer is replacing itself (the switch would kill it).
      await refuseConflicting(tx, { kind: 'job' });
    }
    await tx
      .insertInto('deployment_jobs')
      .values({
        job_id: jobId,
        kind: input.kind,
        params: JSON.stringify(input.params),
        actor: input.actor.id,
        actor_email: input.actor.email ?? null,
        actor_kind: input.actor.kind ?? null,
        cancel_requested_by: null,
        cancel_requested_at: null,
      })
      .execute();
    await tx
      .insertInto('deployment_job_status')
      .values({
        job_id: jobId, phase: 'queued', conditions: '[]', snapshot: null, chart_version: null, claimed_by: null,
        started_at: null, finished_at: null, exit_code: null, detail: null, last_output_at: null, hung_deadline: null, runner_pid: null,
      })
      .execute();
    await sql`select pg_notify(${JOBS_CHANNEL}, ${jobId})`.execute(tx);
  };
  if (db.isTransaction) await write(db as Transaction<DB>);
  else await (db as Kysely<DB>).transaction().execute(write);
  return jobId;
}

/**
 * Inserts the job of a self-update (kind `self-update`) in the transaction that writes the update's
 * request. It is `running` from the start and never queued: no claim loop takes it, and the
 * self-update reconcilers end it (src/state/self-update.ts).
 */
export async function insertSelfUpdateJob(tx: Transaction<DB>, jobId: string, actor: RecordedActor): Promise<void> {
  await tx
    .insertInto('deployment_jobs')
    .values({ job_id: jobId, kind: 'self-update', params: '{}', actor: actor.id, actor_email: actor.email ?? null, actor_kind: actor.kind ?? null, cancel_requested_by: null, cancel_requested_at: null })
    .execute();
  await tx
    .insertInto('deployment_job_status')
    .values({
      // Running as written: the update's reconcilers act on this generation of the request, the only one.
      job_id: jobId, phase: 'running', conditions: JSON.stringify(jobConditions(null)), observed_generation: 1, snapshot: null, chart_version: null, claimed_by: null,
      started_at: new Date(), finished_at: null, exit_code: null, detail: null, last_output_at: null, hung_deadline: null, runner_pid: null,
    })
    .execute();
}

const jobColumns = [
  'j.job_id', 'j.kind', 'j.params', 'j.actor', 'j.actor_email', 'j.actor_kind', 'j.created_at', 'j.cancel_requested_by', 'j.generation',
  's.phase', 's.detail', 's.exit_code', 's.started_at', 's.finished_at', 's.hung_deadline', 's.conditions', 's.snapshot', 's.observed_generation',
] as const;

type JobRow = {
  job_id: string; kind: JobKind; params: unknown; actor: string; actor_email: string | null; actor_kind: ActorKind | null; created_at: Date;
  cancel_requested_by: string | null; phase: JobPhase; detail: string | null; exit_code: number | null;
  started_at: Date | null; finished_at: Date | null; hung_deadline: Date | null; conditions: unknown; snapshot: unknown;
  generation: number; observed_generation: number | null;
};

function toView(r: JobRow): JobView {
  const snap = r.snapshot as { value?: unknown } | null;
  const value = snap?.value;
  return {
    jobId: r.job_id,
    kind: r.kind,
    params: (r.params ?? {}) as JobParams,
    actor: r.actor,
    actorEmail: r.actor_email,
    actorKind: r.actor_kind,
    phase: r.phase,
    state: value === undefined ? null : typeof value === 'string' ? value : JSON.stringify(value),
    detail: r.detail,
    exitCode: r.exit_code,
    createdAt: new Date(r.created_at),
    startedAt: r.started_at ? new Date(r.started_at) : null,
    finishedAt: r.finished_at ? new Date(r.finished_at) : null,
    hungDeadline: r.hung_deadline ? new Date(r.hung_deadline) : null,
    cancelRequestedBy: r.cancel_requested_by,
    generation: r.generation,
    observedGeneration: r.observed_generation,
    conditions: conditionsOf(r.conditions),
  };
}

export async function getJob(db: Conn, jobId: string): Promise<JobView | undefined> {
  const r = await db
    .selectFrom('deployment_jobs as j')
    .innerJoin('deployment_job_status as s', 's.job_id', 'j.job_id')
    .select(jobColumns)
    .where('j.job_id', '=', jobId)
    .executeTakeFirst();
  return r ? toView(r as JobRow) : undefined;
}

export async function listJobs(db: Conn, opts: { limit: number; phases?: JobPhase[] }): Promise<JobView[]> {
  let q = db
    .selectFrom('deployment_jobs as j')
    .innerJoin('deployment_job_status as s', 's.job_id', 'j.job_id')
    .select(jobColumns)
    .orderBy('j.created_at', 'desc')
    .limit(opts.limit);
  if (opts.phases?.length) q = q.where('s.phase', 'in', opts.phases);
  return (await q.execute()).map((r) => toView(r as JobRow));
}

/**
 * Claims the oldest queued job of the given kinds for this worker: its status becomes running.
 * Returns undefined when there is none (or all are claimed by others).
 */
export async function claimNextJob(
  db: Kysely<DB>,
  worker: string,
  kinds: { only?: JobKind[]; except?: JobKind[] },
  /** Written with the claim, so that a job that never writes output still has a deadline. */
  hungDeadline: Date | null = null,
): Promise<JobView | undefined> {
  const jobId = await db.transaction().execute(async (tx) => {
    let q = tx
      .selectFrom('deployment_job_status as s')
      .innerJoin('deployment_jobs as j', 'j.job_id', 's.job_id')
      .select(['s.job_id', 'j.generation'])
      .where('s.phase', '=', 'queued')
      .orderBy('j.created_at')
      .limit(1)
      .forUpdate('s')
      .skipLocked();
    if (kinds.only) q = q.where('j.kind', 'in', kinds.only);
    if (kinds.except) q = q.where('j.kind', 'not in', kinds.except);
    const row = await q.executeTakeFirst();
    if (!row) return undefined;
    await tx
      .updateTable('deployment_job_status')
      // The claim acts on the request as it reads it: that generation is observed.
      .set({ phase: 'running', claimed_by: worker, started_at: new Date(), updated_at: new Date(), observed_generation: row.generation, ...(hungDeadline ? { hung_deadline: hungDeadline } : {}) })
      .where('job_id', '=', row.job_id)
      .execute();
    return row.job_id;
  });
  return jobId ? getJob(db, jobId) : undefined;
}

export interface StatusPatch {
  snapshot?: unknown;
  chartVersion?: string;
  detail?: string | null;
  exitCode?: number | null;
  lastOutputAt?: Date;
  hungDeadline?: Date | null;
  runnerPid?: number | null;
  conditions?: Condition[];
}

export async function updateJobStatus(db: Conn, jobId: string, patch: StatusPatch): Promise<void> {
  await db
    .updateTable('deployment_job_status')
    .set({
      ...(patch.snapshot !== undefined ? { snapshot: JSON.stringify(patch.snapshot) } : {}),
      ...(patch.chartVersion !== undefined ? { chart_version: patch.chartVersion } : {}),
      ...(patch.detail !== undefined ? { detail: patch.detail } : {}),
      ...(patch.exitCode !== undefined ? { exit_code: patch.exitCode } : {}),
      ...(patch.lastOutputAt !== undefined ? { last_output_at: patch.lastOutputAt } : {}),
      ...(patch.hungDeadline !== undefined ? { hung_deadline: patch.hungDeadline } : {}),
      ...(patch.runnerPid !== undefined ? { runner_pid: patch.runnerPid } : {}),
      // The runtime's `Reconciled` condition is its own: a write of the chart's conditions keeps it.
      ...(patch.conditions !== undefined ? { conditions: withReconciled(patch.conditions) as never } : {}),
      updated_at: new Date(),
    })
    .where('job_id', '=', jobId)
    .execute();
}

/** The observed generation moved up to `generation`, never lowered. */
const observedAtLeast = (generation: number) => sql<number>`greatest(coalesce(observed_generation, 0), ${generation})`;

/** Written by a job's reconciler: the request's generation it has acted on. */
export async function observeJobGeneration(db: Conn, jobId: string, generation: number): Promise<void> {
  await db
    .updateTable('deployment_job_status')
    .set({ observed_generation: observedAtLeast(generation), updated_at: new Date() })
    .where('job_id', '=', jobId)
    .execute();
}

/**
 * Ends a job: phase completed or failed, with its detail, exit code and end conditions (`state`:
 * the chart's final state, their reason; the phase when not given), and the request's generation
 * the end answers when it is the reconciler's answer to a change (`observedGeneration`: a cancel).
 * Only a running or queued job ends. A job that fails queues a `job.failed` notification in the
 * same transaction.
 */
export async function finishJob(
  db: Conn,
  jobId: string,
  outcome: { phase: 'completed' | 'failed'; state?: string; detail: string | null; exitCode: number | null; observedGeneration?: number },
  from: readonly JobPhase[] = ['queued', 'running'],
): Promise<boolean> {
  const conditions = withReconciled(jobConditions({ state: outcome.state ?? outcome.phase, phase: outcome.phase, detail: outcome.detail }));
  const observed = outcome.observedGeneration !== undefined ? { observed_generation: observedAtLeast(outcome.observedGeneration) } : {};
  const write = async (tx: Conn) => {
    const res = await tx
      .updateTable('deployment_job_status')
      .set({ phase: outcome.phase, detail: outcome.detail, exit_code: outcome.exitCode, conditions: conditions as never, ...observed, finished_at: new Date(), updated_at: new Date(), runner_pid: null })
      .where('job_id', '=', jobId)
      .where('phase', 'in', from)
      .executeTakeFirst();
    const ended = Number(res.numUpdatedRows) > 0;
    if (ended && outcome.phase === 'failed') {
      const job = await tx.selectFrom('deployment_jobs').select(['kind', 'actor', 'created_at']).where('job_id', '=', jobId).executeTakeFirst();
      // A cancel request that finds its job already ended is not a failure anyone is paged for.
      // A self-update's failure has notifications of its own (self-update.failed, …).
      if (job && job.kind !== 'cancel-job' && job.kind !== 'self-update') {
        await enqueueNotification(tx, {
          type: 'job.failed',
          eventId: `job.failed:${jobId}`,
          data: { jobId, kind: job.kind, actor: job.actor, detail: outcome.detail, exitCode: outcome.exitCode },
        });
      }
    }
    return ended;
  };
  if (outcome.phase !== 'failed' || db.isTransaction) return write(db);
  return db.transaction().execute(write);
}

/** Records who asked to cancel a job, a new generation of its request; false when the job has already ended. */
export async function requestCancel(db: Conn, jobId: string, by: string): Promise<boolean> {
  const res = await db
    .updateTable('deployment_jobs')
    .set({ cancel_requested_by: by, cancel_requested_at: new Date(), generation: sql<number>`generation + 1` })
    .where('job_id', '=', jobId)
    .where('cancel_requested_at', 'is', null)
    .where(({ exists, selectFrom }) =>
      exists(selectFrom('deployment_job_status').select('job_id').whereRef('deployment_job_status.job_id', '=', 'deployment_jobs.job_id').where('phase', 'in', ['queued', 'running'])),
    )
    .executeTakeFirst();
  return Number(res.numUpdatedRows) > 0;
}

/** Running jobs of the given kinds whose hung deadline has passed (the database's clock), with their last output. */
export async function overdueJobs(db: Conn, kinds: readonly JobKind[]): Promise<{ jobId: string; lastOutputAt: Date | null; hungDeadline: Date }[]> {
  const rows = await db
    .selectFrom('deployment_job_status as s')
    .innerJoin('deployment_jobs as j', 'j.job_id', 's.job_id')
    .select(['s.job_id', 's.last_output_at', 's.started_at', 's.hung_deadline'])
    .where('s.phase', '=', 'running')
    .where('j.kind', 'in', kinds)
    .where('s.hung_deadline', '<', sql<Date>`now()`)
    .execute();
  return rows.map((r) => ({ jobId: r.job_id, lastOutputAt: r.last_output_at ?? r.started_at, hungDeadline: r.hung_deadline! }));
}

/** Jobs left running by a process that is gone (a backend restart), with the runner's pid. */
export async function runningJobs(db: Conn): Promise<{ jobId: string; kind: JobKind; runnerPid: number | null }[]> {
  const rows = await db
    .selectFrom('deployment_job_status as s')
    .innerJoin('deployment_jobs as j', 'j.job_id', 's.job_id')
    .select(['s.job_id', 'j.kind', 's.runner_pid'])
    .where('s.phase', '=', 'running')
    // A self-update's job is not run by a job runner: the self-update reconcilers end it.
    .where('j.kind', '!=', 'self-update')
    .execute();
  return rows.map((r) => ({ jobId: r.job_id, kind: r.kind, runnerPid: r.runner_pid }));
}

const RECENTLY_ENDED = 20;

/**
 * Jobs that ended but whose end was not fully written: the backend stopped between the status row
 * and the audit row or the `finished` event. Only the newest ended jobs can be caught so (a restart
 * interrupts the few ending at that moment), so only they are looked at. Jobs whose events were all
 * pruned by retention are left alone (no event at all and no audit row open).
 */
export async function unsettledEndedJobs(db: Conn): Promise<{
  jobId: string; phase: 'completed' | 'failed'; detail: string | null; exitCode: number | null; state: string | null; hasFinished: boolean;
}[]> {
  const rows = await db
    .selectFrom('deployment_job_status as s')
    .select(['s.job_id', 's.phase', 's.detail', 's.exit_code', 's.snapshot'])
    .select(({ exists, selectFrom }) =>
      exists(selectFrom('deployment_job_events as e').select('e.seq').whereRef('e.job_id', '=', 's.job_id').where('e.type', '=', 'finished')).as('has_finished'),
    )
    .where('s.job_id', 'in', (eb) =>
      eb.selectFrom('deployment_job_status').select('job_id').where('phase', 'in', ['completed', 'failed']).orderBy('finished_at', 'desc').limit(RECENTLY_ENDED),
    )
    // A self-update's job ends in one transaction with its `finished` event.
    .where('s.job_id', 'not in', (eb) => eb.selectFrom('deployment_jobs').select('job_id').where('kind', '=', 'self-update'))
    .where(({ exists, not, and, or, selectFrom }) =>
      or([
        exists(selectFrom('deployment_actions as a').select('a.id').whereRef('a.job_id', '=', 's.job_id').where('a.status', '=', 'started')),
        and([
          not(exists(selectFrom('deployment_job_events as e').select('e.seq').whereRef('e.job_id', '=', 's.job_id').where('e.type', '=', 'finished'))),
          exists(selectFrom('deployment_job_events as e').select('e.seq').whereRef('e.job_id', '=', 's.job_id')),
        ]),
      ]),
    )
    .execute();
  return rows.map((r) => {
    const value = (r.snapshot as { value?: unknown } | null)?.value;
    return {
      jobId: r.job_id,
      phase: r.phase as 'completed' | 'failed',
      detail: r.detail,
      exitCode: r.exit_code,
      state: typeof value === 'string' ? value : null,
      hasFinished: Boolean(r.has_finished),
    };
  });
}

/** What the job queue holds now (diagnostics): the running jobs and how many wait, whichever process runs them. */
export async function queueState(db: Conn): Promise<{ running: string[]; queueSize: number }> {
  const rows = await db.selectFrom('deployment_job_status').select(['job_id', 'phase']).where('phase', 'in', ['queued', 'running']).execute();
  return { running: rows.filter((r) => r.phase === 'running').map((r) => r.job_id), queueSize: rows.filter((r) => r.phase === 'queued').length };
}

/** When the most recent job ended (null before any did): rows observed earlier may be stale, since jobs change the platform. */
export async function lastJobEnd(db: Conn): Promise<Date | null> {
  const row = await db.selectFrom('deployment_job_status').select((eb) => eb.fn.max('finished_at').as('at')).executeTakeFirst();
  return row?.at ? new Date(row.at) : null;
}

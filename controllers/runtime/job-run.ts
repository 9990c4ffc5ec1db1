// What every job kind's reconciler shares: opening the job's event stream and audit row, the
// output/phase/hung-deadline writer (`JobIO`), running the kind's chart with its snapshot persisted,
// and recording the end in three steps (status row, audit row, `finished` event), plus closing at
// boot the jobs a restart interrupted. A kind supplies only its chart and actors (`ChartPlan`).
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DB, JobPhase } from '../../src/db/schema.ts';
import { finishJob, getJob, jobConditions, observeJobGeneration, runningJobs, unsettledEndedJobs, updateJobStatus, type JobView } from '../../src/state/jobs.ts';
import { hasJobEvent } from '../../src/state/job-events.ts';
import { putReconciled } from '../../src/state/conditions.ts';
import type { RowStatus } from './reconcile.ts';
import { recordFinished, recordStarted } from '../../src/state/actions.ts';
import type { JobEventLog } from '../../src/state/job-events.ts';
import { hungMessage, phaseOf, type jobMachine, type JobChartOutput } from '../../machines/job.machine.ts';
import type { hostMigrationMachine } from '../../machines/host-migration.machine.ts';
import { OrderedWrites, runChart, type RunningChart } from './run-chart.ts';

/** How a job writes what it does: output lines, warnings, phases, and the hung deadline. */
export interface JobIO {
  line(type: 'output' | 'progress' | 'warning', payload: Record<string, unknown>, text: string): void;
  phase(name: string, extra?: Record<string, unknown>): void;
  touch(force?: boolean): void;
}

/** The job kinds' charts: their final states output how the job ended. */
type JobChart = typeof jobMachine | typeof hostMigrationMachine;

/** A job kind's chart, its input, and a way to wait until the processes it started are gone. */
export interface ChartPlan {
  machine: JobChart;
  input: unknown;
  chartVersion: string;
  /** What the job's audit row says it does. */
  auditDetail: string;
  /** Extra fields of the `started` phase event. */
  startedExtra: Record<string, unknown>;
  settled(): Promise<unknown>;
}

export interface JobRunDeps {
  db: Kysely<DB>;
  events: JobEventLog;
  logger: Logger;
  /** Job output mirrored to stdout whatever LOG_LEVEL is (see `mirrorLogger`). */
  mirror: Logger;
  hungMinutes: number;
}

/**
 * Job output mirrored to the backend's stdout whatever LOG_LEVEL is: deployment output must survive
 * a backend restart and reach the platform's log pipeline (the spec), so its lines are not subject
 * to the level that filters the backend's own messages.
 */
export function mirrorLogger(logger: Logger): Logger {
  return logger.child({ mirror: 'job-output' }, { level: 'info' });
}

export const INTERRUPTED = 'interrupted: the backend restarted while the job was running';

async function finishAudit(db: Kysely<DB>, jobId: string, status: 'completed' | 'failed', exitCode: number | null, detail: string | null): Promise<void> {
  const rows = await db.selectFrom('deployment_actions').select('id').where('job_id', '=', jobId).where('status', '=', 'started').execute();
  // No detail (a success) keeps the one written at the start: which services were acted on.
  for (const r of rows) await recordFinished(db, r.id, { status, exitCode, ...(detail !== null ? { detail } : {}) });
}

/** What a job's run has written so far in this process, so that a retry after a throw goes on from there. */
interface JobProgress {
  /** The chart ran once: its end, recorded until that sticks (a retry never runs the chart again). */
  end?: JobEnd;
}

/** How a job ended: its status row's phase, the chart's final state, detail and exit code. */
export interface JobEnd {
  phase: 'completed' | 'failed';
  state: string;
  detail: string | null;
  exitCode: number | null;
}

/** The running jobs of this process, so that a cancel written on a job's row reaches its chart. */
export class RunningJobs {
  private readonly charts = new Map<string, RunningChart>();
  private readonly progress = new Map<string, JobProgress>();

  constructor(private readonly db: Kysely<DB>) {}

  add(jobId: string, chart: RunningChart): void {
    this.charts.set(jobId, chart);
  }

  delete(jobId: string): void {
    this.charts.delete(jobId);
    this.progress.delete(jobId);
  }

  /** Whether this process ran the job's chart and is recording its end. */
  ending(jobId: string): boolean {
    return this.progress.get(jobId)?.end !== undefined;
  }

  progressOf(jobId: string): JobProgress {
    let p = this.progress.get(jobId);
    if (!p) this.progress.set(jobId, (p = {}));
    return p;
  }

  /**
   * Level-based: each running job whose row now asks for a cancel gets CANCEL (the chart ignores
   * repeats), and its status then answers that generation of the request.
   */
  async watch(): Promise<void> {
    for (const [jobId, chart] of this.charts) {
      const row = await getJob(this.db, jobId);
      if (row?.cancelRequestedBy) await cancelChart(this.db, row, chart);
    }
  }
}

/**
 * Runs one claimed job: event stream, audit row, the kind's chart, and its end recorded. Safe to
 * call again after a throw (the runtime's retry): what was written is not written twice, and a
 * chart that ran is not run again, only its end recorded. `signal` stops the chart (the watchdog).
 */
export async function runJob(d: JobRunDeps, job: JobView, running: RunningJobs, planFor: (io: JobIO) => ChartPlan, signal?: AbortSignal): Promise<void> {
  const { db, events, logger } = d;
  const jobId = job.jobId;
  const progress = running.progressOf(jobId);
  if (progress.end) {
    await recordEnd(d, jobId, progress.end);
    running.delete(jobId);
    return;
  }
  const services = job.params.services ?? [];
  await events.open(jobId);

  let deadlineWrittenAt = 0;
  const hungMs = d.hungMinutes * 60_000;
  const io: JobIO = {
    touch: (force = false) => {
      const now = Date.now();
      if (!force && now - deadlineWrittenAt < 5_000) return;
      deadlineWrittenAt = now;
      void updateJobStatus(db, jobId, { lastOutputAt: new Date(now), hungDeadline: new Date(now + hungMs) }).catch(() => {});
    },
    line: (type, payload, text) => {
      void events.append(jobId, type, payload).catch((err) => logger.error({ err, jobId }, 'job event not stored'));
      // Mirrored to the backend's stdout so deployment output survives a restart of the backend.
      d.mirror.info({ jobId }, `[job ${jobId}] ${text}`);
    },
    phase: (name, extra = {}) => {
      void events.append(jobId, 'phase', { phase: name, ...extra }).catch((err) => logger.error({ err, jobId }, 'job event not stored'));
    },
  };
  const plan = planFor(io);
  // Re-read on a retry: the audit row and the `started` event are written once.
  if (!(await hasAuditRow(db, jobId))) {
    await recordStarted(db, { kind: job.kind, actor: { id: job.actor, email: job.actorEmail, kind: job.actorKind }, jobId, detail: plan.auditDetail });
  }
  if (!(await hasJobEvent(db, jobId, 'phase', { key: 'phase', value: 'started' }))) {
    logger.info({ jobId, kind: job.kind, services, actor: job.actor }, `job ${jobId} started: ${job.kind}`);
    await events.append(jobId, 'phase', { phase: 'started', kind: job.kind, services, ...plan.startedExtra });
  }
  await updateJobStatus(db, jobId, { conditions: jobConditions(null) });

  const writes = new OrderedWrites(() => {});
  const result = await runChart({
    machine: plan.machine,
    input: plan.input,
    writes,
    persist: (snapshot) => updateJobStatus(db, jobId, { snapshot, chartVersion: plan.chartVersion }),
    onChartError: (err) => logger.error({ err, jobId }, 'job chart failed'),
    // The end is recorded at once, beside snapshot writes still in flight; the final snapshot goes last.
    awaitWrites: false,
    ...(signal ? { signal } : {}),
    started: async (chart) => {
      running.add(jobId, chart);
      // A cancel that arrived before the job was claimed takes effect now (or at the next wake,
      // if the row cannot be read: the chart runs on either way).
      const fresh = await getJob(db, jobId).catch(() => null);
      if (fresh?.cancelRequestedBy) await cancelChart(db, fresh, chart).catch(() => {});
    },
  });

  // Whatever ended the chart, its processes are gone before the job is reported finished.
  await Promise.race([plan.settled(), new Promise((r) => setTimeout(r, 10_000))]);
  if (result.stopped) {
    // Stopped by the watchdog, which records the end.
    running.delete(jobId);
    return;
  }
  // A chart that threw has no output: the job failed, with what its context holds.
  const snap = result.snapshot;
  const end: JobChartOutput = snap.output ?? { state: 'failed', detail: snap.context.detail, exitCode: snap.context.exitCode };
  const phase = phaseOf(end.state);
  const detail: string | null = end.detail ?? (phase === 'completed' ? null : 'the job chart stopped unexpectedly');
  progress.end = { phase, state: end.state, detail, exitCode: end.exitCode };
  await recordEnd(d, jobId, progress.end, { snapshot: result.persisted, chartVersion: plan.chartVersion, afterStatus: () => writes.flush() });
  running.delete(jobId);
  logger.info({ jobId, outcome: phase, state: end.state, exitCode: end.exitCode }, `job ${jobId} ${phase}${detail ? `: ${detail}` : ''}`);
}

/** Sends a job's chart the cancel its row asks for, and records that its status answers that generation. */
async function cancelChart(db: Kysely<DB>, row: JobView, chart: RunningChart): Promise<void> {
  chart.send({ type: 'CANCEL', by: row.cancelRequestedBy! });
  if (row.observedGeneration !== row.generation) await observeJobGeneration(db, row.jobId, row.generation);
}

async function hasAuditRow(db: Kysely<DB>, jobId: string): Promise<boolean> {
  return (await db.selectFrom('deployment_actions').select('id').where('job_id', '=', jobId).limit(1).executeTakeFirst()) !== undefined;
}

/**
 * Records a job's end in three steps: its status row (only from `from`: false when it had ended
 * already, and nothing else is written), its audit row (`audit`, default: the job's open audit
 * rows), and its `finished` event. Each later step is skipped when already written, so that calling
 * it again after a failure part way completes the rest.
 */
export async function recordEnd(
  d: Pick<JobRunDeps, 'db' | 'events'>,
  jobId: string,
  end: JobEnd,
  opts: {
    from?: readonly JobPhase[];
    audit?: () => Promise<unknown>;
    /** The request's generation this end answers (a cancel), written with it. */
    observedGeneration?: number;
    /** The chart's final snapshot, written after `afterStatus` (the snapshot writes still in flight). */
    snapshot?: unknown;
    chartVersion?: string;
    afterStatus?: () => Promise<unknown>;
  } = {},
): Promise<boolean> {
  const { db, events } = d;
  const row = await getJob(db, jobId);
  if (!row) return false;
  // A retry finds the status row already ended with this end: the rest is completed.
  const ours = (row.phase === 'completed' || row.phase === 'failed') && row.phase === end.phase && row.detail === end.detail;
  // The status row and its end conditions, in one write.
  const observed = opts.observedGeneration !== undefined ? { observedGeneration: opts.observedGeneration } : {};
  if (!ours && !(await finishJob(db, jobId, { phase: end.phase, state: end.state, detail: end.detail, exitCode: end.exitCode, ...observed }, opts.from))) return false;
  await opts.afterStatus?.();
  if (opts.snapshot !== undefined) await updateJobStatus(db, jobId, { snapshot: opts.snapshot, chartVersion: opts.chartVersion ?? '' });
  await (opts.audit ?? (() => finishAudit(db, jobId, end.phase, end.exitCode, end.detail)))();
  await events.open(jobId);
  if (!(await hasJobEvent(db, jobId, 'finished'))) {
    await events.append(jobId, 'finished', { outcome: end.phase, state: end.state, exitCode: end.exitCode, detail: end.detail });
  }
  return true;
}

/** The runtime's writes on a job's row: the error condition, and the end when retries ran out or the watchdog fired. */
export function jobRowStatus(d: Pick<JobRunDeps, 'db' | 'events' | 'logger' | 'hungMinutes'>, running: RunningJobs): RowStatus<string> {
  return {
    recordError: (jobId, condition) => putReconciled(d.db, 'deployment_job_status', jobId, condition),
    recordRecovered: (jobId, condition) => putReconciled(d.db, 'deployment_job_status', jobId, condition),
    fail: async (jobId, detail) => {
      running.delete(jobId);
      const state = detail === hungMessage(d.hungMinutes) ? 'hung' : 'failed';
      if (await recordEnd(d, jobId, { phase: 'failed', state, detail, exitCode: null }, { from: ['queued', 'running'] })) {
        d.logger.error({ jobId, state }, `job ${jobId} failed: ${detail}`);
      }
    },
  };
}

/**
 * A backend restart leaves running jobs behind: close them as failed and say why. `stop` ends the
 * processes a job left (its kind's concern). A job's end is written in three steps (status row,
 * audit row, `finished` event); a restart between them leaves an ended job with its audit row open
 * or a stream that never ends: those are finished too.
 */
export async function closeInterruptedJobs(d: Pick<JobRunDeps, 'db' | 'events' | 'logger'>, stop: (job: { runnerPid: number | null }) => void): Promise<void> {
  const { db, events, logger } = d;
  for (const j of await runningJobs(db)) {
    stop(j);
    if (!(await recordEnd(d, j.jobId, { phase: 'failed', state: 'interrupted', detail: INTERRUPTED, exitCode: null }, { from: ['queued', 'running'] }))) continue;
    logger.warn({ jobId: j.jobId, kind: j.kind }, INTERRUPTED);
  }
  for (const j of await unsettledEndedJobs(db)) {
    await events.open(j.jobId);
    await finishAudit(db, j.jobId, j.phase, j.exitCode, j.detail);
    if (!j.hasFinished) {
      const state = j.state && j.detail !== INTERRUPTED ? j.state : 'interrupted';
      await events.append(j.jobId, 'finished', { outcome: j.phase, state, exitCode: j.exitCode, detail: j.detail });
    }
    logger.warn({ jobId: j.jobId }, `job ${j.jobId} had ended (${j.phase}) without its end fully recorded; recorded now`);
  }
}

/** Records a job that ended without running (a cancel request's own end, or a cancelled queued job). */
export async function finishUnrun(
  d: Pick<JobRunDeps, 'db' | 'events'>,
  jobId: string,
  end: { phase: 'completed' | 'failed'; state: string; detail: string; from?: readonly JobPhase[]; observedGeneration?: number },
  /** Written between the status row and the `finished` event (the job's audit row), as for every job. */
  audit?: () => Promise<unknown>,
): Promise<boolean> {
  const { phase, state, detail, from, observedGeneration } = end;
  return recordEnd(d, jobId, { phase, state, detail, exitCode: null }, {
    ...(from ? { from } : {}),
    ...(audit ? { audit } : {}),
    ...(observedGeneration !== undefined ? { observedGeneration } : {}),
  });
}

// The controllers of one process: one reconciler per kind on the shared runtime (runtime/work-queue.ts,
// docs/adr/0042-reconcile-contract.md). Job kinds run one at a time through one queue (compose jobs
// and the host migration never overlap); cancels, self-update requests, the self-update outcome,
// webhook deliveries and the update policy each have their own. Reconcilers never import one another: they meet only in the database (rows, and NOTIFY
// to wake each other).
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DB } from '../src/db/schema.ts';
import { JOB_KINDS, QUEUED_KINDS, type JobKind } from '../src/contracts/job-kinds.ts';
import type { RuntimePort } from '../src/contracts/ports.ts';
import type { SignaturePort } from '../src/contracts/signatures.ts';
import { claimNextJob, JOBS_CHANNEL, overdueJobs } from '../src/state/jobs.ts';
import { SELF_UPDATE_CHANNEL } from '../src/state/self-update.ts';
import { closeOrphanedRuns } from '../src/state/reconcile-runs.ts';
import { OBSERVED_WRITTEN_CHANNEL } from '../src/state/observed.ts';
import { UPDATE_POLICY_CHANNEL } from '../src/state/update-policy.ts';
import type { JobEventLog } from '../src/state/job-events.ts';
import type { Sealer } from '../src/state/platform-config.ts';
import type { HostRunner } from '../src/adapters/host-runner.ts';
import type { InstallerEnv, PlatformFiles } from '../src/adapters/platform-files.ts';
import type { SelfUpdateEngine, SelfUpdateSettings } from '../src/adapters/self-update.ts';
import { sharedListen, type Listen } from './runtime/shared-listen.ts';
import { closeInterruptedJobs, jobRowStatus, mirrorLogger, RunningJobs } from './runtime/job-run.ts';
import { WorkQueue } from './runtime/work-queue.ts';
import { DEFAULT_BACKOFF, done, type Backoff, type RowStatus } from './runtime/reconcile.ts';
import { hungMessage } from '../machines/job.machine.ts';
import { ComposeJobReconciler, type ComposeJobDeps } from './compose-job.ts';
import { HostMigrationReconciler } from './host-migration.ts';
import { CancelJobReconciler } from './cancel-job.ts';
import { SelfUpdateReconciler } from './self-update.ts';
import { SelfUpdateOutcomeReconciler } from './self-update-outcome.ts';
import { UpdatePolicyReconciler, type UpdatePolicyDeps } from './update-policy.ts';
import { Observer, type ObserverDeps } from './observer.ts';
import { NotificationsReconciler, type RetryPolicy } from './notifications.ts';
import { NOTIFICATIONS_CHANNEL } from '../src/state/notifications.ts';
import type { ClaimedDelivery } from '../src/state/notifications.ts';

export interface ControllersDeps {
  db: Kysely<DB>;
  listen: Listen;
  events: JobEventLog;
  logger: Logger;
  workerId: string;
  pollMs?: number;
  /** How long the event log keeps a finished job in memory; swept once a minute. */
  sweepMs?: number;
  jobs: {
    platform: PlatformFiles;
    sealer: Sealer;
    pruneImages: () => Promise<{ deleted: number; reclaimedBytes: number }>;
    hungMinutes: number;
    templatesUrl?: string | undefined;
    installerEnv?: () => InstallerEnv;
    hostRunner?: HostRunner | undefined;
    migrateHostScriptPath: string;
    /** The platform's images' signature check in the jobs that pull or start them (docs/adr/0053-signed-builds.md). */
    platformImages?: ComposeJobDeps['platformImages'];
    /** With PLATFORM_RUNTIME=swarm: the stack the platform's jobs act on (docs/adr/0056-platform-on-a-swarm.md). */
    swarm?: ComposeJobDeps['swarm'];
  };
  /** What the observer reads the world with (docs/adr/0023-observed-state.md). */
  observe: Omit<ObserverDeps, 'db' | 'listen' | 'logger'>;
  selfUpdate: {
    engine: SelfUpdateEngine;
    runtime: RuntimePort;
    settings: SelfUpdateSettings;
    channel: string | undefined;
    retryMs?: number;
    helperGraceMs?: number;
    /** Replaces secrets in the update's transcript (its job events). */
    scrub?: (text: string) => string;
    /** The target build's signature check (docs/adr/0053-signed-builds.md). */
    signatures?: SignaturePort;
  };
  /** Webhook deliveries (docs/notifications.md); the endpoints' secrets are opened with `jobs.sealer`. */
  notifications: { timeoutMs: number; retry: RetryPolicy; scrub?: (text: string) => string };
  /** Retries of a reconcile that threw (docs/adr/0042-reconcile-contract.md). */
  backoff?: Backoff;
  /** How often the watchdog looks for rows past their deadline. */
  watchdogMs?: number;
  /** The update policy's clock, its backstop poll and its notification hook. */
  updatePolicy?: Pick<UpdatePolicyDeps, 'now' | 'onUpdateAvailable'> & { pollMs?: number };
}

/** Which controllers to start: all of them by default. */
export type ControllerGroup = 'jobs' | 'self-update' | 'observer' | 'notifications' | 'update-policy';
const ALL_GROUPS: ControllerGroup[] = ['jobs', 'self-update', 'observer', 'notifications', 'update-policy'];

export class Controllers {
  private readonly abort = new AbortController();
  private readonly running: RunningJobs;
  private readonly composeJob: ComposeJobReconciler;
  private readonly hostMigration: HostMigrationReconciler;
  private readonly selfUpdate: SelfUpdateReconciler;
  private readonly outcome: SelfUpdateOutcomeReconciler;
  private readonly jobQueue: WorkQueue<string>;
  private readonly cancelQueue: WorkQueue<string>;
  private readonly updateQueue: WorkQueue<string>;
  private readonly outcomeQueue: WorkQueue<null>;
  private readonly notifications: NotificationsReconciler;
  private readonly notifyQueue: WorkQueue<ClaimedDelivery>;
  private readonly policy: UpdatePolicyReconciler;
  private readonly policyQueue: WorkQueue<null>;
  /** The one writer of observed state; tests start it alone (it claims nothing, see its file). */
  readonly observer: Observer;
  private sweeper: NodeJS.Timeout | undefined;
  private prepared = false;

  constructor(private readonly d: ControllersDeps) {
    const listen = sharedListen(d.listen);
    const signal = this.abort.signal;
    const jobLog = d.logger.child({ controller: 'jobs' });
    const updateLog = d.logger.child({ controller: 'self-update' });
    const jobDeps = { db: d.db, events: d.events, logger: jobLog, mirror: mirrorLogger(jobLog), ...d.jobs };
    const hungMs = d.jobs.hungMinutes * 60_000;
    const backoff = d.backoff ?? DEFAULT_BACKOFF;
    const watchdogMs = d.watchdogMs ?? 30_000;
    this.running = new RunningJobs(d.db);
    this.observer = new Observer({ db: d.db, listen, logger: d.logger, ...d.observe });
    this.composeJob = new ComposeJobReconciler(jobDeps, this.running);
    this.hostMigration = new HostMigrationReconciler(jobDeps, this.running);
    const cancel = new CancelJobReconciler({ db: d.db, events: d.events, hungMinutes: d.jobs.hungMinutes });
    this.selfUpdate = new SelfUpdateReconciler({ db: d.db, logger: updateLog, workerId: d.workerId, signal, hungMinutes: d.jobs.hungMinutes, ...d.selfUpdate });
    this.outcome = new SelfUpdateOutcomeReconciler({
      db: d.db, logger: updateLog, workerId: d.workerId, signal, engine: d.selfUpdate.engine, runtime: d.selfUpdate.runtime,
      repository: d.selfUpdate.settings.repository, ...(d.selfUpdate.retryMs !== undefined ? { retryMs: d.selfUpdate.retryMs } : {}),
      ...(d.selfUpdate.scrub ? { scrub: d.selfUpdate.scrub } : {}),
    });
    const common = { listen, backoff, ...(d.pollMs !== undefined ? { pollMs: d.pollMs } : {}) };
    const jobStatus = jobRowStatus(jobDeps, this.running);
    const hung = hungMessage(d.jobs.hungMinutes);
    const overdue = (kinds: readonly JobKind[]) => async () => (await overdueJobs(d.db, kinds)).map((j) => ({ key: j.jobId, detail: hung }));
    // Job kinds run one at a time (compose jobs and the host migration never overlap): a job
    // waiting for a retry holds the one place.
    this.jobQueue = new WorkQueue<string>({
      ...common,
      logger: jobLog,
      concurrency: 1,
      channels: [JOBS_CHANNEL],
      reconciler: {
        name: 'jobs',
        reconcile: async (jobId, keySignal) => {
          const chart = await this.chartOf(jobId);
          return chart === 'host-migration' ? this.hostMigration.reconcile(jobId, keySignal) : this.composeJob.reconcile(jobId, keySignal);
        },
      },
      status: jobStatus,
      claim: async () => (await claimNextJob(d.db, d.workerId, { only: [...QUEUED_KINDS] }, new Date(Date.now() + hungMs)))?.jobId,
      // A cancel is written on the running job's row: its chart gets CANCEL at the next wake.
      onWake: () => this.running.watch(),
      // A job's chart runs on while the process stops (a restart closes it as interrupted); only the watchdog stops it.
      stopAborts: false,
      watchdog: { everyMs: watchdogMs, overdue: overdue(QUEUED_KINDS) },
    });
    this.cancelQueue = new WorkQueue<string>({
      ...common,
      logger: jobLog,
      channels: [JOBS_CHANNEL],
      reconciler: cancel,
      status: jobStatus,
      claim: async () => (await claimNextJob(d.db, `${d.workerId}:cancel`, { only: ['cancel-job'] }, new Date(Date.now() + hungMs)))?.jobId,
      watchdog: { everyMs: watchdogMs, overdue: overdue(['cancel-job']) },
    });
    this.updateQueue = new WorkQueue<string>({
      ...common,
      logger: updateLog,
      concurrency: 1,
      channels: [SELF_UPDATE_CHANNEL],
      reconciler: this.selfUpdate,
      status: this.selfUpdate.rowStatus(),
      claim: async () => (await this.selfUpdate.claim())?.requestId,
      watchdog: { everyMs: watchdogMs, overdue: () => this.selfUpdate.overdue() },
    });
    // Keyless: every wake asks the outcome's reconciler whether a helper is running. Its runs are
    // rows of their own (reconcile_runs); an error is logged there and retried.
    this.outcomeQueue = new WorkQueue<null>({
      ...common,
      logger: updateLog,
      channels: [SELF_UPDATE_CHANNEL],
      reconciler: this.outcome,
      status: loggedOnly(updateLog, 'self-update outcome'),
    });
    this.notifications = new NotificationsReconciler({ db: d.db, logger: d.logger.child({ controller: 'notifications' }), sealer: d.jobs.sealer, ...d.notifications });
    this.notifyQueue = new WorkQueue<ClaimedDelivery>({
      ...common,
      logger: d.logger,
      channels: [NOTIFICATIONS_CHANNEL],
      reconciler: { name: 'notifications', reconcile: async (c) => (await this.notifications.reconcile(c), done()) },
      // A delivery's outcome is on its row; a throw (the row could not be written) is retried, and
      // a claimed row whose retries ran out comes due again when its lease ends.
      status: loggedOnly(d.logger, 'notifications'),
      idOf: (c) => String(c.id),
      claim: () => this.notifications.claim(),
    });
    this.notifications.wake = () => this.notifyQueue.wake();
    // Keyless too: the policy is one row. It wakes when the policy or the quarantine changes, when
    // the observer wrote the channel row, when a job or an update changes phase, when its window
    // opens (the reconciler's requeue-after), and on a one-minute poll as a backstop.
    const { pollMs: policyPollMs, ...policyDeps } = d.updatePolicy ?? {};
    this.policy = new UpdatePolicyReconciler({ db: d.db, logger: d.logger.child({ controller: 'update-policy' }), signal, ...policyDeps });
    const channelWrites: Listen = (channel, onNotify) =>
      listen(channel, (payload) => {
        if (channel !== OBSERVED_WRITTEN_CHANNEL || payload === 'channel') onNotify(payload);
      });
    this.policyQueue = new WorkQueue<null>({
      ...common,
      listen: channelWrites,
      logger: d.logger.child({ controller: 'update-policy' }),
      pollMs: policyPollMs ?? 60_000,
      channels: [UPDATE_POLICY_CHANNEL, OBSERVED_WRITTEN_CHANNEL, SELF_UPDATE_CHANNEL, JOBS_CHANNEL],
      reconciler: this.policy,
      status: loggedOnly(d.logger, 'update policy'),
    });
  }

  private async chartOf(jobId: string): Promise<string> {
    const row = await this.d.db.selectFrom('deployment_jobs').select('kind').where('job_id', '=', jobId).executeTakeFirst();
    return row ? JOB_KINDS[row.kind].chart : 'job';
  }

  /**
   * Closes what a restart interrupted, from the database alone (no loop, no LISTEN connection), so
   * that the API, which may answer before the loops run, never shows it as still running. `start`
   * runs it if nobody did.
   */
  async prepare(groups: ControllerGroup[] = ALL_GROUPS): Promise<void> {
    if (this.prepared) return;
    this.prepared = true;
    if (groups.includes('jobs')) {
      await closeInterruptedJobs({ db: this.d.db, events: this.d.events, logger: this.d.logger.child({ controller: 'jobs' }) }, (j) => this.composeJob.stopLeftover(j));
    }
    // Before the outcome's first run: an interrupted preflight whose helper did start becomes in flight.
    if (groups.includes('self-update')) {
      await this.selfUpdate.closeInterrupted();
      // Runs of the outcome's chart a process that is gone left open: this boot's run takes over.
      const closed = await closeOrphanedRuns(this.d.db, this.d.workerId);
      if (closed) this.d.logger.child({ controller: 'self-update' }).info({ closed }, 'closed the reconciliation runs a previous process left unfinished');
    }
  }

  /** Starts the given controllers (all by default). Call once the database is migrated. */
  async start(groups: ControllerGroup[] = ALL_GROUPS): Promise<void> {
    await this.prepare(groups);
    // Side by side: each start opens its LISTEN connections (one per channel, shared) and runs its
    // watchdog's first pass; none waits for another, and the boot waits for the slowest alone.
    const starts: Promise<void>[] = [];
    if (groups.includes('jobs')) {
      starts.push(this.jobQueue.start(), this.cancelQueue.start());
      this.sweeper = setInterval(() => this.d.events.sweep(), this.d.sweepMs ?? 60_000);
      this.sweeper.unref();
    }
    // The outcome's run is not awaited: the backend must come up (and be judged healthy) while the helper still waits.
    if (groups.includes('self-update')) starts.push(this.updateQueue.start(), this.outcomeQueue.start());
    if (groups.includes('observer')) starts.push(this.observer.start());
    if (groups.includes('notifications')) starts.push(this.notifyQueue.start());
    if (groups.includes('update-policy')) starts.push(this.policyQueue.start());
    await Promise.all(starts);
  }

  async stop(): Promise<void> {
    clearInterval(this.sweeper);
    this.abort.abort();
    await this.observer.stop();
    this.notifications.stop();
    await Promise.all([this.jobQueue, this.cancelQueue, this.updateQueue, this.outcomeQueue, this.notifyQueue, this.policyQueue].map((q) => q.stop()));
  }

  /** The update policy's reconciliation, run now (tests); an error is logged. */
  async reconcilePolicy(): Promise<void> {
    await this.policy.reconcile().catch((err: unknown) => this.d.logger.error({ err }, 'update policy reconciliation failed'));
  }

  /** The outcome's reconciliation, run now if an update's helper is running (tests); an error is logged. */
  async reconcileOutcome(): Promise<void> {
    await this.outcome.reconcile().catch((err: unknown) => this.d.logger.error({ err }, 'self-update reconciliation failed'));
  }

  /** Runs every watchdog now (tests). */
  async watchdog(): Promise<void> {
    await Promise.all([this.jobQueue.watchdog(), this.cancelQueue.watchdog(), this.updateQueue.watchdog()]);
  }
}

/** The status of a keyless reconciler's work: it has no row of its own to mark, so its errors are logged; never fatal. */
function loggedOnly<K>(logger: Logger, name: string): RowStatus<K> {
  return {
    recordError: async () => {},
    fail: async (_key, detail) => {
      logger.error(`${name}: retries ran out (${detail}); the next wake tries again`);
    },
  };
}

// The controllers of one process: one reconciler per kind on the shared runtime. Job kinds run one
// at a time through one claim loop (compose jobs and the host migration never overlap); cancels,
// self-update requests, the self-update outcome, webhook deliveries and the update policy each have
// their own. Reconcilers never import one another: they meet only in the database (rows, and NOTIFY
// to wake each other).
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DB } from '../src/db/schema.ts';
import { JOB_KINDS, QUEUED_KINDS } from '../src/contracts/job-kinds.ts';
import type { RuntimePort } from '../src/contracts/ports.ts';
import { claimNextJob, JOBS_CHANNEL } from '../src/state/jobs.ts';
import { SELF_UPDATE_CHANNEL } from '../src/state/self-update.ts';
import { OBSERVED_WRITTEN_CHANNEL } from '../src/state/observed.ts';
import { UPDATE_POLICY_CHANNEL } from '../src/state/update-policy.ts';
import type { JobEventLog } from '../src/state/job-events.ts';
import type { Sealer } from '../src/state/platform-config.ts';
import type { HostRunner } from '../src/adapters/host-runner.ts';
import type { InstallerEnv, PlatformFiles } from '../src/adapters/platform-files.ts';
import type { SelfUpdateEngine, SelfUpdateSettings } from '../src/adapters/self-update.ts';
import { ClaimLoop, sharedListen, type Listen } from './runtime/claim-loop.ts';
import { closeInterruptedJobs, mirrorLogger, RunningJobs } from './runtime/job-run.ts';
import { ComposeJobReconciler } from './compose-job.ts';
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
  };
  /** Webhook deliveries (docs/notifications.md); the endpoints' secrets are opened with `jobs.sealer`. */
  notifications: { timeoutMs: number; retry: RetryPolicy; scrub?: (text: string) => string };
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
  private readonly jobLoop: ClaimLoop<string>;
  private readonly cancelLoop: ClaimLoop<string>;
  private readonly updateLoop: ClaimLoop<string>;
  private readonly outcomeLoop: ClaimLoop<never>;
  private readonly notifications: NotificationsReconciler;
  private readonly notifyLoop: ClaimLoop<ClaimedDelivery>;
  private readonly policy: UpdatePolicyReconciler;
  private readonly policyLoop: ClaimLoop<never>;
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
    this.running = new RunningJobs(d.db);
    this.observer = new Observer({ db: d.db, listen, logger: d.logger, ...d.observe });
    this.composeJob = new ComposeJobReconciler(jobDeps, this.running);
    this.hostMigration = new HostMigrationReconciler(jobDeps, this.running);
    const cancel = new CancelJobReconciler({ db: d.db, events: d.events, signal });
    this.selfUpdate = new SelfUpdateReconciler({ db: d.db, logger: updateLog, workerId: d.workerId, signal, ...d.selfUpdate });
    this.outcome = new SelfUpdateOutcomeReconciler({
      db: d.db, logger: updateLog, workerId: d.workerId, signal, engine: d.selfUpdate.engine, runtime: d.selfUpdate.runtime,
      repository: d.selfUpdate.settings.repository, ...(d.selfUpdate.retryMs !== undefined ? { retryMs: d.selfUpdate.retryMs } : {}),
      ...(d.selfUpdate.scrub ? { scrub: d.selfUpdate.scrub } : {}),
    });
    const common = { listen, logger: d.logger, ...(d.pollMs !== undefined ? { pollMs: d.pollMs } : {}) };
    this.jobLoop = new ClaimLoop<string>({
      ...common,
      name: 'jobs',
      channels: [JOBS_CHANNEL],
      claim: async () => (await claimNextJob(d.db, d.workerId, { only: [...QUEUED_KINDS] }))?.jobId,
      reconcile: async (jobId) => {
        const chart = await this.chartOf(jobId);
        await (chart === 'host-migration' ? this.hostMigration.reconcile(jobId) : this.composeJob.reconcile(jobId));
      },
      // A cancel is written on the running job's row: its chart gets CANCEL at the next wake.
      onWake: () => this.running.watch(),
    });
    this.cancelLoop = new ClaimLoop<string>({
      ...common,
      name: 'cancels',
      channels: [JOBS_CHANNEL],
      claim: async () => (await claimNextJob(d.db, `${d.workerId}:cancel`, { only: ['cancel-job'] }))?.jobId,
      reconcile: (jobId) => cancel.reconcile(jobId),
    });
    this.updateLoop = new ClaimLoop<string>({
      ...common,
      name: 'self-update',
      channels: [SELF_UPDATE_CHANNEL],
      claim: async () => (await this.selfUpdate.claim())?.requestId,
      reconcile: (requestId) => this.selfUpdate.reconcile(requestId),
    });
    // Nothing to claim: every wake asks the outcome's reconciler whether a helper is running.
    this.outcomeLoop = new ClaimLoop<never>({
      ...common,
      name: 'self-update outcome',
      channels: [SELF_UPDATE_CHANNEL],
      claim: async () => {
        void this.outcome.reconcile();
        return undefined;
      },
      reconcile: async () => {},
    });
    this.notifications = new NotificationsReconciler({ db: d.db, logger: d.logger.child({ controller: 'notifications' }), sealer: d.jobs.sealer, ...d.notifications });
    this.notifyLoop = new ClaimLoop<ClaimedDelivery>({
      ...common,
      name: 'notifications',
      channels: [NOTIFICATIONS_CHANNEL],
      claim: () => this.notifications.claim(),
      reconcile: (delivery) => this.notifications.reconcile(delivery),
    });
    this.notifications.wake = () => this.notifyLoop.wake();
    // Nothing to claim either: the policy is one row. It wakes when the policy or the quarantine
    // changes, when the observer wrote the channel row, when a job or an update changes phase, when
    // its window opens (a timer the reconciler sets), and on a one-minute poll as a backstop.
    const { pollMs: policyPollMs, ...policyDeps } = d.updatePolicy ?? {};
    this.policy = new UpdatePolicyReconciler({
      db: d.db, logger: d.logger.child({ controller: 'update-policy' }), signal, onWindowOpens: () => this.policyLoop.wake(), ...policyDeps,
    });
    const channelWrites: Listen = (channel, onNotify) =>
      listen(channel, (payload) => {
        if (channel !== OBSERVED_WRITTEN_CHANNEL || payload === 'channel') onNotify(payload);
      });
    this.policyLoop = new ClaimLoop<never>({
      ...common,
      listen: channelWrites,
      pollMs: policyPollMs ?? 60_000,
      name: 'update policy',
      channels: [UPDATE_POLICY_CHANNEL, OBSERVED_WRITTEN_CHANNEL, SELF_UPDATE_CHANNEL, JOBS_CHANNEL],
      claim: async () => {
        await this.policy.reconcile();
        return undefined;
      },
      reconcile: async () => {},
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
    if (groups.includes('self-update')) await this.selfUpdate.closeInterrupted();
  }

  /** Starts the given controllers (all by default). Call once the database is migrated. */
  async start(groups: ControllerGroup[] = ALL_GROUPS): Promise<void> {
    await this.prepare(groups);
    if (groups.includes('jobs')) {
      await this.jobLoop.start();
      await this.cancelLoop.start();
      this.sweeper = setInterval(() => this.d.events.sweep(), this.d.sweepMs ?? 60_000);
      this.sweeper.unref();
    }
    if (groups.includes('self-update')) {
      await this.updateLoop.start();
      // Not awaited: the backend must come up (and be judged healthy) while the helper still waits.
      await this.outcomeLoop.start();
    }
    if (groups.includes('observer')) await this.observer.start();
    if (groups.includes('notifications')) await this.notifyLoop.start();
    if (groups.includes('update-policy')) await this.policyLoop.start();
  }

  async stop(): Promise<void> {
    clearInterval(this.sweeper);
    this.abort.abort();
    await this.observer.stop();
    this.notifications.stop();
    await Promise.all([this.jobLoop.stop(), this.cancelLoop.stop(), this.updateLoop.stop(), this.outcomeLoop.stop(), this.notifyLoop.stop(), this.policyLoop.stop()]);
  }

  /** The update policy's reconciliation, run now (tests). */
  reconcilePolicy(): Promise<void> {
    return this.policy.reconcile();
  }

  /** The outcome's reconciliation, run now if an update's helper is running (tests and the boot). */
  reconcileOutcome(): Promise<void> {
    return this.outcome.reconcile();
  }
}

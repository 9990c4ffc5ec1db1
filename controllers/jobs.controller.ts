// Reconciles platform job requests: wakes on NOTIFY (and a slow poll), claims queued jobs one at a
// time, and runs each in the job chart with the real compose CLI. It alone writes job status, job
// events and their audit rows. Cancel requests are handled at once, beside the running job.
import { createActor, fromCallback, type AnyStateMachine, type EventObject } from 'xstate';
import PQueue from 'p-queue';
import { readFileSync } from 'node:fs';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DB } from '../src/db/schema.ts';
import { JOB_KINDS, QUEUED_KINDS, type JobKind } from '../src/contracts/job-kinds.ts';
import type { Database } from '../src/db/database.ts';
import { jobMachine, phaseOf, JOB_CHART_VERSION, type JobOutcomeState, type StepInput } from '../machines/job.machine.ts';
import { hostMigrationMachine, HOST_MIGRATION_CHART_VERSION } from '../machines/host-migration.machine.ts';
import type { HostRunner, HostRun } from '../src/adapters/host-runner.ts';
import { claimNextJob, finishJob, getJob, JOBS_CHANNEL, runningJobs, unsettledEndedJobs, updateJobStatus, type JobView } from '../src/state/jobs.ts';
import { recordFinished, recordStarted } from '../src/state/actions.ts';
import type { JobEventLog } from '../src/state/job-events.ts';
import { clearConfigChanges, pendingConfigChanges, type Sealer } from '../src/state/platform-config.ts';
import { getSetting } from '../src/state/settings.ts';
import { engineUnreachable, parsePullProgress, runCompose, type ComposeRun } from '../src/adapters/compose-cli.ts';
import type { InstallerEnv, PlatformFiles } from '../src/adapters/platform-files.ts';


export interface JobsControllerDeps {
  db: Kysely<DB>;
  listen: Database['listen'];
  events: JobEventLog;
  logger: Logger;
  platform: PlatformFiles;
  sealer: Sealer;
  pruneImages: () => Promise<{ deleted: number; reclaimedBytes: number }>;
  hungMinutes: number;
  templatesUrl?: string | undefined;
  /** The installer's address and current service token, written into the platform's .env by deploy and apply-config. */
  installerEnv?: () => InstallerEnv;
  /** Runs migrate-host.sh on the host; absent where the engine cannot be reached. */
  hostRunner?: HostRunner | undefined;
  migrateHostScriptPath: string;
  workerId: string;
  pollMs?: number;
  /** How long the event log keeps a finished job in memory; swept once a minute. */
  sweepMs?: number;
}

interface Running {
  actor: { send(e: { type: 'CANCEL'; by: string }): void };
  done: Promise<void>;
}

/** How a job writes what it does: output lines, warnings, phases, and the hung deadline. */
interface JobIO {
  line(type: 'output' | 'progress' | 'warning', payload: Record<string, unknown>, text: string): void;
  phase(name: string, extra?: Record<string, unknown>): void;
  touch(force?: boolean): void;
}

/** A job kind's chart, its input, and a way to wait until the processes it started are gone. */
interface ChartPlan {
  machine: AnyStateMachine;
  input: unknown;
  chartVersion: string;
  settled(): Promise<unknown>;
}

const STEP_ARGS: Record<string, (services: string[]) => string[]> = {
  restart: (s) => ['restart', ...s],
  stop: (s) => ['stop', ...s],
  kill: (s) => ['kill', ...s],
  pull: (s) => ['pull', ...s],
  up: (s) => ['up', '-d', '--remove-orphans', ...s],
  'up-pulled': (s) => ['up', '-d', '--pull', 'never', ...s],
  recreate: (s) => ['up', '-d', '--force-recreate', '--pull', 'never', ...s],
};

/** The chart's steps for a job kind (the table in src/contracts/job-kinds.ts). */
export function stepsFor(kind: JobKind): { steps: string[]; needsPrepare: boolean } {
  const def = JOB_KINDS[kind];
  if (def.chart !== 'job') throw new Error(`${kind} is not a compose job`);
  return { steps: [...def.steps], needsPrepare: def.needsPrepare };
}

function isOurComposeProcess(pid: number, project: string): boolean {
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return argv.includes('compose') && argv.includes('-p') && argv[argv.indexOf('-p') + 1] === project;
  } catch {
    return false;
  }
}

export class JobsController {
  private readonly queue = new PQueue({ concurrency: 1 });
  private readonly running = new Map<string, Running>();
  private cancelling: Promise<void> | null = null;
  private unlisten: (() => Promise<void>) | undefined;
  private timers: NodeJS.Timeout[] = [];
  private stopped = false;
  /**
   * Job output mirrored to the backend's stdout whatever LOG_LEVEL is: deployment output must
   * survive a backend restart and reach the platform's log pipeline (the spec), so its lines are
   * not subject to the level that filters the backend's own messages.
   */
  private readonly mirror: Logger;

  constructor(private readonly d: JobsControllerDeps) {
    this.mirror = d.logger.child({ mirror: 'job-output' }, { level: 'info' });
  }

  async start(): Promise<void> {
    await this.closeInterrupted();
    this.unlisten = await this.d.listen(JOBS_CHANNEL, () => this.wake());
    this.timers.push(setInterval(() => this.wake(), this.d.pollMs ?? 5_000));
    this.timers.push(setInterval(() => this.d.events.sweep(), this.d.sweepMs ?? 60_000));
    for (const t of this.timers) t.unref();
    this.wake();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) clearInterval(t);
    await this.unlisten?.();
    this.queue.clear();
  }

  /** What is running and waiting, for the status endpoint. */
  busy(): { running: string[]; queueSize: number } {
    return { running: [...this.running.keys()], queueSize: this.queue.size };
  }

  wake(): void {
    if (this.stopped) return;
    this.cancelling ??= this.handleCancels()
      .catch((err) => this.d.logger.error({ err }, 'cancel handling failed'))
      .finally(() => {
        this.cancelling = null;
      });
    if (this.queue.size === 0 && this.queue.pending === 0) {
      void this.queue.add(() => this.drain()).catch((err) => this.d.logger.error({ err }, 'job loop failed'));
    }
  }

  /** Runs queued compose jobs one after another until none is left. */
  private async drain(): Promise<void> {
    while (!this.stopped) {
      const job = await claimNextJob(this.d.db, this.d.workerId, { only: [...QUEUED_KINDS] });
      if (!job) return;
      await this.run(job);
    }
  }

  /** A backend restart leaves running jobs behind: close them as failed and say why. */
  private async closeInterrupted(): Promise<void> {
    for (const j of await runningJobs(this.d.db)) {
      if (j.runnerPid && isOurComposeProcess(j.runnerPid, this.d.platform.project)) {
        try {
          process.kill(-j.runnerPid, 'SIGTERM');
        } catch {
          /* gone meanwhile */
        }
      }
      const detail = 'interrupted: the backend restarted while the job was running';
      await this.d.events.open(j.jobId);
      if (!(await finishJob(this.d.db, j.jobId, { phase: 'failed', detail, exitCode: null }))) continue;
      await this.finishAudit(j.jobId, 'failed', null, detail);
      await this.d.events.append(j.jobId, 'finished', { outcome: 'failed', state: 'interrupted', exitCode: null, detail });
      this.d.logger.warn({ jobId: j.jobId, kind: j.kind }, detail);
    }
    // A job's end is written in three steps (status row, audit row, `finished` event); a restart
    // between them leaves an ended job with its audit row open or a stream that never ends.
    for (const j of await unsettledEndedJobs(this.d.db)) {
      await this.d.events.open(j.jobId);
      await this.finishAudit(j.jobId, j.phase, j.exitCode, j.detail);
      if (!j.hasFinished) {
        const state = j.state && j.detail !== 'interrupted: the backend restarted while the job was running' ? j.state : 'interrupted';
        await this.d.events.append(j.jobId, 'finished', { outcome: j.phase, state, exitCode: j.exitCode, detail: j.detail });
      }
      this.d.logger.warn({ jobId: j.jobId }, `job ${j.jobId} had ended (${j.phase}) without its end fully recorded; recorded now`);
    }
  }

  private async finishAudit(jobId: string, status: 'completed' | 'failed', exitCode: number | null, detail: string | null): Promise<void> {
    const rows = await this.d.db.selectFrom('deployment_actions').select('id').where('job_id', '=', jobId).where('status', '=', 'started').execute();
    // No detail (a success) keeps the one written at the start: which services were acted on.
    for (const r of rows) await recordFinished(this.d.db, r.id, { status, exitCode, ...(detail !== null ? { detail } : {}) });
  }

  private async run(job: JobView): Promise<void> {
    const { db, events, logger } = this.d;
    const jobId = job.jobId;
    const services = job.params.services ?? [];
    await events.open(jobId);
    await recordStarted(db, {
      kind: job.kind,
      actor: { id: job.actor, email: job.actorEmail },
      jobId,
      detail: job.kind === 'migrate-host' ? `run ${this.d.migrateHostScriptPath} on the host` : services.length ? `services: ${services.join(', ')}` : 'all services',
    });
    logger.info({ jobId, kind: job.kind, services, actor: job.actor }, `job ${jobId} started: ${job.kind}`);

    let deadlineWrittenAt = 0;
    const hungMs = this.d.hungMinutes * 60_000;
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
        this.mirror.info({ jobId }, `[job ${jobId}] ${text}`);
      },
      phase: (name, extra = {}) => {
        void events.append(jobId, 'phase', { phase: name, ...extra }).catch((err) => logger.error({ err, jobId }, 'job event not stored'));
      },
    };
    const plan = job.kind === 'migrate-host' ? this.hostMigrationPlan(io) : this.composePlan(job, io);
    io.phase('started', { kind: job.kind, services, ...(job.kind === 'migrate-host' ? {} : { steps: stepsFor(job.kind).steps }) });

    const actor = createActor(plan.machine, { input: plan.input });
    let lastValue = '';
    let finish!: () => void;
    const done = new Promise<void>((resolve) => (finish = resolve));
    actor.subscribe({
      next: (snap) => {
        const value = JSON.stringify(snap.value);
        if (value === lastValue) return;
        lastValue = value;
        void updateJobStatus(db, jobId, { snapshot: actor.getPersistedSnapshot(), chartVersion: plan.chartVersion }).catch(() => {});
      },
      complete: finish,
      error: (err) => {
        logger.error({ err, jobId }, 'job chart failed');
        finish();
      },
    });
    this.running.set(jobId, { actor, done });
    actor.start();
    // A cancel that arrived before the job was claimed takes effect now.
    const fresh = await getJob(db, jobId);
    if (fresh?.cancelRequestedBy) actor.send({ type: 'CANCEL', by: fresh.cancelRequestedBy });
    await done;

    // Whatever ended the chart, its processes are gone before the job is reported finished.
    await Promise.race([plan.settled(), new Promise((r) => setTimeout(r, 10_000))]);
    const snap = actor.getSnapshot();
    const state = (typeof snap.value === 'string' ? snap.value : 'failed') as JobOutcomeState;
    const phase = snap.status === 'done' ? phaseOf(state) : 'failed';
    const detail: string | null = snap.context.detail ?? (phase === 'completed' ? null : 'the job chart stopped unexpectedly');
    const exitCode: number | null = snap.context.exitCode;
    await finishJob(db, jobId, { phase, detail, exitCode });
    await updateJobStatus(db, jobId, { snapshot: actor.getPersistedSnapshot(), chartVersion: plan.chartVersion });
    await this.finishAudit(jobId, phase, exitCode, detail);
    await events.append(jobId, 'finished', { outcome: phase, state, exitCode, detail });
    this.running.delete(jobId);
    logger.info({ jobId, outcome: phase, state, exitCode }, `job ${jobId} ${phase}${detail ? `: ${detail}` : ''}`);
  }

  /** Compose jobs: prepare (deploy templates, pending configuration), then the compose steps. */
  private composePlan(job: JobView, io: JobIO): ChartPlan {
    const { db } = this.d;
    const services = job.params.services ?? [];
    const { steps, needsPrepare } = stepsFor(job.kind);
    let current: ComposeRun | undefined;

    const prepare = fromCallback<EventObject, Record<string, never>>(({ sendBack }) => {
      const log = (text: string) => {
        sendBack({ type: 'OUTPUT' });
        io.touch();
        io.line('output', { stream: 'stdout', line: text }, text);
      };
      io.touch(true);
      io.phase('prepare');
      void (async () => {
        const warn = (text: string) => {
          sendBack({ type: 'OUTPUT' });
          io.line('warning', { message: text }, `warning: ${text}`);
        };
        // Read at each job, so a rotated service token reaches the platform with the next one.
        const installer = this.d.installerEnv?.() ?? { env: {}, problem: null };
        if (installer.problem) warn(installer.problem);
        if (job.kind === 'deploy') {
          if (!this.d.templatesUrl) throw new Error('PLATFORM_TEMPLATES_URL is not set: there is nothing to deploy from');
          const vmUser = (await getSetting<string>(db, 'vmUser')) ?? null;
          await this.d.platform.installTemplates(this.d.templatesUrl, vmUser, log, { installerEnv: installer.env, warn });
        }
        const changes = await pendingConfigChanges(db, this.d.sealer);
        const installerKeys = Object.keys(installer.env);
        if (changes.length || installerKeys.length) {
          const set: Record<string, string> = {};
          const remove: string[] = [];
          for (const c of changes) if (c.value === null) remove.push(c.key); else set[c.key] = c.value;
          // The installer's keys win over any change to them: they are its own, not the operator's.
          await this.d.platform.changeEnv({ ...set, ...installer.env }, remove.filter((k) => !installerKeys.includes(k)));
          if (installerKeys.length) log(`wrote ${installerKeys.join(', ')} into the platform .env`);
        }
        if (changes.length) {
          await clearConfigChanges(db, changes);
          log(`configuration changed: ${changes.map((c) => (c.value === null ? `-${c.key}` : c.key)).join(', ')}`);
        } else if (job.kind === 'apply-config') {
          log('no pending configuration changes; recreating with the current .env');
        }
      })().then(
        () => sendBack({ type: 'PREPARED' }),
        (err: Error) => sendBack({ type: 'PREPARE_FAILED', message: err.message }),
      );
      return () => {};
    });

    const runStep = fromCallback<EventObject, StepInput>(({ input, sendBack }) => {
      io.touch(true);
      if (input.step === 'prune') {
        io.phase('prune');
        this.d.pruneImages().then(
          (r) => {
            io.line('output', { stream: 'stdout', line: `pruned ${r.deleted} dangling images (${r.reclaimedBytes} bytes)` }, `pruned ${r.deleted} dangling images`);
            sendBack({ type: 'STEP_DONE', exitCode: 0 });
          },
          (err: Error) => {
            // A failed prune leaves the platform as it should be: warn, do not fail the job.
            io.line('warning', { message: `pruning dangling images failed: ${err.message}` }, `warning: prune failed: ${err.message}`);
            sendBack({ type: 'STEP_DONE', exitCode: 0 });
          },
        );
        return () => {};
      }
      const args = STEP_ARGS[input.step]!(services);
      io.phase(input.step, { command: ['docker', 'compose', ...args].join(' ') });
      let noEngine: string | null = null;
      const run = runCompose(this.d.platform.target(), args, (stream, text) => {
        sendBack({ type: 'OUTPUT' });
        io.touch();
        if (stream === 'stderr' && engineUnreachable(text)) noEngine ??= text.trim().slice(0, 300);
        const progress = input.step === 'pull' ? parsePullProgress(text) : null;
        if (progress) io.line('progress', { ...progress, line: text }, text);
        else io.line('output', { stream, line: text }, text);
      });
      current = run;
      void updateJobStatus(db, job.jobId, { runnerPid: run.pid ?? null }).catch(() => {});
      let exited = false;
      void run.exited.then((code) => {
        exited = true;
        // Compose could not reach the engine: say so rather than only "exited with code 1".
        if (code !== 0 && noEngine) sendBack({ type: 'STEP_FAILED', exitCode: code, message: `${input.step} failed: the Docker engine is not reachable (${noEngine})` });
        else sendBack({ type: 'STEP_DONE', exitCode: code });
      });
      return () => {
        if (!exited) run.cancel();
      };
    });

    return {
      machine: jobMachine.provide({ actors: { prepare, runStep } }),
      input: { steps, needsPrepare, hungMinutes: this.d.hungMinutes },
      chartVersion: JOB_CHART_VERSION,
      settled: async () => current?.exited,
    };
  }

  /** Host migration: copy the bundled script to the host, then run it there through nsenter. */
  private hostMigrationPlan(io: JobIO): ChartPlan {
    const runner = this.d.hostRunner;
    const scriptPath = this.d.migrateHostScriptPath;
    let current: HostRun | undefined;
    const onLine = (sendBack: (e: EventObject) => void) => (stream: 'stdout' | 'stderr', text: string) => {
      sendBack({ type: 'OUTPUT' });
      io.touch();
      io.line('output', { stream, line: text }, text);
    };
    const copyScript = fromCallback<EventObject, Record<string, never>>(({ sendBack }) => {
      io.touch(true);
      io.phase('copy-script', { path: scriptPath });
      if (!runner) {
        sendBack({ type: 'COPY_FAILED', message: 'the Docker engine is not available to run the host migration' });
        return () => {};
      }
      let exited = false;
      let cancelled = false;
      runner.copyScript(scriptPath, onLine(sendBack)).then(
        (run) => {
          current = run;
          if (cancelled) run.cancel();
          void run.exited.then((code) => {
            exited = true;
            if (code === 0) sendBack({ type: 'COPIED' });
            else sendBack({ type: 'COPY_FAILED', exitCode: code, message: `copying migrate-host.sh to ${scriptPath} on the host failed (exit ${code})` });
          });
        },
        (err: Error) => sendBack({ type: 'COPY_FAILED', message: err.message }),
      );
      // Left by a cancel or the hung guard: the copy container is stopped too.
      return () => {
        cancelled = true;
        if (!exited) current?.cancel();
      };
    });
    const runScript = fromCallback<EventObject, Record<string, never>>(({ sendBack }) => {
      io.touch(true);
      io.phase('run-script', { command: `nsenter -t 1 -a -- bash ${scriptPath} --yes` });
      let exited = false;
      let cancelled = false;
      runner!.run(scriptPath, onLine(sendBack)).then(
        (run) => {
          current = run;
          if (cancelled) run.cancel();
          void run.exited.then((code) => {
            exited = true;
            sendBack({ type: 'EXITED', exitCode: code });
          });
        },
        (err: Error) => sendBack({ type: 'RUN_FAILED', message: `the migration runner could not start: ${err.message}` }),
      );
      return () => {
        cancelled = true;
        if (!exited) current?.cancel();
      };
    });
    return {
      machine: hostMigrationMachine.provide({ actors: { copyScript, runScript } }),
      input: { hungMinutes: this.d.hungMinutes },
      chartVersion: HOST_MIGRATION_CHART_VERSION,
      settled: async () => current?.exited,
    };
  }

  /** Handles queued cancel-job requests: each stops (or drops) its target and records who did it. */
  private async handleCancels(): Promise<void> {
    const { db, events } = this.d;
    for (;;) {
      const req = await claimNextJob(db, `${this.d.workerId}:cancel`, { only: ['cancel-job'] });
      if (!req) return;
      const targetId = req.params.targetJobId ?? '';
      await events.open(req.jobId);
      const audit = await recordStarted(db, { kind: 'cancel-job', actor: { id: req.actor, email: req.actorEmail }, jobId: req.jobId, detail: `cancel job ${targetId}` });
      await events.append(req.jobId, 'phase', { phase: 'cancelling', targetJobId: targetId });
      let outcome: { phase: 'completed' | 'failed'; detail: string };
      const target = await getJob(db, targetId);
      let running = this.running.get(targetId);
      for (let i = 0; !running && target?.phase === 'running' && i < 50; i++) {
        await new Promise((r) => setTimeout(r, 100)); // claimed a moment ago: its actor is starting
        running = this.running.get(targetId);
      }
      if (!target) {
        outcome = { phase: 'failed', detail: `no job ${targetId}` };
      } else if (running) {
        running.actor.send({ type: 'CANCEL', by: req.actor });
        await running.done;
        outcome = { phase: 'completed', detail: `cancelled job ${targetId}` };
      } else if (target.phase === 'queued') {
        const detail = `cancelled by ${req.actor} before it started`;
        if (await finishJob(db, targetId, { phase: 'failed', detail, exitCode: null })) {
          await events.open(targetId);
          await events.append(targetId, 'finished', { outcome: 'failed', state: 'cancelled', exitCode: null, detail });
          outcome = { phase: 'completed', detail: `cancelled job ${targetId} before it started` };
        } else {
          outcome = { phase: 'failed', detail: `job ${targetId} had already started elsewhere` };
        }
      } else {
        outcome = { phase: 'failed', detail: `job ${targetId} had already ended (${target.phase})` };
      }
      await finishJob(db, req.jobId, { phase: outcome.phase, detail: outcome.detail, exitCode: null });
      await recordFinished(db, audit.id, { status: outcome.phase, exitCode: null, detail: outcome.detail });
      await events.append(req.jobId, 'finished', { outcome: outcome.phase, state: outcome.phase, exitCode: null, detail: outcome.detail });
    }
  }
}

// Reconciles compose jobs (deploy, restart, stop, kill, pull, compose-up, apply-config): prepare
// (deploy templates, pending configuration), then the kind's compose steps with the real compose
// CLI, in the job chart. What it shares with the other job kinds is in runtime/job-run.ts.
import { fromCallback, type EventObject } from 'xstate';
import type { Kysely } from 'kysely';
import type { DB } from '../src/db/schema.ts';
import { JOB_KINDS, type JobKind } from '../src/contracts/job-kinds.ts';
import { jobMachine, JOB_CHART_VERSION, type StepInput } from '../machines/job.machine.ts';
import { getJob, updateJobStatus, type JobView } from '../src/state/jobs.ts';
import { clearConfigChanges, pendingConfigChanges, type Sealer } from '../src/state/platform-config.ts';
import { getSetting } from '../src/state/settings.ts';
import { engineUnreachable, parsePullProgress, runCompose, type ComposeRun, type Stream } from '../src/adapters/compose-cli.ts';
import type { InstallerEnv, PlatformFiles } from '../src/adapters/platform-files.ts';
import { isPlatformProcessOf, terminateGroup } from '../src/adapters/processes.ts';
import type { PlatformImageSignatures } from '../src/adapters/platform-images.ts';
import { done, type ReconcileResult } from './runtime/reconcile.ts';
import { pullOnNodes, runSwarmStep, swarmCommand, SWARM_STEPS, type SwarmRun, type SwarmStepDeps } from './compose-job/swarm-steps.ts';
import { runJob, type ChartPlan, type JobIO, type JobRunDeps, type RunningJobs } from './runtime/job-run.ts';

export interface ComposeJobDeps extends JobRunDeps {
  platform: PlatformFiles;
  sealer: Sealer;
  pruneImages: () => Promise<{ deleted: number; reclaimedBytes: number }>;
  templatesUrl?: string | undefined;
  /** The installer's address and current service token, written into the platform's .env by deploy and apply-config. */
  installerEnv?: () => InstallerEnv;
  /** The platform's images checked against its signing keys (PLATFORM_SIGNATURE_*); absent or `off`: not checked. */
  platformImages?: Pick<PlatformImageSignatures, 'policy' | 'check'>;
  /** With PLATFORM_RUNTIME=swarm: the stack the steps act on instead of the compose project. */
  swarm?: SwarmStepDeps | undefined;
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

/** Steps that start containers: their images are checked first. A pull's are checked once it has pulled them. */
const CHECKED_BEFORE = new Set(['up', 'up-pulled', 'recreate']);

/** The chart's steps for a job kind (the table in src/contracts/job-kinds.ts). */
export function stepsFor(kind: JobKind): { steps: string[]; needsPrepare: boolean } {
  const def = JOB_KINDS[kind];
  if (def.chart !== 'job') throw new Error(`${kind} is not a compose job`);
  return { steps: [...def.steps], needsPrepare: def.needsPrepare };
}

export class ComposeJobReconciler {
  readonly chart = 'job' as const;

  constructor(private readonly d: ComposeJobDeps, private readonly running: RunningJobs) {}

  /** Runs the claimed job `jobId` to its end (re-read here: the row is the truth). */
  async reconcile(jobId: string, signal?: AbortSignal): Promise<ReconcileResult> {
    const job = await getJob(this.d.db, jobId);
    // A job whose end is being recorded (a retry) is no longer running, and goes on all the same.
    if (!job || (job.phase !== 'running' && !this.running.ending(jobId))) return done();
    await runJob(this.d, job, this.running, (io) => this.plan(job, io), signal);
    return done();
  }

  /** A restart left a docker CLI run of ours behind (compose, or stack and service on a Swarm): end it before the job is closed as interrupted. */
  stopLeftover(job: { runnerPid: number | null }): void {
    if (job.runnerPid && isPlatformProcessOf(job.runnerPid, this.d.platform.project)) terminateGroup(job.runnerPid);
  }

  private plan(job: JobView, io: JobIO): ChartPlan {
    const db: Kysely<DB> = this.d.db;
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
      // On a Swarm every step but the pull (on the manager) and the prune acts on the stack.
      const swarm = this.d.swarm && SWARM_STEPS.has(input.step) ? this.d.swarm : null;
      let stopped = false;
      let run: ComposeRun | undefined;
      let swarmRun: SwarmRun | undefined;
      let exited = false;
      const start = () => {
        io.phase(input.step, { command: swarm ? swarmCommand(input.step, swarm.stack.stack, services) : ['docker', 'compose', ...args].join(' ') });
        let noEngine: string | null = null;
        const onLine = (stream: Stream, text: string) => {
          sendBack({ type: 'OUTPUT' });
          io.touch();
          if (stream === 'stderr' && engineUnreachable(text)) noEngine ??= text.trim().slice(0, 300);
          const progress = input.step === 'pull' ? parsePullProgress(text) : null;
          if (progress) io.line('progress', { ...progress, line: text }, text);
          else io.line('output', { stream, line: text }, text);
        };
        // The running CLI's pid, for the next boot to stop it should this process die (stopLeftover).
        const recordPid = (pid: number | undefined) => void updateJobStatus(db, job.jobId, { runnerPid: pid ?? null }).catch(() => {});
        if (swarm) run = swarmRun = runSwarmStep(swarm, input.step, services, job.jobId, onLine, recordPid);
        else {
          run = runCompose(this.d.platform.target(), args, onLine);
          recordPid(run.pid);
        }
        current = run;
        void run.exited.then(async (code) => {
          exited = true;
          // Compose could not reach the engine: say so rather than only "exited with code 1".
          if (code !== 0 && noEngine) return sendBack({ type: 'STEP_FAILED', exitCode: code, message: `${input.step} failed: the Docker engine is not reachable (${noEngine})` });
          const failure = code !== 0 ? swarmRun?.failure() : null;
          if (failure) return sendBack({ type: 'STEP_FAILED', exitCode: code, message: failure });
          if (code !== 0 || input.step !== 'pull') return sendBack({ type: 'STEP_DONE', exitCode: code });
          const refused = await checkImages(input.step);
          if (stopped) return;
          if (refused) return sendBack({ type: 'STEP_FAILED', message: `pull refused: ${refused}; it is pulled, and nothing was started with it` });
          // On a Swarm, the nodes that run the services' tasks pull what the manager pulled and checked.
          const onNodes = this.d.swarm ? await pullOnNodes(this.d.swarm, services, (line) => onLine('stdout', line)) : null;
          if (stopped) return;
          if (onNodes) sendBack({ type: 'STEP_FAILED', message: onNodes });
          else sendBack({ type: 'STEP_DONE', exitCode: code });
        });
      };
      if (!CHECKED_BEFORE.has(input.step)) start();
      else {
        void checkImages(input.step).then((refused) => {
          if (stopped) return;
          if (refused) sendBack({ type: 'STEP_FAILED', message: `${input.step} refused: ${refused}; nothing was started` });
          else start();
        });
      }
      return () => {
        stopped = true;
        if (run && !exited) run.cancel();
      };
    });

    // Each service's verdict is written once per job, though a deploy checks after its pull and before its up.
    const written = new Set<string>();
    /** The images' signatures under PLATFORM_SIGNATURE_POLICY: null to go on, else why the step is refused. */
    const checkImages = async (step: string): Promise<string | null> => {
      const gate = this.d.platformImages;
      if (!gate || gate.policy === 'off') return null;
      const policy = gate.policy;
      io.touch(true);
      const warn = (text: string) => io.line('warning', { message: text }, `warning: ${text}`);
      let checks;
      try {
        checks = await gate.check(services);
      } catch (err) {
        const problem = `the images' signatures could not be checked before ${step}: ${(err as Error).message}`;
        if (policy === 'require') return `${problem}; PLATFORM_SIGNATURE_POLICY=require refuses to go on`;
        warn(`${problem}; PLATFORM_SIGNATURE_POLICY=warn goes on`);
        return null;
      }
      let refused: string | null = null;
      for (const { service, image, digest, check } of checks) {
        if (check.policy === 'off') continue;
        const { result, detail } = check.verdict;
        const verified = result === 'verified';
        if (!verified && check.policy === 'require') refused ??= `the image ${image} of service ${service} is not verified (${result}): ${detail}; PLATFORM_SIGNATURE_POLICY=require refuses it`;
        const once = `${service}@${digest ?? image}`;
        if (written.has(once)) continue;
        written.add(once);
        if (verified) io.line('output', { stream: 'stdout', line: `signature: ${service} (${image}): ${detail}` }, `signature: ${service}: ${detail}`);
        else warn(`signature: ${service} (${image}) is not verified (${result}): ${detail}; PLATFORM_SIGNATURE_POLICY=${check.policy} ${check.policy === 'require' ? 'refuses it' : 'lets it run'}`);
      }
      return refused;
    };

    return {
      machine: jobMachine.provide({ actors: { prepare, runStep } }),
      input: { steps, needsPrepare, hungMinutes: this.d.hungMinutes },
      chartVersion: JOB_CHART_VERSION,
      auditDetail: services.length ? `services: ${services.join(', ')}` : 'all services',
      startedExtra: { steps },
      settled: async () => current?.exited,
    };
  }
}

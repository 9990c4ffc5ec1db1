// Reconciles the host migration job: copy the bundled migrate-host.sh to the host, then run it in
// the host's namespaces (HostRunner), in the host-migration chart. The shared job lifecycle is in
// runtime/job-run.ts.
import { fromCallback, type EventObject } from 'xstate';
import { hostMigrationMachine, HOST_MIGRATION_CHART_VERSION } from '../machines/host-migration.machine.ts';
import type { HostRunner, HostRun } from '../src/adapters/host-runner.ts';
import { getJob } from '../src/state/jobs.ts';
import { done, type ReconcileResult } from './runtime/reconcile.ts';
import { runJob, type ChartPlan, type JobIO, type JobRunDeps, type RunningJobs } from './runtime/job-run.ts';

export interface HostMigrationDeps extends JobRunDeps {
  /** Runs migrate-host.sh on the host; absent where the engine cannot be reached. */
  hostRunner?: HostRunner | undefined;
  migrateHostScriptPath: string;
}

export class HostMigrationReconciler {
  readonly chart = 'host-migration' as const;

  constructor(private readonly d: HostMigrationDeps, private readonly running: RunningJobs) {}

  async reconcile(jobId: string, signal?: AbortSignal): Promise<ReconcileResult> {
    const job = await getJob(this.d.db, jobId);
    // A job whose end is being recorded (a retry) is no longer running, and goes on all the same.
    if (!job || (job.phase !== 'running' && !this.running.ending(jobId))) return done();
    await runJob(this.d, job, this.running, (io) => this.plan(io), signal);
    return done();
  }

  private plan(io: JobIO): ChartPlan {
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
      auditDetail: `run ${scriptPath} on the host`,
      startedExtra: {},
      settled: async () => current?.exited,
    };
  }
}

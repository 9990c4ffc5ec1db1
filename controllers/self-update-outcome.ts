// Reconciles how the last self-update ended, once its helper has exited (the boot-reconcile chart):
// at start (the boot), and whenever a self-update's helper starts while this process lives (woken
// through the database by the self-update reconciler). One run at a time; each run is a row with
// its snapshot persisted after each transition (src/state/reconcile-runs.ts).
import { fromPromise } from 'xstate';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DB } from '../src/db/schema.ts';
import type { RuntimePort } from '../src/contracts/ports.ts';
import { currentMigration } from '../src/db/migrate.ts';
import { recordFinished } from '../src/state/actions.ts';
import { finishTranscript, getSelfUpdate, pendingReconciliation, updateSelfUpdate } from '../src/state/self-update.ts';
import type { NewJobEvent } from '../src/state/job-events.ts';
import { quarantineDigest } from '../src/state/update-policy.ts';
import { startReconcileRun, updateReconcileRun } from '../src/state/reconcile-runs.ts';
import { enqueueNotification } from '../src/state/notifications.ts';
import { settleDowntime } from '../src/state/update-history.ts';
import { type SelfUpdateEngine } from '../src/adapters/self-update.ts';
import { HELPER_NAME } from '../src/adapters/self-update-helper.ts';
import { BOOT_RECONCILE_CHART_VERSION, bootReconcileMachine, type RepointInput } from '../machines/boot-reconcile.machine.ts';
import {
  CHANGED_SCHEMA, helperReason, restoreCommand, type HelperOutcome, type PendingUpdate, type RepointResult, type RunningNow, type Verdict,
} from '../machines/self-update-outcome.machine.ts';
import { OrderedWrites, runChart } from './runtime/run-chart.ts';
import { done, type ReconcileResult, type Reconciler } from './runtime/reconcile.ts';

export interface SelfUpdateOutcomeDeps {
  db: Kysely<DB>;
  logger: Logger;
  engine: SelfUpdateEngine;
  runtime: RuntimePort;
  /** The installer's image repository (`registry/name`). */
  repository: string;
  workerId: string;
  signal: AbortSignal;
  /** Pause between reconciliation attempts when the engine or the database does not answer. */
  retryMs?: number;
  /** Replaces secrets in the update's transcript (its job events). */
  scrub?: (text: string) => string;
}

/** The helper's whole output as lines, or why it could not be read. */
type HelperOutput = { lines: string[] } | { error: string };

/**
 * The end of an update's transcript, written after the restart with the outcome (one transaction):
 * the helper's whole output as read from its exited container and the status it reported (its
 * status file's value, which it prints); finishTranscript adds the decision and `finished`
 * (docs/adr/0030-self-update-transcript.md).
 */
export function transcriptTail(output: HelperOutput, helper: { status: HelperOutcome['status']; exitCode: number | null } | null): NewJobEvent[] {
  const events: NewJobEvent[] = [{ type: 'phase', payload: { phase: 'helper-output', container: HELPER_NAME } }];
  if ('lines' in output) for (const line of output.lines) events.push({ type: 'output', payload: { line, stream: 'stdout', source: HELPER_NAME } });
  else events.push({ type: 'warning', payload: { message: `the output of ${HELPER_NAME} could not be read: ${output.error}` } });
  events.push({ type: 'phase', payload: { phase: 'helper-status', status: helper?.status ?? 'unknown', exitCode: helper?.exitCode ?? null } });
  return events;
}

export class SelfUpdateOutcomeReconciler implements Reconciler<null> {
  readonly name = 'self-update-outcome';
  private running: Promise<ReconcileResult> | null = null;
  private booted = false;

  constructor(private readonly d: SelfUpdateOutcomeDeps) {}

  private get repository(): string {
    return this.d.repository;
  }

  /**
   * Level-based: the first call (the boot) always runs the chart, and records that run even when
   * there is nothing to reconcile; later calls run it when an update's helper is running and no run
   * is under way. Single flight: a call during a run returns that run.
   */
  reconcile(): Promise<ReconcileResult> {
    if (this.d.signal.aborted) return Promise.resolve(done());
    this.running ??= (async () => {
      if (this.booted && !(await pendingReconciliation(this.d.db))) return done();
      await this.run();
      this.booted = true;
      return done();
    })().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  /**
   * The update's job and the helper's whole output, read once it has exited (what went wrong instead
   * when it cannot be read); no output is read for an update without a job.
   */
  private async transcriptOf(p: PendingUpdate): Promise<{ jobId: string | null; output: HelperOutput }> {
    const jobId = (await getSelfUpdate(this.d.db, p.requestId))?.jobId ?? null;
    if (!jobId) return { jobId, output: { lines: [] } };
    try {
      return { jobId, output: { lines: await this.d.engine.helperOutput(p.helperId, this.d.signal) } };
    } catch (err) {
      return { jobId, output: { error: (err as Error).message } };
    }
  }

  /** Removes a helper given up on, once its output is in the transcript; a failure is logged (the next update's preflight removes a leftover). */
  private async removeGivenUp(requestId: string): Promise<void> {
    try {
      if (await this.d.engine.removeHelper()) this.d.logger.info({ requestId }, `removed ${HELPER_NAME}, given up on at its deadline`);
    } catch (err) {
      this.d.logger.warn({ err, requestId }, `${HELPER_NAME}, given up on at its deadline, could not be removed`);
    }
  }

  /**
   * Carries out the chart's order for the local channel tag: moved to the running image, only while
   * it names the failed build or nothing (read just before the move).
   */
  private async repoint({ requestId, order }: RepointInput): Promise<RepointResult> {
    if (order.action === 'keep') return 'unchanged';
    const ref = `${this.repository}:${order.tag}`;
    const current = await this.d.engine.imageIdOf(ref);
    if (current === order.imageId) return 'unchanged';
    if (current !== null && order.onlyFrom !== null && current !== order.onlyFrom) return 'unchanged';
    await this.d.engine.tag(order.imageId, this.repository, order.tag);
    this.d.logger.info({ requestId, reference: ref, imageId: order.imageId, replaced: current }, `${ref} points at the running image again, not at the build that did not stick`);
    return 'moved';
  }

  /**
   * Writes the chart's verdict in one transaction: the status row, the end of the transcript (a
   * restart writes both or neither), the settled downtime, the audit row, the notifications
   * (docs/notifications.md) and the quarantine the verdict asks for (docs/update-policy.md).
   */
  private async record(v: Verdict): Promise<void> {
    const { db, logger } = this.d;
    const { pending: p, detail, phase } = v;
    const exitCode = v.helper?.exitCode ?? null;
    const { jobId, output } = await this.transcriptOf(p);
    const changed = await db.transaction().execute(async (tx) => {
      if (!(await updateSelfUpdate(tx, p.requestId, { phase, detail, helperExitCode: exitCode, finished: true }, ['helper-running']))) return false;
      await finishTranscript(tx, jobId, { state: phase, detail, exitCode }, transcriptTail(output, v.helper), this.d.scrub);
      await settleDowntime(tx, p.requestId); // docs/adr/0031-update-history.md
      if (p.actionId) await recordFinished(tx, p.actionId, { status: v.audit, exitCode, detail });
      const base = { requestId: p.requestId, outcome: phase, targetDigest: p.targetDigest };
      const data = v.phase === 'undecided'
        ? { ...base, detail, helperExitCode: exitCode }
        : { ...base, runningDigest: v.now.digest, detail, helperStatus: v.helper.status, helperExitCode: exitCode };
      await enqueueNotification(tx, { type: v.notification, eventId: `${v.notification}:${p.requestId}`, data });
      if (v.phase !== 'undecided' && v.schemaAlarm) {
        await enqueueNotification(tx, {
          type: 'self-update.schema-alarm', eventId: `self-update.schema-alarm:${p.requestId}`,
          data: {
            ...data, alarm: CHANGED_SCHEMA, preUpdateMigration: p.preUpdateMigration, schemaMigration: v.now.migration,
            backup: p.backup ?? null, restoreCommand: p.backup ? restoreCommand(p.backup) : null,
          },
        });
      }
      if (v.quarantine) await quarantineDigest(tx, { digest: p.targetDigest, outcome: phase, detail, requestId: p.requestId });
      return true;
    });
    if (v.helper?.state === 'timed-out') await this.removeGivenUp(p.requestId);
    if (!changed) return; // another process reconciled it meanwhile
    if (v.phase === 'undecided') {
      logger.error({ requestId: p.requestId, targetDigest: p.targetDigest }, `self-update closed as undecided: ${detail}`);
      return;
    }
    const fields = { requestId: p.requestId, outcome: v.outcome, targetDigest: p.targetDigest, runningDigest: v.now.digest, helperExitCode: exitCode, helperStatus: v.helper.status };
    if (v.outcome === 'completed') logger.info(fields, `self-update completed: ${detail}`);
    else logger.warn(fields, `self-update did not stick (${phase}): ${detail}`);
  }

  private async run(): Promise<void> {
    const { db, engine, runtime, logger } = this.d;
    const actors = {
      findPending: fromPromise<PendingUpdate | null, undefined>(async () => {
        const p = await pendingReconciliation(db);
        if (!p) return null;
        return {
          requestId: p.requestId, actionId: p.actionId, targetTag: p.targetTag ?? '', targetDigest: p.targetDigest ?? '', targetImageId: p.targetImageId,
          previousReference: p.previousReference, previousDigest: p.previousDigest, previousImageId: p.previousImageId,
          preUpdateMigration: p.preUpdateMigration, backup: p.backupFile, helperId: p.helperContainerId, helperDeadline: p.helperDeadline?.toISOString() ?? null,
          readAt: new Date().toISOString(), ...(p.restoredAt ? { restored: true } : {}),
        };
      }),
      waitForHelper: fromPromise<HelperOutcome, { pending: PendingUpdate }>(async ({ input }) => {
        const p = input.pending;
        logger.info({ requestId: p.requestId }, `waiting for ${HELPER_NAME} to exit before reconciling the self-update`);
        const exit = await engine.waitHelper(p.helperId, { deadline: p.helperDeadline ? new Date(p.helperDeadline) : null, signal: this.d.signal });
        // Given up on: it must not go on switching after the outcome is recorded. Killed, not yet
        // removed, so that its output still goes into the transcript.
        if (exit.state === 'timed-out') {
          await engine.stopHelper(p.helperId, this.d.signal);
          logger.warn({ requestId: p.requestId }, `${HELPER_NAME} was still running at its deadline (${p.helperDeadline}): stopped`);
        }
        return exit;
      }),
      inspectRunning: fromPromise<RunningNow, undefined>(async () => {
        const v = await runtime.version();
        return { reference: v.image, digest: v.digest, imageId: v.imageId, migration: await currentMigration(db) };
      }),
      repointChannelTag: fromPromise<RepointResult, RepointInput>(({ input }) => this.repoint(input)),
      recordOutcome: fromPromise<void, Verdict>(({ input }) => this.record(input)),
      recordUndecided: fromPromise<void, Verdict>(({ input }) => this.record(input)),
    };
    const machine = bootReconcileMachine.provide({
      actors,
      actions: {
        alertChangedSchema: ({ context }) => {
          const p = context.pending!;
          logger.error(
            { requestId: p.requestId, preUpdateMigration: p.preUpdateMigration, schemaMigration: context.now?.migration, backup: p.backup ?? null, reason: context.helper ? helperReason(context.helper, p.targetTag) : null },
            `${CHANGED_SCHEMA}: the schema is at ${context.now?.migration ?? 'none'} but was at ${p.preUpdateMigration ?? 'none'} before the update; this build must tolerate the newer schema: verify it by hand` +
              (p.backup ? `, or restore the backup taken before the update, ${p.backup}: ${restoreCommand(p.backup)} (docs/self-update.md)` : ''),
          );
        },
      },
    });
    const runId = await startReconcileRun(db, this.d.workerId, BOOT_RECONCILE_CHART_VERSION);
    let requestId: string | null = null;
    const writes = new OrderedWrites((err) => logger.warn({ err }, 'reconciliation snapshot not stored'));
    const result = await runChart({
      machine,
      input: { ...(this.d.retryMs !== undefined ? { retryMs: this.d.retryMs } : {}) },
      writes,
      persist: (snapshot, state) => {
        // The run names the update it reconciles once it has found one.
        const found = state.context.pending?.requestId ?? null;
        const patch = { snapshot, ...(found !== requestId ? { requestId: found } : {}) };
        requestId = found;
        return updateReconcileRun(db, runId, patch);
      },
      signal: this.d.signal,
      onChartError: (err) => logger.error({ err }, 'self-update reconciliation chart failed'),
    });
    // Stopped (the process is shutting down, a switch among the reasons): the run ends where it
    // stood, and the next process's boot run takes over. If this write does not make it, that boot
    // closes the run (closeOrphanedRuns).
    if (result.stopped) {
      await updateReconcileRun(db, runId, { snapshot: result.persisted, finished: true }).catch((err: unknown) => logger.warn({ err }, 'the stopped reconciliation run could not be closed'));
      return;
    }
    await updateReconcileRun(db, runId, { snapshot: result.persisted, finished: true });
    // The chart gave up: the runtime retries with its backoff, and the next wake after that.
    const end = result.snapshot.output;
    if (end?.end === 'failed') throw new Error(`gave up reconciling the last self-update and could not close it: ${end.error}`);
  }
}

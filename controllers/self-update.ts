// Reconciles self-update requests: a claimed request runs through the self-update chart (target,
// preflight, audit row, helper). Once the helper runs, the outcome is the self-update-outcome
// reconciler's (self-update-outcome.ts), woken through the database. At start it closes requests a
// restart interrupted during preflight, undoing what their persisted chart says was changed.
import type { Logger } from 'pino';
import { recordStarted } from '../src/state/actions.ts';
import { currentMigration } from '../src/db/migrate.ts';
import {
  appendTranscript, claimNextSelfUpdate, overduePreflights, finishTranscript, getSelfUpdate, listSelfUpdates, noteSelfUpdateChange, notifySelfUpdate, unfinishedTranscripts,
  updateSelfUpdate, type SelfUpdateView,
} from '../src/state/self-update.ts';
import type { NewJobEvent } from '../src/state/job-events.ts';
import { helperBudgetMs, HELPER_NAME } from '../src/adapters/self-update-helper.ts';
import { abortedOutput, SELF_UPDATE_CHART_VERSION, selfUpdateMachine, type PreflightChanges, type SelfUpdateContext } from '../machines/self-update.machine.ts';
import { OrderedWrites, runChart, type ChartResult } from './runtime/run-chart.ts';
import { preflightActors, undoPreflight, type SelfUpdateDeps } from './self-update/preflight.ts';
import { done, type ReconcileResult, type Reconciler, type RowStatus } from './runtime/reconcile.ts';
import { putReconciled } from '../src/state/conditions.ts';
import type { Overdue } from './runtime/work-queue.ts';

type PreflightResult = ChartResult<typeof selfUpdateMachine>;


export class SelfUpdateReconciler implements Reconciler<string> {
  readonly name = 'self-update';
  /** Requests whose chart ran here and whose end is being recorded (a retry never runs it again). */
  private readonly ended = new Map<string, PreflightResult>();

  constructor(private readonly d: SelfUpdateDeps) {}

  /** Claims the oldest requested update (its phase becomes `preflight`). */
  claim(): Promise<SelfUpdateView | undefined> {
    return claimNextSelfUpdate(this.d.db, this.d.workerId, this.hungDeadline());
  }

  /**
   * Runs the claimed request `requestId` through preflight (re-read here: the row is the truth). A
   * retry after a throw records the end of a chart that ran, and never runs it again.
   */
  async reconcile(requestId: string, signal?: AbortSignal): Promise<ReconcileResult> {
    const req = await getSelfUpdate(this.d.db, requestId);
    if (!req || (req.phase !== 'preflight' && !this.ended.has(requestId))) {
      this.ended.delete(requestId);
      return done();
    }
    await this.run(req, signal ?? this.d.signal);
    return done();
  }

  /** The runtime's writes on the request's row: the error condition, and the abort when retries ran out or the watchdog fired. */
  rowStatus(): RowStatus<string> {
    return {
      recordError: (requestId, condition) => putReconciled(this.d.db, 'self_update_status', requestId, condition),
      recordRecovered: (requestId, condition) => putReconciled(this.d.db, 'self_update_status', requestId, condition),
      fail: async (requestId, detail) => {
        this.ended.delete(requestId);
        const r = await getSelfUpdate(this.d.db, requestId);
        if (r && (r.phase === 'requested' || r.phase === 'preflight')) await this.close(r, `aborted: ${detail}`);
      },
    };
  }

  /** How long a preflight step may go without progress: the chart's own hung guard ends it first, the watchdog after. */
  private get stepBudgetMs(): number {
    return ((this.d.hungMinutes ?? 15) + 1) * 60_000;
  }

  private hungDeadline(): Date {
    return new Date(Date.now() + this.stepBudgetMs);
  }

  /** Requests in preflight past their deadline, for the runtime's watchdog. */
  async overdue(): Promise<Overdue<string>[]> {
    return (await overduePreflights(this.d.db)).map((r) => ({
      key: r.requestId,
      detail: `hung: no progress in preflight since ${new Date(r.hungDeadline.getTime() - this.stepBudgetMs).toISOString()}`,
    }));
  }

  private get repository(): string {
    return this.d.settings.repository;
  }

  /** The helper's whole bounded run (its init's wait included) and a grace: past it, the outcome gives up waiting. */
  private helperDeadline(): Date {
    return new Date(Date.now() + helperBudgetMs(this.d.settings) + (this.d.helperGraceMs ?? 120_000));
  }

  private async run(req: SelfUpdateView, signal: AbortSignal): Promise<void> {
    const id = req.requestId;
    const log = this.d.logger.child({ requestId: id });
    let result = this.ended.get(id);
    if (!result) {
      const ran = await this.preflight(req, log, signal);
      if (!ran) return;
      this.ended.set(id, (result = ran));
    }
    await this.recordEnd(req, result, log);
    this.ended.delete(id);
  }

  /** Runs the chart; null when it was stopped. */
  private async preflight(req: SelfUpdateView, log: Logger, signal: AbortSignal): Promise<PreflightResult | null> {
    const { db } = this.d;
    const id = req.requestId;
    log.info({ actor: req.actor }, 'self-update requested');

    // Snapshots are stored after each transition, in order (`writes`); a change is also noted there
    // before it is made, since a restart between a change and the next snapshot would lose it.
    const writes = new OrderedWrites((err) => log.warn({ err }, 'self-update snapshot not stored'));
    // The transcript (the update's job events, docs/adr/0030-self-update-transcript.md): a failure to
    // write it is logged, never a reason for the update to fail.
    const say = (...events: NewJobEvent[]): Promise<void> =>
      appendTranscript(db, req.jobId, events, this.d.scrub).catch((err: unknown) => log.warn({ err, jobId: req.jobId }, 'self-update transcript line not stored'));
    await say({ type: 'phase', payload: { phase: 'started', kind: 'self-update', requestId: id } });
    let step: string | null = null;
    const noteChange = (key: keyof PreflightChanges, before: string | null): Promise<void> => writes.add(() => noteSelfUpdateChange(db, id, key, before));
    const actors = preflightActors(this.d, { req, log, say, noteChange });
    const result = await runChart({
      machine: selfUpdateMachine.provide({ actors }),
      input: { requestId: id },
      writes,
      persist: async (snapshot, state) => {
        // Each step moves the deadline the watchdog reads.
        await updateSelfUpdate(db, id, { snapshot, chartVersion: SELF_UPDATE_CHART_VERSION, hungDeadline: this.hungDeadline() });
        // A line per preflight step as the chart enters it.
        const now = state.value;
        if (now !== step) {
          step = now;
          await say({ type: 'phase', payload: { phase: now } });
        }
      },
      signal,
      onChartError: (err) => log.error({ err }, 'self-update chart failed'),
    });
    return result.stopped ? null : result;
  }

  /** Writes how preflight ended: the helper runs, or the request ended (newest, unresolved, aborted). */
  private async recordEnd(req: SelfUpdateView, result: PreflightResult, log: Logger): Promise<void> {
    const { db } = this.d;
    const id = req.requestId;
    // A chart that threw has no output: the request is aborted with what its context says.
    const end = result.snapshot.output ?? abortedOutput(result.snapshot.context);
    const { phase } = end;
    const persisted = result.persisted;
    if (end.phase === 'helper-running') {
      await updateSelfUpdate(db, id, {
        phase, snapshot: persisted, chartVersion: SELF_UPDATE_CHART_VERSION, helperContainerId: end.helperId, helperDeadline: this.helperDeadline(),
        detail: `the helper ${HELPER_NAME} is switching to ${end.target.tag} (${end.target.digest})`,
      });
      log.info({ target: end.target, preUpdateMigration: end.preUpdateMigration }, `self-update started: ${HELPER_NAME} switches to ${end.target.tag}`);
      // While this backend lives, the outcome's reconciler watches the helper too: a helper that ends
      // without replacing it (nothing recreated) is reconciled then rather than on a boot that never comes.
      await notifySelfUpdate(db, id);
      return;
    }
    const { detail } = end;
    await db.transaction().execute(async (tx) => {
      await updateSelfUpdate(tx, id, {
        phase, snapshot: persisted, chartVersion: SELF_UPDATE_CHART_VERSION, detail, abortCode: end.phase === 'aborted' ? end.abortCode : null, finished: true,
      });
      await finishTranscript(tx, req.jobId, { state: phase, detail, exitCode: null }, [], this.d.scrub);
    });
    if (end.phase === 'aborted') log.warn({ step: end.failedStep }, `self-update aborted: ${detail}`);
    else log.info(`self-update not started: ${detail}`);
  }

  /**
   * An update taken back by a restore of its preflight's backup: the restore erased its outcome, its
   * quarantine and its audit row, not its helper. The request goes back in flight with that helper,
   * an audit row recorded again and the schema as it is now (the backup's: the restore took a
   * migration back, so no second alarm); the outcome's reconciliation then records the outcome, its
   * notification (the same event as before the restore) and the quarantine from what the helper
   * left, as for any update (docs/adr/0044-restore-and-decided-digest.md). A request restored
   * without its target (never the case for a backup, taken after the target is resolved) is closed.
   */
  private async reopenRestored(r: SelfUpdateView, helperId: string, log: Logger): Promise<void> {
    const db = this.d.db;
    if (!r.targetDigest || !r.targetTag) {
      const detail = `closed: the database was restored from the backup taken in this update's preflight; the update's outcome is in docker logs ${HELPER_NAME}`;
      await updateSelfUpdate(db, r.requestId, { phase: 'aborted', abortCode: 'preflight', detail, finished: true }, ['requested', 'preflight']);
      log.warn(detail);
      return;
    }
    const migration = await currentMigration(db);
    const from = r.previousDigest ?? r.previousImageId ?? 'unknown';
    const reopened = await db.transaction().execute(async (tx) => {
      const patch = {
        phase: 'helper-running' as const, helperContainerId: helperId, helperDeadline: this.helperDeadline(), preUpdateMigration: migration, restoredAt: new Date(),
        detail: `the database was restored from the backup taken in this update's preflight; the outcome is read again from ${HELPER_NAME}`,
      };
      if (!(await updateSelfUpdate(tx, r.requestId, patch, ['requested', 'preflight']))) return false;
      const action = await recordStarted(tx, {
        kind: 'self-update',
        actor: { id: r.actor, email: r.actorEmail, kind: r.actorKind },
        jobId: r.jobId,
        targetDigest: r.targetDigest,
        schemaMigration: migration,
        detail: `from ${r.previousReference ?? 'unknown'} (${from}) to ${this.repository}:${r.targetTag} (${r.targetDigest}); recorded again: the database was restored from the backup taken in its preflight`,
      });
      await updateSelfUpdate(tx, r.requestId, { actionId: String(action.id) });
      return true;
    });
    if (!reopened) return;
    log.warn({ helper: helperId, targetDigest: r.targetDigest }, `the database was restored from the backup taken in this update's preflight: its outcome is read again from ${HELPER_NAME}`);
  }

  /**
   * Closes a request left in preflight (a restart, retries that ran out, the watchdog): a helper
   * that did start makes it in flight; otherwise what the persisted chart says was changed is put
   * back, and the request is aborted with `reason`.
   */
  private async close(r: SelfUpdateView, reason: string): Promise<void> {
    const log = this.d.logger.child({ requestId: r.requestId });
    let helper = await this.d.engine.helperOf(r.requestId).catch(() => null);
    if (helper?.created) {
      // Created but never started (the restart came between the two): nothing ran, so it is
      // removed and the preflight undone like any other interrupted one.
      await this.d.engine.removeHelper().catch((err: Error) => log.error({ err }, `cannot remove the never-started ${HELPER_NAME}`));
      helper = null;
    }
    if (helper && !r.actionId) {
      // A helper is spawned only after the audit row is on the request; a request without one but
      // with its helper is this update as the database backup of its own preflight held it: the
      // database was restored from that backup (docs/self-update.md).
      await this.reopenRestored(r, helper.id, log);
      return;
    }
    if (helper) {
      // The helper was started before the end of preflight was written: the update is in flight.
      await updateSelfUpdate(this.d.db, r.requestId, { phase: 'helper-running', helperContainerId: helper.id, helperDeadline: this.helperDeadline() });
      await notifySelfUpdate(this.d.db, r.requestId);
      log.warn(`the helper was started but the end of preflight was not written (${reason}); its outcome will be reconciled`);
      return;
    }
    const ctx = (r.snapshot as { context?: Partial<SelfUpdateContext> } | null)?.context;
    const changes: PreflightChanges = ctx?.changes ?? {};
    let detail = reason;
    try {
      await undoPreflight(this.d, { changes, target: ctx?.target ?? null, actionId: ctx?.actionId ?? r.actionId, detail });
      detail += '; nothing was changed';
    } catch (err) {
      detail += `; undoing the preflight failed (${(err as Error).message}): check the rollback tag and the staged compose file`;
    }
    await this.d.db.transaction().execute(async (tx) => {
      if (!(await updateSelfUpdate(tx, r.requestId, { phase: 'aborted', abortCode: 'preflight', detail, finished: true }, ['requested', 'preflight']))) return;
      await finishTranscript(tx, r.jobId, { state: 'aborted', detail, exitCode: null }, [], this.d.scrub);
    });
    log.warn(detail);
  }

  /** A restart during preflight: undo what the persisted chart says was changed, then abort. */
  async closeInterrupted(): Promise<void> {
    for (const r of await listSelfUpdates(this.d.db, { phases: ['requested', 'preflight'] })) await this.close(r, 'interrupted: the backend restarted during preflight');
    // An update that ended while its job did not (a request withdrawn unclaimed, a restart between
    // the two writes): the job ends with the update's outcome.
    for (const t of await unfinishedTranscripts(this.d.db)) {
      await finishTranscript(this.d.db, t.jobId, { state: t.phase, detail: t.detail, exitCode: t.exitCode }, [], this.d.scrub);
    }
  }
}

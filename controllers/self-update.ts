// Reconciles self-update requests: a claimed request runs through the self-update chart (target,
// preflight, audit row, helper). Once the helper runs, the outcome is the self-update-outcome
// reconciler's (self-update-outcome.ts), woken through the database. At start it closes requests a
// restart interrupted during preflight, undoing what their persisted chart says was changed.
import { fromPromise } from 'xstate';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DB } from '../src/db/schema.ts';
import type { RuntimePort } from '../src/contracts/ports.ts';
import { resolveChannel } from '../src/config.ts';
import { currentMigration } from '../src/db/migrate.ts';
import { auditTrailChanged, recordFinished, recordStarted } from '../src/state/actions.ts';
import { conflictOf } from '../src/state/exclusion.ts';
import { activeQuarantine, liftQuarantine } from '../src/state/update-policy.ts';
import { POLICY_ACTOR } from '../src/auth/actor.ts';
import { conflict } from '../src/errors.ts';
import {
  appendTranscript, claimNextSelfUpdate, overduePreflights, finishTranscript, getSelfUpdate, listSelfUpdates, noteSelfUpdateChange, notifySelfUpdate, unfinishedTranscripts,
  updateSelfUpdate, type SelfUpdateView,
} from '../src/state/self-update.ts';
import type { NewJobEvent } from '../src/state/job-events.ts';
import { type SelfUpdateEngine, type SelfUpdateSettings } from '../src/adapters/self-update.ts';
import { BACKEND_SERVICE, helperBudgetMs, helperSpec, HELPER_NAME } from '../src/adapters/self-update-helper.ts';
import { sha256Of } from '../src/adapters/compose-source.ts';
import {
  abortDetail, phaseOfState, SELF_UPDATE_CHART_VERSION, selfUpdateMachine,
  type PreflightChanges, type RecordActionInput, type RecordedAction, type ResolvedTarget, type RunningImage, type SelfUpdateContext,
  type UndoInput, type UpdateTarget,
} from '../machines/self-update.machine.ts';
import { OrderedWrites, runChart, type ChartResult } from './runtime/run-chart.ts';
import { alarmedBackups } from '../src/state/backup-alarms.ts';
import { CHANGED_SCHEMA } from '../machines/boot-reconcile.machine.ts';
import { done, type ReconcileResult, type Reconciler, type RowStatus } from './runtime/reconcile.ts';
import { putReconciled } from '../src/state/conditions.ts';
import type { Overdue } from './runtime/work-queue.ts';

export interface SelfUpdateDeps {
  db: Kysely<DB>;
  logger: Logger;
  engine: SelfUpdateEngine;
  runtime: RuntimePort;
  settings: SelfUpdateSettings;
  /** INSTALLER_CHANNEL; unset: the running tag's prefix. */
  channel: string | undefined;
  workerId: string;
  /** Aborted when the process stops: a running chart is stopped where it stands. */
  signal: AbortSignal;
  /** Added to the helper's two waits to get the time after which it is no longer waited for. */
  helperGraceMs?: number;
  /** Replaces secrets in the update's transcript (its job events). */
  scrub?: (text: string) => string;
  /** The chart's hung guard, in minutes (default 15); a step's deadline is one minute past it. */
  hungMinutes?: number;
}

/** A transcript line: an `output` event as compose jobs write them. */
export const outputLine = (line: string, stream: 'stdout' | 'stderr' = 'stdout'): NewJobEvent => ({ type: 'output', payload: { line, stream } });

type PreflightResult = ChartResult<typeof selfUpdateMachine>;

/** The update policy's own start. (A request from before actor kinds were recorded, by the policy's id, was the policy's.) */
const startedByPolicy = (req: SelfUpdateView): boolean => req.actor === POLICY_ACTOR.id && (req.actorKind ?? POLICY_ACTOR.kind) === POLICY_ACTOR.kind;

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

  /** Puts back what preflight changed, newest change first; finishes the audit row if one was written. */
  private async undo(input: UndoInput): Promise<void> {
    const { engine } = this.d;
    const { changes, target } = input;
    const problems: string[] = [];
    const attempt = async (what: string, fn: () => Promise<void>) => {
      try {
        await fn();
      } catch (err) {
        problems.push(`${what}: ${(err as Error).message}`);
      }
    };
    if (changes.newTag && target) {
      const before = changes.newTag.before;
      await attempt(`restoring ${this.repository}:${target.tag}`, () => (before ? engine.tag(before, this.repository, target.tag) : engine.untag(`${this.repository}:${target.tag}`)));
    }
    if (changes.stagedFile) {
      const before = changes.stagedFile.before;
      await attempt('restoring the staged compose file', () => (before !== null ? engine.writeStaged(before) : engine.removeStaged()));
    }
    if (changes.rollbackTag) {
      const before = changes.rollbackTag.before;
      const tag = this.d.settings.rollbackTag;
      await attempt(`restoring ${this.repository}:${tag}`, () => (before ? engine.tag(before, this.repository, tag) : engine.untag(`${this.repository}:${tag}`)));
    }
    if (input.actionId) {
      await attempt('finishing the audit row', async () => {
        await recordFinished(this.d.db, input.actionId!, { status: 'failed', exitCode: null, detail: `aborted before the helper ran: ${input.detail ?? 'preflight failed'}` });
      });
    }
    if (problems.length) throw new Error(problems.join('; '));
  }


  /**
   * A start the update policy decided installs the digest it decided on, never a build the tag was
   * moved to since, and never a quarantined one (docs/adr/0044-restore-and-decided-digest.md).
   */
  private async checkDecided(req: SelfUpdateView, target: UpdateTarget | null): Promise<void> {
    if (!target || (!req.decidedDigest && !startedByPolicy(req))) return;
    const problems: string[] = [];
    if (req.decidedDigest && req.decidedDigest !== target.digest) {
      problems.push(`the update policy decided on ${req.decidedDigest}, but ${this.repository}:${target.tag} now names ${target.digest}`);
    }
    const q = await activeQuarantine(this.d.db, target.digest);
    if (q) {
      const update = q.requestId ? `its update ${q.requestId}` : 'its update';
      problems.push(`${target.digest} is quarantined (${update} ended ${q.outcome} at ${q.since.toISOString()}): the update policy never starts it; an update started by hand lifts it`);
    }
    if (problems.length) throw new Error(problems.join('; '));
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
    const { db, engine, runtime, settings } = this.d;
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
    const actors = {
      resolveTarget: fromPromise<ResolvedTarget, undefined>(async () => {
        const v = await runtime.version();
        const channel = resolveChannel({ INSTALLER_CHANNEL: this.d.channel }, v.tag);
        if (!channel) throw new Error(`the channel is unknown: INSTALLER_CHANNEL is not set and the running tag (${v.tag ?? 'none'}) has no channel prefix`);
        const tag = `${channel}-latest`;
        const digest = await engine.remoteDigest(`${this.repository}:${tag}`, v.digest);
        await updateSelfUpdate(db, id, { channel, targetTag: tag, targetDigest: digest, previousReference: v.image, previousDigest: v.digest, previousImageId: v.imageId });
        const running: RunningImage = { inContainer: v.inContainer, reference: v.image, tag: v.tag, digest: v.digest, imageId: v.imageId };
        return { running, target: { channel, tag, digest } };
      }),
      checkPreconditions: fromPromise<void, { running: RunningImage | null; target: UpdateTarget | null }>(async ({ input }) => {
        const r = input.running;
        await this.checkDecided(req, input.target);
        if (!r?.inContainer || !r.imageId) throw new Error('the installer does not run in a container: there is no image to pin and no compose project to switch');
        const own = await engine.ownCompose();
        if (!own || own.project !== settings.project) {
          throw new Error(`this backend's container belongs to compose project ${own?.project ?? '(none)'}, not INSTALLER_PROJECT=${settings.project}: the helper would switch the wrong project`);
        }
        if (own.service !== BACKEND_SERVICE) throw new Error(`this backend runs as compose service ${own.service ?? '(none)'}, not ${BACKEND_SERVICE}`);
        const problem = await conflictOf(db, { kind: 'update', own: id });
        if (problem) throw conflict(problem);
      }),
      // PUBLISHED_COMPOSE_URL when set, else the file the target image (just pulled) ships.
      fetchPublishedCompose: fromPromise<string, { target: UpdateTarget; imageId: string }>(({ input }) => engine.publishedComposeOf(input.target.channel, input.imageId)),
      // Before anything is changed; the backup's name goes on the row for the schema alarm.
      backupDatabase: fromPromise<string, { running: RunningImage; target: UpdateTarget }>(async ({ input }) => {
        const from = input.running.digest ?? input.running.imageId;
        // Retention keeps the backups unresolved schema alarms name, whatever their age.
        const b = await engine.backupDatabase(from, settings.backupsKeep ?? 5, await alarmedBackups(db, CHANGED_SCHEMA));
        await updateSelfUpdate(db, id, { backupFile: b.file });
        log.info({ backup: b.file, removed: b.removed }, `database backed up before the update: ${b.file}`);
        if (b.pruneProblem) log.warn({ backup: b.file }, `older database backups could not be removed: ${b.pruneProblem}`);
        return b.file;
      }),
      pullTarget: fromPromise<string, { target: UpdateTarget }>(async ({ input }) => {
        const ref = `${this.repository}@${input.target.digest}`;
        log.info({ digest: input.target.digest }, `pulling ${ref}`);
        // The pull by digest reports no layers: the target's pull is one bar, begun and done (the
        // viewer shows `Pulled` as done, as the engine words a finished pull).
        await say({ type: 'progress', payload: { id: ref, status: 'Pulling' } }, outputLine(`pulling ${ref}`));
        const imageId = await engine.pullByDigest(this.repository, input.target.digest);
        await updateSelfUpdate(db, id, { targetImageId: imageId });
        await say({ type: 'progress', payload: { id: ref, status: 'Pulled' } }, outputLine(`pulled ${ref}: image ${imageId}`));
        return imageId;
      }),
      tagRollback: fromPromise<{ before: string | null }, { running: RunningImage }>(async ({ input }) => {
        const before = await engine.imageIdOf(`${this.repository}:${settings.rollbackTag}`);
        await noteChange('rollbackTag', before);
        await engine.tag(input.running.imageId!, this.repository, settings.rollbackTag);
        return { before };
      }),
      stageComposeFile: fromPromise<{ before: string | null }, { content: string }>(async ({ input }) => {
        const before = await engine.readStaged();
        await noteChange('stagedFile', before);
        // Recorded before the write: the helper installs the staged file only if it has this digest.
        await updateSelfUpdate(db, id, { stagedComposeSha256: sha256Of(input.content) });
        await engine.writeStaged(input.content);
        return { before };
      }),
      tagNew: fromPromise<{ before: string | null }, { target: UpdateTarget; imageId: string }>(async ({ input }) => {
        const before = await engine.imageIdOf(`${this.repository}:${input.target.tag}`);
        await noteChange('newTag', before);
        await engine.tag(input.imageId, this.repository, input.target.tag);
        return { before };
      }),
      recordAction: fromPromise<RecordedAction, RecordActionInput>(async ({ input }) => {
        const preUpdateMigration = await currentMigration(db);
        const from = input.running.digest ?? input.running.imageId ?? 'unknown';
        // One transaction: a restart between the two would leave an audit row `started` that no
        // request refers to, which nothing would ever finish.
        const recorded = await db.transaction().execute(async (tx) => {
          const action = await recordStarted(tx, {
            kind: 'self-update',
            actor: { id: req.actor, email: req.actorEmail, kind: req.actorKind },
            // The audit row links the update's transcript.
            jobId: req.jobId,
            targetDigest: input.target.digest,
            schemaMigration: preUpdateMigration,
            detail: `from ${input.running.reference ?? 'unknown'} (${from}) to ${this.repository}:${input.target.tag} (${input.target.digest})`,
          });
          const actionId = String(action.id);
          await updateSelfUpdate(tx, id, { actionId, preUpdateMigration });
          // Someone started this build by hand, past preflight: its quarantine is lifted, by them
          // (docs/update-policy.md). The policy's own start never lifts one.
          if (!startedByPolicy(req) && (await liftQuarantine(tx, input.target.digest, { id: req.actor, email: req.actorEmail }))) {
            log.info({ digest: input.target.digest, by: req.actor }, 'quarantine lifted by a manual self-update');
          }
          return { actionId, preUpdateMigration };
        });
        auditTrailChanged(); // committed now: cached audit pages read before this are stale
        return recorded;
      }),
      removeLeftoverHelper: fromPromise<void, undefined>(async () => {
        if (await engine.removeHelper()) log.info(`removed a leftover ${HELPER_NAME}`);
      }),
      spawnHelper: fromPromise<string, { target: UpdateTarget }>(async ({ input }) => {
        // The digest recorded when the file was staged, read back from the row: the helper checks it.
        const staged = (await getSelfUpdate(db, id))?.stagedComposeSha256 ?? null;
        if (!staged) throw new Error('no digest of the staged compose file is recorded: the helper would have nothing to check it against');
        const spec = helperSpec(settings, input.target, id, staged);
        const containerId = await engine.spawnHelper(spec);
        log.info({ containerId, image: spec.image, cmd: spec.cmd }, `started ${HELPER_NAME}`);
        await say(
          { type: 'phase', payload: { phase: 'helper-started', container: HELPER_NAME, containerId, image: spec.image } },
          outputLine(`started ${HELPER_NAME} (${containerId.slice(0, 12)}) from ${spec.image}: ${spec.cmd.join(' ')}`),
          outputLine(`the installer restarts now; the helper's output follows once the new backend has read it`),
        );
        return containerId;
      }),
      undoPreflight: fromPromise<void, UndoInput>(({ input }) => this.undo(input)),
    };

    const result = await runChart({
      machine: selfUpdateMachine.provide({ actors }),
      input: { requestId: id },
      writes,
      persist: async (snapshot) => {
        // Each step moves the deadline the watchdog reads.
        await updateSelfUpdate(db, id, { snapshot, chartVersion: SELF_UPDATE_CHART_VERSION, hungDeadline: this.hungDeadline() });
        // A line per preflight step as the chart enters it.
        const value = (snapshot as { value?: unknown }).value;
        const now = typeof value === 'string' ? value : JSON.stringify(value ?? null);
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
    const snap = result.snapshot;
    const state = snap.status === 'done' && typeof snap.value === 'string' ? snap.value : 'aborted';
    const ctx = snap.context;
    const phase = phaseOfState(state);
    const persisted = result.persisted;
    if (phase === 'helper-running') {
      await updateSelfUpdate(db, id, {
        phase, snapshot: persisted, chartVersion: SELF_UPDATE_CHART_VERSION, helperContainerId: ctx.helperId, helperDeadline: this.helperDeadline(),
        detail: `the helper ${HELPER_NAME} is switching to ${ctx.target?.tag} (${ctx.target?.digest})`,
      });
      log.info({ target: ctx.target, preUpdateMigration: ctx.preUpdateMigration }, `self-update started: ${HELPER_NAME} switches to ${ctx.target?.tag}`);
      // While this backend lives, the outcome's reconciler watches the helper too: a helper that ends
      // without replacing it (nothing recreated) is reconciled then rather than on a boot that never comes.
      await notifySelfUpdate(db, id);
      return;
    }
    const detail =
      phase === 'newest' ? `already on the newest build of channel ${ctx.target?.channel} (${ctx.target?.digest})`
      : phase === 'unresolved' ? `the target digest cannot be resolved: ${ctx.detail ?? 'unknown error'}`
      : abortDetail(ctx);
    await db.transaction().execute(async (tx) => {
      await updateSelfUpdate(tx, id, {
        phase, snapshot: persisted, chartVersion: SELF_UPDATE_CHART_VERSION, detail, abortCode: phase === 'aborted' ? (ctx.abortCode ?? 'preflight') : null, finished: true,
      });
      await finishTranscript(tx, req.jobId, { state: phase, detail, exitCode: null }, [], this.d.scrub);
    });
    if (phase === 'aborted') log.warn({ step: ctx.failedStep }, `self-update aborted: ${detail}`);
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
    auditTrailChanged();
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
      await this.undo({ changes, target: ctx?.target ?? null, actionId: ctx?.actionId ?? r.actionId, detail });
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

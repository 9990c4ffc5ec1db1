// Reconciles self-update requests and their outcomes. A request is claimed (NOTIFY, slow poll) and
// run through the self-update chart: target, preflight, audit row, helper. On boot — and while this
// backend outlives a helper it spawned — the boot-reconcile chart decides how the last unfinished
// update ended by comparing digests once the helper has exited. It alone writes self-update status
// and self-update audit rows.
import { createActor, fromPromise, type SnapshotFrom } from 'xstate';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DB } from '../src/db/schema.ts';
import type { Database } from '../src/db/database.ts';
import type { RuntimePort } from '../src/contracts/ports.ts';
import { resolveChannel } from '../src/config.ts';
import { currentMigration } from '../src/db/migrate.ts';
import { auditTrailChanged, recordFinished, recordStarted } from '../src/state/actions.ts';
import { conflictOf } from '../src/state/exclusion.ts';
import { conflict } from '../src/errors.ts';
import {
  claimNextSelfUpdate, listSelfUpdates, noteSelfUpdateChange, pendingReconciliation, SELF_UPDATE_CHANNEL, updateSelfUpdate, type SelfUpdateView,
} from '../src/state/self-update.ts';
import { BACKEND_SERVICE, helperSpec, HELPER_NAME, type SelfUpdateEngine, type SelfUpdateSettings } from '../src/adapters/self-update.ts';
import {
  abortDetail, phaseOfState, SELF_UPDATE_CHART_VERSION, selfUpdateMachine,
  type PreflightChanges, type RecordActionInput, type RecordedAction, type ResolvedTarget, type RunningImage, type SelfUpdateContext,
  type UndoInput, type UpdateTarget,
} from '../machines/self-update.machine.ts';
import {
  bootReconcileMachine, CHANGED_SCHEMA, helperReason, phaseOfOutcome,
  type HelperOutcome, type PendingUpdate, type RecordInput, type RepointInput, type RunningNow, type UndecidedInput,
} from '../machines/boot-reconcile.machine.ts';

export interface SelfUpdateControllerDeps {
  db: Kysely<DB>;
  listen: Database['listen'];
  logger: Logger;
  engine: SelfUpdateEngine;
  runtime: RuntimePort;
  settings: SelfUpdateSettings;
  /** INSTALLER_CHANNEL; unset: the running tag's prefix. */
  channel: string | undefined;
  workerId: string;
  pollMs?: number;
  /** Pause between reconciliation attempts when the engine or the database does not answer. */
  retryMs?: number;
  /** Added to the helper's two waits to get the time after which it is no longer waited for. */
  helperGraceMs?: number;
}


export class SelfUpdateController {
  private running: Promise<void> | null = null;
  private reconciling: Promise<void> | null = null;
  private readonly actors = new Set<{ stop(): void }>();
  private readonly abort = new AbortController();
  private unlisten: (() => Promise<void>) | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly d: SelfUpdateControllerDeps) {}

  async start(): Promise<void> {
    await this.closeInterrupted();
    this.unlisten = await this.d.listen(SELF_UPDATE_CHANNEL, () => this.wake());
    this.timer = setInterval(() => this.wake(), this.d.pollMs ?? 5_000);
    this.timer.unref();
    this.wake();
    // Not awaited: the backend must come up (and be judged healthy) while the helper still waits.
    void this.reconcile();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.abort.abort();
    for (const a of this.actors) a.stop();
    await this.unlisten?.();
  }

  wake(): void {
    if (this.stopped || this.running) return;
    this.running = this.drain()
      .catch((err) => this.d.logger.error({ err }, 'self-update loop failed'))
      .finally(() => {
        this.running = null;
      });
  }

  private async drain(): Promise<void> {
    while (!this.stopped) {
      const req = await claimNextSelfUpdate(this.d.db, this.d.workerId);
      if (!req) return;
      await this.run(req);
    }
  }

  private get repository(): string {
    return this.d.settings.repository;
  }

  private helperDeadline(): Date {
    const wait = (this.d.settings.waitTimeoutSeconds ?? 300) * 1000;
    return new Date(Date.now() + 2 * wait + (this.d.helperGraceMs ?? 120_000));
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

  private async run(req: SelfUpdateView): Promise<void> {
    const { db, engine, runtime, logger, settings } = this.d;
    const id = req.requestId;
    const log = logger.child({ requestId: id });
    log.info({ actor: req.actor }, 'self-update requested');

    // Snapshots are stored after each transition, in order (`chain`); a change is also noted there
    // before it is made, since a restart between a change and the next snapshot would lose it.
    let chain: Promise<unknown> = Promise.resolve();
    const noteChange = (key: keyof PreflightChanges, before: string | null): Promise<void> => {
      const noted = chain.then(() => noteSelfUpdateChange(db, id, key, before));
      chain = noted.catch(() => {});
      return noted;
    };
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
      checkPreconditions: fromPromise<void, { running: RunningImage | null }>(async ({ input }) => {
        const r = input.running;
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
      pullTarget: fromPromise<string, { target: UpdateTarget }>(async ({ input }) => {
        log.info({ digest: input.target.digest }, `pulling ${this.repository}@${input.target.digest}`);
        const imageId = await engine.pullByDigest(this.repository, input.target.digest);
        await updateSelfUpdate(db, id, { targetImageId: imageId });
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
            actor: { id: req.actor, email: req.actorEmail },
            targetDigest: input.target.digest,
            schemaMigration: preUpdateMigration,
            detail: `from ${input.running.reference ?? 'unknown'} (${from}) to ${this.repository}:${input.target.tag} (${input.target.digest})`,
          });
          const actionId = String(action.id);
          await updateSelfUpdate(tx, id, { actionId, preUpdateMigration });
          return { actionId, preUpdateMigration };
        });
        auditTrailChanged(); // committed now: cached audit pages read before this are stale
        return recorded;
      }),
      removeLeftoverHelper: fromPromise<void, undefined>(async () => {
        if (await engine.removeHelper()) log.info(`removed a leftover ${HELPER_NAME}`);
      }),
      spawnHelper: fromPromise<string, { target: UpdateTarget }>(async ({ input }) => {
        const spec = helperSpec(settings, input.target, id);
        const containerId = await engine.spawnHelper(spec);
        log.info({ containerId, image: spec.image, cmd: spec.cmd }, `started ${HELPER_NAME}`);
        return containerId;
      }),
      undoPreflight: fromPromise<void, UndoInput>(({ input }) => this.undo(input)),
    };

    const actor = createActor(selfUpdateMachine.provide({ actors }), { input: { requestId: id } });
    this.actors.add(actor);
    let lastValue = '';
    const persist = (snap: SnapshotFrom<typeof selfUpdateMachine>) => {
      const value = JSON.stringify(snap.value);
      if (value === lastValue) return;
      lastValue = value;
      const persisted = actor.getPersistedSnapshot();
      chain = chain.then(() => updateSelfUpdate(db, id, { snapshot: persisted, chartVersion: SELF_UPDATE_CHART_VERSION })).catch((err) => log.warn({ err }, 'self-update snapshot not stored'));
    };
    let finish!: () => void;
    const done = new Promise<void>((resolve) => (finish = resolve));
    actor.subscribe({ next: persist, complete: finish, error: (err) => { log.error({ err }, 'self-update chart failed'); finish(); } });
    actor.start();
    await done;
    this.actors.delete(actor);
    await chain;
    if (this.stopped) return;

    const snap = actor.getSnapshot();
    const state = snap.status === 'done' && typeof snap.value === 'string' ? snap.value : 'aborted';
    const ctx = snap.context;
    const phase = phaseOfState(state);
    const persisted = actor.getPersistedSnapshot();
    if (phase === 'helper-running') {
      await updateSelfUpdate(db, id, {
        phase, snapshot: persisted, chartVersion: SELF_UPDATE_CHART_VERSION, helperContainerId: ctx.helperId, helperDeadline: this.helperDeadline(),
        detail: `the helper ${HELPER_NAME} is switching to ${ctx.target?.tag} (${ctx.target?.digest})`,
      });
      log.info({ target: ctx.target, preUpdateMigration: ctx.preUpdateMigration }, `self-update started: ${HELPER_NAME} switches to ${ctx.target?.tag}`);
      // While this backend lives, it watches the helper too: a helper that ends without replacing
      // it (nothing recreated) is reconciled here rather than on a boot that never comes.
      void this.reconcile();
      return;
    }
    const detail =
      phase === 'newest' ? `already on the newest build of channel ${ctx.target?.channel} (${ctx.target?.digest})`
      : phase === 'unresolved' ? `the target digest cannot be resolved: ${ctx.detail ?? 'unknown error'}`
      : abortDetail(ctx);
    await updateSelfUpdate(db, id, {
      phase, snapshot: persisted, chartVersion: SELF_UPDATE_CHART_VERSION, detail, abortCode: phase === 'aborted' ? (ctx.abortCode ?? 'preflight') : null, finished: true,
    });
    if (phase === 'aborted') log.warn({ step: ctx.failedStep }, `self-update aborted: ${detail}`);
    else log.info(`self-update not started: ${detail}`);
  }

  /** A restart during preflight: undo what the persisted chart says was changed, then abort. */
  private async closeInterrupted(): Promise<void> {
    for (const r of await listSelfUpdates(this.d.db, { phases: ['requested', 'preflight'] })) {
      const log = this.d.logger.child({ requestId: r.requestId });
      let helper = await this.d.engine.helperOf(r.requestId).catch(() => null);
      if (helper?.created) {
        // Created but never started (the restart came between the two): nothing ran, so it is
        // removed and the preflight undone like any other interrupted one.
        await this.d.engine.removeHelper().catch((err: Error) => log.error({ err }, `cannot remove the never-started ${HELPER_NAME}`));
        helper = null;
      }
      if (helper) {
        // The helper was started just before the restart: the update is in flight.
        await updateSelfUpdate(this.d.db, r.requestId, { phase: 'helper-running', helperContainerId: helper.id, helperDeadline: this.helperDeadline() });
        log.warn('the backend restarted right after starting the helper; its outcome will be reconciled');
        continue;
      }
      const ctx = (r.snapshot as { context?: Partial<SelfUpdateContext> } | null)?.context;
      const changes: PreflightChanges = ctx?.changes ?? {};
      let detail = 'interrupted: the backend restarted during preflight';
      try {
        await this.undo({ changes, target: ctx?.target ?? null, actionId: ctx?.actionId ?? r.actionId, detail });
        detail += '; nothing was changed';
      } catch (err) {
        detail += `; undoing the preflight failed (${(err as Error).message}): check the rollback tag and the staged compose file`;
      }
      await updateSelfUpdate(this.d.db, r.requestId, { phase: 'aborted', abortCode: 'preflight', detail, finished: true }, ['requested', 'preflight']);
      log.warn(detail);
    }
  }

  /** Reconciles the last unfinished self-update once its helper has exited (single flight). */
  reconcile(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    this.reconciling ??= this.runReconcile()
      .catch((err) => this.d.logger.error({ err }, 'self-update reconciliation failed'))
      .finally(() => {
        this.reconciling = null;
      });
    return this.reconciling;
  }

  private async runReconcile(): Promise<void> {
    const { db, engine, runtime, logger } = this.d;
    const actors = {
      findPending: fromPromise<PendingUpdate | null, undefined>(async () => {
        const p = await pendingReconciliation(db);
        if (!p) return null;
        return {
          requestId: p.requestId, actionId: p.actionId, targetTag: p.targetTag ?? '', targetDigest: p.targetDigest ?? '', targetImageId: p.targetImageId,
          previousReference: p.previousReference, previousDigest: p.previousDigest, previousImageId: p.previousImageId,
          preUpdateMigration: p.preUpdateMigration, helperId: p.helperContainerId, helperDeadline: p.helperDeadline?.toISOString() ?? null,
        };
      }),
      waitForHelper: fromPromise<HelperOutcome, { pending: PendingUpdate }>(async ({ input }) => {
        const p = input.pending;
        logger.info({ requestId: p.requestId }, `waiting for ${HELPER_NAME} to exit before reconciling the self-update`);
        return engine.waitHelper(p.helperId, { deadline: p.helperDeadline ? new Date(p.helperDeadline) : null, signal: this.abort.signal });
      }),
      inspectRunning: fromPromise<RunningNow, undefined>(async () => {
        const v = await runtime.version();
        return { reference: v.image, digest: v.digest, imageId: v.imageId, migration: await currentMigration(db) };
      }),
      repointChannelTag: fromPromise<string | null, RepointInput>(async ({ input }) => {
        const { pending: p, now } = input;
        const ref = `${this.repository}:${p.targetTag}`;
        // The helper switched and someone started another build since: the target did not fail.
        if (input.outcome === 'neither' && input.helper.status === 'ok') return null;
        if (!now.imageId) return `the local tag ${p.targetTag} was left alone: the id of the running image is unknown`;
        const current = await engine.imageIdOf(ref);
        if (current === now.imageId) return null;
        // Only the failed build is taken away: a channel tag moved since (a newer pull) is left.
        if (current !== null && p.targetImageId !== null && current !== p.targetImageId) return null;
        await engine.tag(now.imageId, this.repository, p.targetTag);
        logger.info({ requestId: p.requestId, reference: ref, imageId: now.imageId, replaced: current }, `${ref} points at the running image again, not at the build that did not stick`);
        return `the local tag ${p.targetTag} points at it again`;
      }),
      recordUndecided: fromPromise<void, UndecidedInput>(async ({ input }) => {
        const { pending: p, detail, helper } = input;
        const exitCode = helper?.exitCode ?? null;
        const changed = await db.transaction().execute(async (tx) => {
          if (!(await updateSelfUpdate(tx, p.requestId, { phase: 'undecided', detail, helperExitCode: exitCode, finished: true }, ['helper-running']))) return false;
          if (p.actionId) await recordFinished(tx, p.actionId, { status: 'failed', exitCode, detail });
          return true;
        });
        auditTrailChanged();
        if (changed) logger.error({ requestId: p.requestId, targetDigest: p.targetDigest }, `self-update closed as undecided: ${detail}`);
      }),
      recordOutcome: fromPromise<void, RecordInput>(async ({ input }) => {
        const { pending: p, outcome, detail, helper } = input;
        const phase = phaseOfOutcome(outcome);
        const changed = await db.transaction().execute(async (tx) => {
          if (!(await updateSelfUpdate(tx, p.requestId, { phase, detail, helperExitCode: helper.exitCode, finished: true }, ['helper-running']))) return false;
          if (p.actionId) await recordFinished(tx, p.actionId, { status: outcome === 'completed' ? 'completed' : 'failed', exitCode: helper.exitCode, detail });
          return true;
        });
        auditTrailChanged();
        if (!changed) return; // another process reconciled it meanwhile
        const fields = { requestId: p.requestId, outcome, targetDigest: p.targetDigest, runningDigest: input.now.digest, helperExitCode: helper.exitCode, helperStatus: helper.status };
        if (outcome === 'completed') logger.info(fields, `self-update completed: ${detail}`);
        else logger.warn(fields, `self-update did not stick (${phase}): ${detail}`);
      }),
    };
    const machine = bootReconcileMachine.provide({
      actors,
      actions: {
        alertChangedSchema: ({ context }) => {
          const p = context.pending!;
          logger.error(
            { requestId: p.requestId, preUpdateMigration: p.preUpdateMigration, schemaMigration: context.now?.migration, reason: context.helper ? helperReason(context.helper, p.targetTag) : null },
            `${CHANGED_SCHEMA}: the schema is at ${context.now?.migration ?? 'none'} but was at ${p.preUpdateMigration ?? 'none'} before the update; this build must tolerate the newer schema: verify it by hand`,
          );
        },
      },
    });
    const actor = createActor(machine, { input: { ...(this.d.retryMs !== undefined ? { retryMs: this.d.retryMs } : {}) } });
    this.actors.add(actor);
    let finish!: () => void;
    const done = new Promise<void>((resolve) => (finish = resolve));
    actor.subscribe({ complete: finish, error: (err) => { logger.error({ err }, 'self-update reconciliation chart failed'); finish(); } });
    const stopped = () => finish();
    this.abort.signal.addEventListener('abort', stopped, { once: true });
    actor.start();
    await done;
    this.abort.signal.removeEventListener('abort', stopped);
    this.actors.delete(actor);
    const snap = actor.getSnapshot();
    if (snap.value === 'failed') logger.error({ error: snap.context.lastError }, 'gave up reconciling the last self-update and could not close it (the database did not answer); the next boot tries again');
  }
}

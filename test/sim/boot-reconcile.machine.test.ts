// Simulation of the boot reconciliation chart with fake actors: generated paths take every
// transition and are checked against a model of the outcome rules; retries run on a SimulatedClock.
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, SimulatedClock, type AnyStateMachine, type EventObject } from 'xstate';
import { getAdjacencyMap, getShortestPaths, getSimplePaths } from 'xstate/graph';
import { bootReconcileMachine, type ReconcileInput } from '../../machines/boot-reconcile.machine.ts';
import {
  CHANGED_SCHEMA, helperReason, outcomeDetail, phaseOfOutcome, undecidedDetail,
  type HelperOutcome, type PendingUpdate, type ReconcileOutcome, type RunningNow,
} from '../../machines/self-update-outcome.machine.ts';
import { declaredEdges, edgeKey, enabledEdges, stateIds } from '../helpers/sim/chart.ts';

const pending: PendingUpdate = {
  requestId: 'r-1', actionId: '7', targetTag: 'dev-latest', targetDigest: 'sha256:new', targetImageId: 'img-new',
  previousReference: 'reg/installer:dev-41', previousDigest: 'sha256:old', previousImageId: 'img-old',
  preUpdateMigration: '0002_self_update', helperId: 'cid', helperDeadline: null, readAt: '2026-11-25T00:10:00.000Z',
};
const helperOk: HelperOutcome = { state: 'exited', exitCode: 0, status: 'ok', switchFailure: null, rollbackFailure: null };
const helperRolledBack: HelperOutcome = { state: 'exited', exitCode: 0, status: 'rolled-back', switchFailure: 'exit 1: container installer-backend is unhealthy', rollbackFailure: null };
const onTarget: RunningNow = { reference: 'reg/installer:dev-latest', digest: 'sha256:new', imageId: 'img-new', migration: '0002_self_update' };
const onPrevious: RunningNow = { reference: 'reg/installer:rollback', digest: 'sha256:old', imageId: 'img-old', migration: '0002_self_update' };
const onPreviousChanged: RunningNow = { ...onPrevious, migration: '0099_marker' };
const onOther: RunningNow = { reference: 'reg/installer:dev-40', digest: 'sha256:other', imageId: 'img-other', migration: '0002_self_update' };

const done = (id: string, output?: unknown) => ({ type: `xstate.done.actor.${id}`, output }) as unknown as EventObject;
const fail = (id: string) => ({ type: `xstate.error.actor.${id}`, error: new Error(`${id} broke`) }) as unknown as EventObject;
const RETRY = { type: 'xstate.after.retryDelay.bootReconcile.retrying' } as EventObject;

const EVENTS: EventObject[] = [
  done('findPending', null), done('findPending', pending), fail('findPending'),
  done('waitForHelper', helperOk), done('waitForHelper', helperRolledBack), fail('waitForHelper'),
  done('inspectRunning', onTarget), done('inspectRunning', onPrevious), done('inspectRunning', onPreviousChanged), done('inspectRunning', onOther), fail('inspectRunning'),
  done('repointChannelTag', 'the local tag dev-latest points at it again'), fail('repointChannelTag'),
  done('recordOutcome'), fail('recordOutcome'),
  done('recordUndecided'), fail('recordUndecided'),
  RETRY,
  // The hung guard of every waiting state (the helper's after its deadline).
  ...['finding', 'inspecting', 'repointing', 'recording', 'givingUp'].map((state) => ({ type: `xstate.after.hungTimeout.bootReconcile.${state}` }) as EventObject),
  { type: 'xstate.after.helperTimeout.bootReconcile.waitingForHelper' } as EventObject,
];

const INPUT: ReconcileInput = { maxAttempts: 2, retryMs: 1_000 };
/** Simple paths with a second attempt are too many to walk in a unit run; shortest paths cover the retry. */
const SIMPLE_INPUT: ReconcileInput = { maxAttempts: 1, retryMs: 1_000 };

/**
 * The rules: digests decide; a rollback with a moved schema is called out; an update that did not
 * stick has its channel tag taken back before the outcome is recorded; attempts exhausted with an
 * update known close it as undecided, with none known end in `failed`.
 */
function model(events: readonly EventObject[], maxAttempts: number): { state: string; outcome: ReconcileOutcome | null; alerts: number; repointed: boolean } {
  let state = 'finding';
  let attempts = 0;
  let found = false;
  let helper: HelperOutcome | null = null;
  let outcome: ReconcileOutcome | null = null;
  let alerts = 0;
  let repointed = false;
  for (const e of events) {
    if (['idle', 'reconciled', 'undecided', 'failed'].includes(state)) break;
    const kind = e.type.startsWith('xstate.done.actor.') ? 'done' : e.type.startsWith('xstate.error.actor.') ? 'error' : 'after';
    const id = e.type.replace(/^xstate\.(done|error)\.actor\./, '');
    const output = (e as unknown as { output: unknown }).output;
    const retry = () => {
      attempts++;
      state = attempts < maxAttempts ? 'retrying' : found ? 'givingUp' : 'failed';
    };
    const hungIn = /^xstate\.after\.(hungTimeout|helperTimeout)\.bootReconcile\./.test(e.type) ? e.type.replace(/^.*\.bootReconcile\./, '') : null;
    if (hungIn !== null) {
      // An attempt that does not answer in time counts as a failed one; a stalled re-point is said
      // in the detail like a failed one; a stalled close of an undecided update ends in `failed`.
      if (hungIn === state && state === 'repointing') [state, repointed] = ['recording', true];
      else if (hungIn === state && state === 'givingUp') state = 'failed';
      else if (hungIn === state) retry();
    } else if (state === 'retrying' && kind === 'after') state = 'finding';
    else if (state === 'finding' && id === 'findPending') {
      if (kind === 'error') retry();
      else if (output === null) state = 'idle';
      else [state, found] = ['waitingForHelper', true];
    } else if (state === 'waitingForHelper' && id === 'waitForHelper') {
      if (kind === 'error') retry();
      else [state, helper] = ['inspecting', output as HelperOutcome];
    } else if (state === 'inspecting' && id === 'inspectRunning') {
      if (kind === 'error') retry();
      else {
        const now = output as RunningNow;
        [state, repointed] = ['repointing', false];
        if (now.digest === pending.targetDigest) [outcome, state] = ['completed', 'recording'];
        else if (now.digest === pending.previousDigest) {
          outcome = now.migration === pending.preUpdateMigration ? 'rolled-back' : 'rolled-back-onto-changed-schema';
          if (outcome === 'rolled-back-onto-changed-schema') alerts++;
        } else outcome = 'neither';
      }
    } else if (state === 'repointing' && id === 'repointChannelTag') {
      // Done or not, the outcome is recorded: a tag that cannot move is said, not retried.
      [state, repointed] = ['recording', true];
    } else if (state === 'recording' && id === 'recordOutcome') {
      if (kind === 'error') retry();
      else state = 'reconciled';
    } else if (state === 'givingUp' && id === 'recordUndecided') {
      state = kind === 'error' ? 'failed' : 'undecided';
    }
  }
  void helper;
  return { state, outcome, alerts, repointed };
}

const quiet = () => fromPromise(() => new Promise<never>(() => {}));
function simulated(onAlert: () => void = () => {}): AnyStateMachine {
  return bootReconcileMachine.provide({
    actors: { findPending: quiet(), waitForHelper: quiet(), inspectRunning: quiet(), repointChannelTag: quiet(), recordOutcome: quiet(), recordUndecided: quiet() } as never,
    actions: { alertChangedSchema: onAlert },
  });
}

describe('boot reconciliation chart', () => {
  const paths = [
    ...getShortestPaths(simulated(), { input: INPUT, events: EVENTS }).map((p) => ({ p, input: INPUT })),
    ...getSimplePaths(simulated(), { input: SIMPLE_INPUT, events: EVENTS }).map((p) => ({ p, input: SIMPLE_INPUT })),
  ];

  it('reaches every state and takes every declared transition', () => {
    const states = Object.values(getAdjacencyMap(simulated(), { input: INPUT, events: EVENTS })).map((v) => v.state);
    const reached = new Set<string>();
    for (const s of states) for (const n of s._nodes) reached.add(n.id);
    const taken = enabledEdges(states, EVENTS);
    // `deciding` is transient: its four eventless branches are each asserted by the outcome checks below.
    reached.add('bootReconcile.deciding');
    taken.add(edgeKey({ from: 'bootReconcile.deciding', event: '(always)' }));
    // `retrying`'s eventless exits (to `failed`, to `givingUp`) are taken on the paths that exhaust
    // their attempts; both final states are asserted reached just below.
    if (states.some((s) => s.value === 'failed') && states.some((s) => s.value === 'undecided')) taken.add(edgeKey({ from: 'bootReconcile.retrying', event: '(always)' }));
    expect(reached).toEqual(new Set(stateIds(bootReconcileMachine)));
    expect(declaredEdges(bootReconcileMachine).map(edgeKey).filter((k) => !taken.has(k))).toEqual([]);
    expect(paths.length).toBeGreaterThan(20);
  });

  it('agrees with the model on every generated path, replayed on a live actor', () => {
    const outcomes = new Set<string>();
    const finals = new Set<string>();
    for (const { p, input } of paths) {
      const events = p.steps.map((s) => s.event).filter((e) => e.type !== 'xstate.init');
      let alerts = 0;
      const actor = createActor(simulated(() => alerts++), { input, clock: new SimulatedClock() }).start();
      for (const e of events) actor.send(e);
      const snap = actor.getSnapshot();
      const want = model(events, input.maxAttempts!);
      const label = events.map((e) => e.type.replace('xstate.', '')).join(' > ');
      expect(snap.value, label).toBe(want.state);
      if (want.state === 'undecided' || (want.state === 'failed' && snap.context.pending)) expect(snap.context.detail, label).toMatch(/^could not decide how the update to dev-latest \(sha256:new\) ended: /);
      if (want.outcome && want.state !== 'undecided') {
        expect(snap.context.outcome, label).toBe(want.outcome);
        outcomes.add(want.outcome);
      }
      expect(alerts, label).toBe(want.alerts);
      if (want.outcome === 'rolled-back-onto-changed-schema' && ['recording', 'reconciled'].includes(want.state)) expect(snap.context.detail, label).toBe(CHANGED_SCHEMA);
      if (want.outcome === 'completed') expect(want.repointed, label).toBe(false);
      if (['reconciled', 'recording'].includes(want.state) && want.outcome && want.outcome !== 'completed') expect(want.repointed, label).toBe(true);
      finals.add(String(snap.value));
      actor.stop();
    }
    expect(outcomes).toEqual(new Set(['completed', 'rolled-back', 'rolled-back-onto-changed-schema', 'neither']));
    expect([...finals].filter((f) => ['idle', 'reconciled', 'undecided', 'failed'].includes(f)).sort()).toEqual(['failed', 'idle', 'reconciled', 'undecided']);
  });

  it('retries after exactly the configured pause, and gives up after the last attempt', () => {
    const clock = new SimulatedClock();
    const actor = createActor(simulated(), { input: INPUT, clock }).start();
    actor.send(fail('findPending'));
    expect(actor.getSnapshot().value).toBe('retrying');
    clock.increment(999);
    expect(actor.getSnapshot().value).toBe('retrying');
    clock.increment(1);
    expect(actor.getSnapshot().value).toBe('finding');
    actor.send(fail('findPending'));
    expect(actor.getSnapshot().value).toBe('failed');
    expect(actor.getSnapshot().context.lastError).toBe('findPending broke');
  });

  it('with an update known, gives up by closing it as undecided, naming what could not be read', () => {
    const clock = new SimulatedClock();
    const actor = createActor(simulated(), { input: INPUT, clock }).start();
    actor.send(done('findPending', pending));
    actor.send({ type: 'xstate.error.actor.waitForHelper', error: new Error('connect ECONNREFUSED /var/run/docker.sock') } as unknown as EventObject);
    clock.increment(1_000);
    actor.send(done('findPending', pending));
    actor.send({ type: 'xstate.error.actor.waitForHelper', error: new Error('connect ECONNREFUSED /var/run/docker.sock') } as unknown as EventObject);
    expect(actor.getSnapshot().value).toBe('givingUp');
    const detail = actor.getSnapshot().context.detail;
    expect(detail).toBe(
      'could not decide how the update to dev-latest (sha256:new) ended: the helper container installer-self-updater could not be read through the Docker engine ' +
        '(2 attempts, last error: connect ECONNREFUSED /var/run/docker.sock); closed without an outcome so that jobs and updates are accepted again: ' +
        'compare GET /api/version with the target digest and read docker logs installer-self-updater',
    );
    actor.send(done('recordUndecided'));
    expect(actor.getSnapshot().value).toBe('undecided');
  });

  it('a channel tag that cannot be moved is said in the detail; the outcome is still recorded', () => {
    const actor = createActor(simulated(), { input: INPUT, clock: new SimulatedClock() }).start();
    actor.send(done('findPending', pending));
    actor.send(done('waitForHelper', helperRolledBack));
    actor.send(done('inspectRunning', onPrevious));
    expect(actor.getSnapshot().value).toBe('repointing');
    actor.send({ type: 'xstate.error.actor.repointChannelTag', error: new Error('cannot tag img-old as reg/installer:dev-latest: engine gone') } as unknown as EventObject);
    expect(actor.getSnapshot().value).toBe('recording');
    expect(actor.getSnapshot().context.detail).toMatch(/; still on the previous image reg\/installer:rollback \(sha256:old\); the local tag dev-latest still names the failed build: cannot tag img-old/);
  });
});

describe('outcome rules and details', () => {
  it('updated: the running digest is the target', () => {
    expect(outcomeDetail('completed', pending, onTarget, helperOk)).toBe('updated to dev-latest (sha256:new) from sha256:old');
    expect(phaseOfOutcome('completed')).toBe('completed');
  });

  it('rolled back: the reason comes from the helper', () => {
    const d = outcomeDetail('rolled-back', pending, onPrevious, helperRolledBack);
    expect(d).toBe('rolled back: the switch to dev-latest failed (exit 1: container installer-backend is unhealthy); helper exit 0; still on the previous image reg/installer:rollback (sha256:old)');
    expect(phaseOfOutcome('rolled-back')).toBe('rolled-back');
    expect(outcomeDetail('rolled-back', pending, onPrevious, helperRolledBack, 'the local tag dev-latest points at it again')).toMatch(
      /still on the previous image reg\/installer:rollback \(sha256:old\); the local tag dev-latest points at it again$/,
    );
    expect(phaseOfOutcome('rolled-back-onto-changed-schema')).toBe('rolled-back');
  });

  it('neither: names the image it runs and what the helper said', () => {
    const failed: HelperOutcome = { state: 'exited', exitCode: 1, status: 'failed', switchFailure: 'exit 1: x is unhealthy', rollbackFailure: 'exit 1: container installer-backend exited (3)' };
    const d = outcomeDetail('neither', pending, onOther, failed);
    expect(d).toContain('restarted on reg/installer:dev-40 (sha256:other), which is neither the target sha256:new nor the previous sha256:old');
    expect(d).toContain('the rollback failed too (exit 1: container installer-backend exited (3)); the backend was started again by hand');
    expect(phaseOfOutcome('neither')).toBe('neither');
  });

  it('rolled back onto a changed schema: the spec\'s words, then the backup taken before the update and its restore', () => {
    const onChanged = { ...onPrevious, migration: '0099_marker' };
    expect(outcomeDetail('rolled-back-onto-changed-schema', pending, onChanged, helperRolledBack)).toBe(CHANGED_SCHEMA);
    const backup = 'installer-20261125T001500000Z-sha256-000000000old.dump';
    const d = outcomeDetail('rolled-back-onto-changed-schema', { ...pending, backup }, onChanged, helperRolledBack);
    expect(d.startsWith(`${CHANGED_SCHEMA}; `)).toBe(true);
    expect(d).toBe(
      `${CHANGED_SCHEMA}; the database was backed up before the update as ${backup}; to bring the old schema back: ` +
        `docker stop installer-backend && docker exec installer-postgres pg_restore --clean --create --if-exists -U installer -d postgres /backups/${backup} && docker start installer-backend (docs/self-update.md)`,
    );
  });

  it('undecided: names the step that could not be read', () => {
    expect(undecidedDetail(pending, 'inspectRunning', 10, 'socket hang up')).toMatch(/^could not decide how the update to dev-latest \(sha256:new\) ended: the image this backend runs .* \(10 attempts, last error: socket hang up\)/);
    expect(undecidedDetail(pending, 'findPending', 1, null)).toContain('could not be read from the database (1 attempt, last error: unknown)');
  });

  it('a helper that is gone or still running is said so', () => {
    expect(helperReason({ ...helperOk, state: 'missing' }, 'dev-latest')).toContain('is gone');
    expect(helperReason({ ...helperOk, state: 'timed-out' }, 'dev-latest')).toContain('still running at its deadline');
  });

  it('falls back to image ids when a digest is unknown (an image never pushed)', async () => {
    const { isUpdated, isRolledBack } = await import('../../machines/self-update-outcome.machine.ts');
    const p = { ...pending, previousDigest: null };
    expect(isRolledBack(p, { ...onPrevious, digest: null })).toBe(true);
    expect(isUpdated(p, { ...onTarget, digest: null })).toBe(true);
    expect(isRolledBack(p, { ...onOther, digest: null })).toBe(false);
  });
});

// Simulation of the boot reconciliation chart with fake actors: generated paths take every
// transition and are checked against a model of the outcome rules; retries run on a SimulatedClock.
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, SimulatedClock, type AnyStateMachine, type EventObject } from 'xstate';
import { getAdjacencyMap, getShortestPaths, getSimplePaths } from 'xstate/graph';
import {
  bootReconcileMachine, CHANGED_SCHEMA, helperReason, outcomeDetail, phaseOfOutcome,
  type HelperOutcome, type PendingUpdate, type ReconcileInput, type ReconcileOutcome, type RunningNow,
} from '../../machines/boot-reconcile.machine.ts';
import { declaredEdges, edgeKey, enabledEdges, stateIds } from '../helpers/chart.ts';

const pending: PendingUpdate = {
  requestId: 'r-1', actionId: '7', targetTag: 'dev-latest', targetDigest: 'sha256:new', targetImageId: 'img-new',
  previousReference: 'reg/installer:dev-41', previousDigest: 'sha256:old', previousImageId: 'img-old',
  preUpdateMigration: '0002_self_update', helperId: 'cid', helperDeadline: null,
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
  done('recordOutcome'), fail('recordOutcome'),
  RETRY,
];

const INPUT: ReconcileInput = { maxAttempts: 2, retryMs: 1_000 };

/** The rules: digests decide; a rollback with a moved schema is called out. */
function model(events: readonly EventObject[]): { state: string; outcome: ReconcileOutcome | null; alerts: number } {
  let state = 'finding';
  let attempts = 0;
  let helper: HelperOutcome | null = null;
  let outcome: ReconcileOutcome | null = null;
  let alerts = 0;
  for (const e of events) {
    if (['idle', 'reconciled', 'failed'].includes(state)) break;
    const kind = e.type.startsWith('xstate.done.actor.') ? 'done' : e.type.startsWith('xstate.error.actor.') ? 'error' : 'after';
    const id = e.type.replace(/^xstate\.(done|error)\.actor\./, '');
    const output = (e as unknown as { output: unknown }).output;
    const retry = () => {
      attempts++;
      state = attempts >= INPUT.maxAttempts! ? 'failed' : 'retrying';
    };
    if (state === 'retrying' && kind === 'after') state = 'finding';
    else if (state === 'finding' && id === 'findPending') {
      if (kind === 'error') retry();
      else state = output === null ? 'idle' : 'waitingForHelper';
    } else if (state === 'waitingForHelper' && id === 'waitForHelper') {
      if (kind === 'error') retry();
      else [state, helper] = ['inspecting', output as HelperOutcome];
    } else if (state === 'inspecting' && id === 'inspectRunning') {
      if (kind === 'error') retry();
      else {
        const now = output as RunningNow;
        state = 'recording';
        if (now.digest === pending.targetDigest) outcome = 'completed';
        else if (now.digest === pending.previousDigest) {
          outcome = now.migration === pending.preUpdateMigration ? 'rolled-back' : 'rolled-back-onto-changed-schema';
          if (outcome === 'rolled-back-onto-changed-schema') alerts++;
        } else outcome = 'neither';
      }
    } else if (state === 'recording' && id === 'recordOutcome') {
      if (kind === 'error') retry();
      else state = 'reconciled';
    }
  }
  void helper;
  return { state, outcome, alerts };
}

const quiet = () => fromPromise(() => new Promise<never>(() => {}));
function simulated(onAlert: () => void = () => {}): AnyStateMachine {
  return bootReconcileMachine.provide({
    actors: { findPending: quiet(), waitForHelper: quiet(), inspectRunning: quiet(), recordOutcome: quiet() } as never,
    actions: { alertChangedSchema: onAlert },
  });
}

describe('boot reconciliation chart', () => {
  const paths = [...getShortestPaths(simulated(), { input: INPUT, events: EVENTS }), ...getSimplePaths(simulated(), { input: INPUT, events: EVENTS })];

  it('reaches every state and takes every declared transition', () => {
    const states = Object.values(getAdjacencyMap(simulated(), { input: INPUT, events: EVENTS })).map((v) => v.state);
    const reached = new Set<string>();
    for (const s of states) for (const n of s._nodes) reached.add(n.id);
    const taken = enabledEdges(states, EVENTS);
    // `deciding` is transient: its four eventless branches are each asserted by the outcome checks below.
    reached.add('bootReconcile.deciding');
    taken.add(edgeKey({ from: 'bootReconcile.deciding', event: '(always)' }));
    // `retrying`'s eventless exit to `failed` is taken on the paths that exhaust their attempts.
    if (states.some((s) => s.value === 'failed')) taken.add(edgeKey({ from: 'bootReconcile.retrying', event: '(always)' }));
    expect(reached).toEqual(new Set(stateIds(bootReconcileMachine)));
    expect(declaredEdges(bootReconcileMachine).map(edgeKey).filter((k) => !taken.has(k))).toEqual([]);
    expect(paths.length).toBeGreaterThan(20);
  });

  it('agrees with the model on every generated path, replayed on a live actor', () => {
    const outcomes = new Set<string>();
    for (const p of paths) {
      const events = p.steps.map((s) => s.event).filter((e) => e.type !== 'xstate.init');
      let alerts = 0;
      const actor = createActor(simulated(() => alerts++), { input: INPUT, clock: new SimulatedClock() }).start();
      for (const e of events) actor.send(e);
      const snap = actor.getSnapshot();
      const want = model(events);
      const label = events.map((e) => e.type.replace('xstate.', '')).join(' > ');
      expect(snap.value, label).toBe(want.state);
      if (want.outcome) {
        expect(snap.context.outcome, label).toBe(want.outcome);
        outcomes.add(want.outcome);
      }
      expect(alerts, label).toBe(want.alerts);
      if (want.outcome === 'rolled-back-onto-changed-schema') expect(snap.context.detail, label).toBe(CHANGED_SCHEMA);
      actor.stop();
    }
    expect(outcomes).toEqual(new Set(['completed', 'rolled-back', 'rolled-back-onto-changed-schema', 'neither']));
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
});

describe('outcome rules and details', () => {
  it('updated: the running digest is the target', () => {
    expect(outcomeDetail('completed', pending, onTarget, helperOk)).toBe('updated to dev-latest (sha256:new) from sha256:old');
    expect(phaseOfOutcome('completed')).toBe('completed');
  });

  it('rolled back: the reason comes from the helper', () => {
    const d = outcomeDetail('rolled-back', pending, onPrevious, helperRolledBack);
    expect(d).toBe('rolled back: the switch to dev-latest failed (exit 1: container installer-backend is unhealthy); helper exit 0; still on the previous image reg/installer:dev-41 (sha256:old)');
    expect(phaseOfOutcome('rolled-back')).toBe('rolled-back');
    expect(phaseOfOutcome('rolled-back-onto-changed-schema')).toBe('rolled-back');
  });

  it('neither: names the image it runs and what the helper said', () => {
    const failed: HelperOutcome = { state: 'exited', exitCode: 1, status: 'failed', switchFailure: 'exit 1: x is unhealthy', rollbackFailure: 'exit 1: container installer-backend exited (3)' };
    const d = outcomeDetail('neither', pending, onOther, failed);
    expect(d).toContain('restarted on reg/installer:dev-40 (sha256:other), which is neither the target sha256:new nor the previous sha256:old');
    expect(d).toContain('the rollback failed too (exit 1: container installer-backend exited (3)); the backend was started again by hand');
    expect(phaseOfOutcome('neither')).toBe('neither');
  });

  it('a helper that is gone or still running is said so', () => {
    expect(helperReason({ ...helperOk, state: 'missing' }, 'dev-latest')).toContain('is gone');
    expect(helperReason({ ...helperOk, state: 'timed-out' }, 'dev-latest')).toContain('still running at its deadline');
  });

  it('falls back to image ids when a digest is unknown (an image never pushed)', async () => {
    const { isUpdated, isRolledBack } = await import('../../machines/boot-reconcile.machine.ts');
    const p = { ...pending, previousDigest: null };
    expect(isRolledBack(p, { ...onPrevious, digest: null })).toBe(true);
    expect(isUpdated(p, { ...onTarget, digest: null })).toBe(true);
    expect(isRolledBack(p, { ...onOther, digest: null })).toBe(false);
  });
});

// Simulation of the verdict of the boot reconciliation chart: on every generated path, what the chart
// asks of the channel tag (the repoint order), what it hands the record step (notification, schema
// alarm, quarantine, audit row, detail) and what its final state outputs are checked against a model
// of the rules written apart from the chart (docs/self-update.md, docs/update-policy.md).
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, SimulatedClock, type AnyStateMachine, type EventObject } from 'xstate';
import { getShortestPaths, getSimplePaths } from 'xstate/graph';
import { bootReconcileMachine, type BootReconcileOutput, type RepointInput } from '../../machines/boot-reconcile.machine.ts';
import { CHANGED_SCHEMA, type HelperOutcome, type PendingUpdate, type RepointOrder, type RunningNow, type Verdict } from '../../machines/self-update-outcome.machine.ts';

const pending: PendingUpdate = {
  requestId: 'r-1', actionId: '7', targetTag: 'dev-latest', targetDigest: 'sha256:new', targetImageId: 'img-new',
  previousReference: 'reg/installer:dev-41', previousDigest: 'sha256:old', previousImageId: 'img-old',
  preUpdateMigration: '0002_self_update', helperId: 'cid', helperDeadline: null, readAt: '2026-11-25T00:10:00.000Z',
};
const restored: PendingUpdate = { ...pending, restored: true };
const helper = (status: HelperOutcome['status'], state: HelperOutcome['state'] = 'exited'): HelperOutcome => ({ state, exitCode: status === 'ok' ? 0 : 1, status, switchFailure: null, rollbackFailure: null });
const HELPERS = [helper('ok'), helper('rolled-back'), helper('failed'), helper(null, 'missing'), helper(null, 'timed-out')];
const RUNNING: RunningNow[] = [
  { reference: 'reg/installer:dev-latest', digest: 'sha256:new', imageId: 'img-new', migration: '0002_self_update' },
  { reference: 'reg/installer:rollback', digest: 'sha256:old', imageId: 'img-old', migration: '0002_self_update' },
  { reference: 'reg/installer:rollback', digest: 'sha256:old', imageId: 'img-old', migration: '0099_marker' },
  { reference: 'reg/installer:dev-40', digest: 'sha256:other', imageId: 'img-other', migration: '0002_self_update' },
  // An image whose id the engine did not report: the tag cannot be pointed at it.
  { reference: 'reg/installer:dev-39', digest: 'sha256:older', imageId: null, migration: '0002_self_update' },
];

const done = (id: string, output?: unknown) => ({ type: `xstate.done.actor.${id}`, output }) as unknown as EventObject;
const fail = (id: string) => ({ type: `xstate.error.actor.${id}`, error: new Error(`${id} broke`) }) as unknown as EventObject;
const hung = (delay: string, state: string) => ({ type: `xstate.after.${delay}.bootReconcile.${state}` }) as EventObject;
const HUNG = 'No output for 15 minutes — aborted as hung';

const EVENTS: EventObject[] = [
  done('findPending', null), done('findPending', pending), done('findPending', restored), fail('findPending'),
  ...HELPERS.map((h) => done('waitForHelper', h)), hung('helperTimeout', 'waitingForHelper'),
  ...RUNNING.map((r) => done('inspectRunning', r)),
  done('repointChannelTag', 'moved'), done('repointChannelTag', 'unchanged'), fail('repointChannelTag'), hung('hungTimeout', 'repointing'),
  done('recordOutcome'), fail('recordOutcome'),
  done('recordUndecided'), fail('recordUndecided'),
];

type Outcome = 'completed' | 'rolled-back' | 'rolled-back-onto-changed-schema' | 'neither';

/** What the rules say of one update, from what the chart was told. */
function rules(p: PendingUpdate, h: HelperOutcome, now: RunningNow) {
  const outcome: Outcome =
    now.digest === p.targetDigest ? 'completed'
    : now.digest === p.previousDigest ? (now.migration === p.preUpdateMigration ? 'rolled-back' : 'rolled-back-onto-changed-schema')
    : 'neither';
  // The switch worked and someone started another build since: the target did not fail.
  const targetFailed = outcome !== 'completed' && !(outcome === 'neither' && h.status === 'ok');
  const order: RepointOrder | null =
    outcome === 'completed' ? null
    : !targetFailed ? { action: 'keep', tag: 'dev-latest', why: null }
    : now.imageId === null ? { action: 'keep', tag: 'dev-latest', why: 'the id of the running image is unknown' }
    : { action: 'move', tag: 'dev-latest', imageId: now.imageId, onlyFrom: 'img-new' };
  const notification = outcome === 'completed' ? 'self-update.completed' : outcome === 'neither' || h.status === 'failed' ? 'self-update.failed' : 'self-update.rolled-back';
  return { outcome, order, notification, quarantine: targetFailed, schemaAlarm: outcome === 'rolled-back-onto-changed-schema' };
}

/** What the detail says of the channel tag, after the repoint step ended with `event`. */
function tagNote(order: RepointOrder | null, event: EventObject | undefined): string | null {
  if (!order) return null;
  if (order.action === 'keep') return order.why ? `the local tag dev-latest was left alone: ${order.why}` : null;
  if (event?.type === 'xstate.error.actor.repointChannelTag') return 'the local tag dev-latest still names the failed build: repointChannelTag broke';
  if (event?.type.startsWith('xstate.after.hungTimeout')) return `the local tag dev-latest still names the failed build: ${HUNG}`;
  return (event as { output?: unknown } | undefined)?.output === 'moved' ? 'the local tag dev-latest points at it again' : null;
}

const INPUT = { maxAttempts: 1, retryMs: 1_000 };

/** The chart with actors that never answer and keep the input each was started with. */
function simulated(seen: { repoint: RepointInput[]; record: Verdict[] }): AnyStateMachine {
  const quiet = () => fromPromise(() => new Promise<never>(() => {}));
  const keep = <I,>(into: I[]) => fromPromise<never, I>(({ input }) => (into.push(input), new Promise<never>(() => {})));
  return bootReconcileMachine.provide({
    actors: {
      findPending: quiet(), waitForHelper: quiet(), inspectRunning: quiet(),
      repointChannelTag: keep(seen.repoint), recordOutcome: keep(seen.record), recordUndecided: keep(seen.record),
    } as never,
  });
}

describe('boot reconciliation chart: the verdict on every path', () => {
  const none = { repoint: [], record: [] };
  const paths = [...getShortestPaths(simulated(none), { input: INPUT, events: EVENTS }), ...getSimplePaths(simulated(none), { input: INPUT, events: EVENTS })];

  it('asks for the repoint, the notification, the alarm and the quarantine the rules call for', () => {
    const orders = new Set<string>();
    const verdicts = new Set<string>();
    for (const path of paths) {
      const events = path.steps.map((s) => s.event).filter((e) => e.type !== 'xstate.init');
      const label = events.map((e) => e.type.replace('xstate.', '')).join(' > ');
      const seen: { repoint: RepointInput[]; record: Verdict[] } = { repoint: [], record: [] };
      const actor = createActor(simulated(seen), { input: INPUT, clock: new SimulatedClock() }).start();
      for (const e of events) actor.send(e);
      const snap = actor.getSnapshot();
      const output = snap.output as BootReconcileOutput | undefined;
      const found = events.find((e) => e.type === 'xstate.done.actor.findPending') as { output?: PendingUpdate | null } | undefined;
      const p = found?.output ?? null;
      const h = (events.find((e) => e.type === 'xstate.done.actor.waitForHelper') as { output?: HelperOutcome } | undefined)?.output ?? null;
      const now = (events.find((e) => e.type === 'xstate.done.actor.inspectRunning') as { output?: RunningNow } | undefined)?.output ?? null;

      if (p && h && now) {
        const want = rules(p, h, now);
        // The repoint step is asked exactly what the rules say; a completed update never reaches it.
        expect(seen.repoint, label).toEqual(want.order ? [{ requestId: 'r-1', order: want.order }] : []);
        if (want.order) orders.add(JSON.stringify(want.order));
        const decided = seen.record[0];
        if (decided) {
          expect(decided, label).toMatchObject({
            phase: want.outcome === 'rolled-back-onto-changed-schema' ? 'rolled-back' : want.outcome, outcome: want.outcome,
            audit: want.outcome === 'completed' ? 'completed' : 'failed',
            notification: want.notification, schemaAlarm: want.schemaAlarm, quarantine: want.quarantine, helper: h, now, pending: p,
          });
          const repointEnd = events[events.findIndex((e) => e.type === 'xstate.done.actor.inspectRunning') + 1];
          const note = tagNote(want.order, repointEnd);
          if (want.outcome === 'rolled-back-onto-changed-schema') expect(decided.detail, label).toMatch(new RegExp(`^${CHANGED_SCHEMA}`));
          else if (note) expect(decided.detail, label).toContain(`; ${note}`);
          else expect(decided.detail, label).not.toContain('the local tag');
          expect(decided.detail.endsWith('after the database was restored from the backup taken in this update\'s preflight'), label).toBe(!!p.restored);
          verdicts.add(`${want.outcome} ${want.notification} alarm=${want.schemaAlarm} quarantine=${want.quarantine}`);
        }
      } else {
        expect(seen.repoint, label).toEqual([]);
      }
      // Closed without an outcome: a failure notified, the build quarantined, the audit row failed.
      if (snap.value === 'givingUp' || snap.value === 'undecided') {
        expect(seen.record.at(-1), label).toMatchObject({ phase: 'undecided', notification: 'self-update.failed', quarantine: true, audit: 'failed', pending: p, helper: h });
        verdicts.add('undecided');
      }
      // The final state's output is the verdict written, or why there is none.
      if (snap.status === 'done') {
        if (snap.value === 'idle') expect(output, label).toEqual({ end: 'idle' });
        else if (snap.value === 'failed') expect(output, label).toEqual({ end: 'failed', requestId: p ? 'r-1' : null, error: expect.any(String) as string });
        else expect(output, label).toEqual({ end: snap.value, verdict: seen.record.at(-1) });
      } else {
        expect(output, label).toBeUndefined();
      }
      actor.stop();
    }
    // Every order and every kind of verdict was walked.
    expect([...orders].map((o) => (JSON.parse(o) as RepointOrder).action).sort()).toEqual(['keep', 'keep', 'move', 'move']);
    expect([...verdicts].sort()).toEqual([
      'completed self-update.completed alarm=false quarantine=false',
      'neither self-update.failed alarm=false quarantine=false',
      'neither self-update.failed alarm=false quarantine=true',
      'rolled-back self-update.failed alarm=false quarantine=true',
      'rolled-back self-update.rolled-back alarm=false quarantine=true',
      'rolled-back-onto-changed-schema self-update.failed alarm=true quarantine=true',
      'rolled-back-onto-changed-schema self-update.rolled-back alarm=true quarantine=true',
      'undecided',
    ]);
  });

  it('measures the helper\'s deadline from the instant the update was read, on the simulated clock alone', () => {
    const clock = new SimulatedClock();
    const actor = createActor(simulated(none), { input: { hungMinutes: 15 }, clock }).start();
    // Read an hour before the machine's own time: the wait still runs 20 minutes, then the guard's 15.
    const readAt = '2020-01-01T00:00:00.000Z';
    actor.send(done('findPending', { ...pending, readAt, helperDeadline: '2020-01-01T00:20:00.000Z' }));
    clock.increment(35 * 60_000 - 1);
    expect(actor.getSnapshot().value).toBe('waitingForHelper');
    clock.increment(1);
    expect(actor.getSnapshot().value).toBe('retrying');
  });
});

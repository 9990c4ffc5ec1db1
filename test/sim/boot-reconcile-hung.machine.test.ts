// The hung guard of the boot reconciliation chart on a SimulatedClock: finding, the helper's wait,
// inspecting and recording are each abandoned after exactly the guard's minutes, counted as a
// failed attempt with the spec's message, and retried. The helper's wait runs to its deadline
// first: its guard fires the guard's minutes after the deadline.
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, SimulatedClock, type EventObject } from 'xstate';
import { bootReconcileMachine, helperWaitMs } from '../../machines/boot-reconcile.machine.ts';
import type { HelperOutcome, PendingUpdate, RunningNow } from '../../machines/self-update-outcome.machine.ts';

const pending: PendingUpdate = {
  requestId: 'r-1', actionId: '7', targetTag: 'dev-latest', targetDigest: 'sha256:new', targetImageId: 'img-new',
  previousReference: 'reg/installer:dev-41', previousDigest: 'sha256:old', previousImageId: 'img-old',
  preUpdateMigration: '0002_self_update', helperId: 'cid', helperDeadline: null, readAt: '2026-11-25T00:10:00.000Z',
};
const helperOk: HelperOutcome = { state: 'exited', exitCode: 0, status: 'ok', switchFailure: null, rollbackFailure: null };
const onTarget: RunningNow = { reference: 'reg/installer:dev-latest', digest: 'sha256:new', imageId: 'img-new', migration: '0002_self_update' };
const done = (id: string, output?: unknown) => ({ type: `xstate.done.actor.${id}`, output }) as unknown as EventObject;
const ROUTE: [state: string, invoke: string, output: unknown][] = [
  ['finding', 'findPending', pending],
  ['waitingForHelper', 'waitForHelper', helperOk],
  ['inspecting', 'inspectRunning', onTarget],
  ['recording', 'recordOutcome', undefined],
];

function start(stopped: string[]) {
  const stalled = (id: string) => fromPromise(({ signal }) => new Promise<never>(() => signal.addEventListener('abort', () => stopped.push(id))));
  const clock = new SimulatedClock();
  const machine = bootReconcileMachine.provide({ actors: Object.fromEntries(ROUTE.map(([, id]) => [id, stalled(id)])) as never });
  return { clock, actor: createActor(machine, { input: { maxAttempts: 2, retryMs: 1_000 }, clock }).start() };
}

describe('boot reconciliation chart: the hung guard', () => {
  for (const [i, [state, invoke]] of ROUTE.entries()) {
    it(`${state}: abandoned after exactly 15 minutes as a failed attempt, then retried`, () => {
      const stopped: string[] = [];
      const { clock, actor } = start(stopped);
      for (const [, id, output] of ROUTE.slice(0, i)) actor.send(done(id, output));
      expect(actor.getSnapshot().value).toBe(state);
      stopped.length = 0; // the steps before were left when they finished
      clock.increment(15 * 60_000 - 1);
      expect(actor.getSnapshot().value).toBe(state);
      clock.increment(1);
      expect(actor.getSnapshot().value).toBe('retrying');
      expect(stopped).toEqual([invoke]);
      expect(actor.getSnapshot().context).toMatchObject({ attempts: 1, lastError: 'No output for 15 minutes — aborted as hung' });
      clock.increment(1_000);
      expect(actor.getSnapshot().value).toBe('finding');
    });
  }

  it('the helper\'s wait runs to its deadline, and is abandoned the guard\'s minutes after it', () => {
    const stopped: string[] = [];
    const { clock, actor } = start(stopped);
    // A deadline 20 minutes after the update was read (the guard's delay is measured from that instant on entry).
    actor.send(done('findPending', { ...pending, helperDeadline: new Date(Date.parse(pending.readAt) + 20 * 60_000).toISOString() }));
    stopped.length = 0; // finding was left when it finished
    clock.increment(20 * 60_000 + 15 * 60_000 - 5_000);
    expect(actor.getSnapshot().value).toBe('waitingForHelper');
    clock.increment(5_000);
    expect(actor.getSnapshot().value).toBe('retrying');
    expect(stopped).toEqual(['waitForHelper']);
    expect(actor.getSnapshot().context).toMatchObject({ attempts: 1, failedStep: 'waitForHelper', lastError: 'No output for 15 minutes — aborted as hung' });
  });

  it('helperWaitMs: the deadline, then the guard; a past or missing deadline leaves the guard alone', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(helperWaitMs('2026-01-01T00:10:00Z', 15, now)).toBe(25 * 60_000);
    expect(helperWaitMs('2025-12-31T23:00:00Z', 15, now)).toBe(15 * 60_000);
    expect(helperWaitMs(null, 15, now)).toBe(15 * 60_000);
    expect(helperWaitMs('not a time', 15, now)).toBe(15 * 60_000);
  });
});

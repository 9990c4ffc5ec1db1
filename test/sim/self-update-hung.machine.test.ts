// The hung guard of the self-update chart on a SimulatedClock: every state that waits on work is
// abandoned after exactly the guard's minutes with the spec's message, the work is stopped, and
// what happens next is what a failure of that step leads to (abort, or undo then abort).
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, SimulatedClock, type EventObject } from 'xstate';
import { selfUpdateMachine, type RunningImage, type UpdateTarget } from '../../machines/self-update.machine.ts';

const running: RunningImage = { inContainer: true, reference: 'reg/installer:dev-41', tag: 'dev-41', digest: 'sha256:old', imageId: 'img-old' };
const newer: UpdateTarget = { channel: 'dev', tag: 'dev-latest', digest: 'sha256:new' };
const done = (id: string, output?: unknown) => ({ type: `xstate.done.actor.${id}`, output }) as unknown as EventObject;
const HUNG = 'No output for 15 minutes — aborted as hung';

/** Each waiting state, the events that lead there, and where its guard leads. */
const ROUTE: [state: string, invoke: string, output: unknown, onHung: 'unresolved' | 'aborted' | 'undoing'][] = [
  ['resolving', 'resolveTarget', { running, target: newer }, 'unresolved'],
  ['checking', 'checkPreconditions', undefined, 'aborted'],
  ['pulling', 'pullTarget', 'img-new', 'aborted'],
  ['fetchingCompose', 'fetchPublishedCompose', 'services: {}\n', 'aborted'],
  ['backingUp', 'backupDatabase', 'installer-20261125T001500000Z-sha256-old.dump', 'aborted'],
  ['taggingRollback', 'tagRollback', { before: null }, 'undoing'],
  ['staging', 'stageComposeFile', { before: null }, 'undoing'],
  ['taggingNew', 'tagNew', { before: null }, 'undoing'],
  ['recording', 'recordAction', { actionId: '7', preUpdateMigration: '0002' }, 'undoing'],
  ['removingLeftover', 'removeLeftoverHelper', undefined, 'undoing'],
  ['spawning', 'spawnHelper', 'cid', 'undoing'],
];

function start(stopped: string[]) {
  // Work that never finishes; each records when it is stopped.
  const stalled = (id: string) => fromPromise(({ signal }) => new Promise<never>(() => signal.addEventListener('abort', () => stopped.push(id))));
  const ids = ['resolveTarget', ...ROUTE.slice(1).map((r) => r[1]), 'undoPreflight'];
  const clock = new SimulatedClock();
  const machine = selfUpdateMachine.provide({ actors: Object.fromEntries(ids.map((id) => [id, stalled(id)])) as never });
  return { clock, actor: createActor(machine, { input: { requestId: 'r-1' }, clock }).start() };
}

describe('self-update chart: the hung guard', () => {
  for (const [i, [state, invoke, , onHung]] of ROUTE.entries()) {
    it(`${state}: abandoned after exactly 15 minutes, to ${onHung}`, () => {
      const stopped: string[] = [];
      const { clock, actor } = start(stopped);
      for (const [, id, output] of ROUTE.slice(0, i)) actor.send(done(id, output));
      expect(actor.getSnapshot().value).toBe(state);
      stopped.length = 0; // the steps before were left when they finished
      clock.increment(15 * 60_000 - 1);
      expect(actor.getSnapshot().value).toBe(state);
      clock.increment(1);
      expect(actor.getSnapshot().value).toBe(onHung);
      expect(stopped).toEqual([invoke]);
      expect(actor.getSnapshot().context).toMatchObject({ failedStep: state, detail: HUNG });
      if (onHung === 'aborted') expect(actor.getSnapshot().context.abortCode).toBe('preflight');
    });
  }

  it('undoing: a stalled undo is abandoned too and reported as an undo that failed', () => {
    const stopped: string[] = [];
    const { clock, actor } = start(stopped);
    for (const [, id, output] of ROUTE.slice(0, ROUTE.findIndex(([state]) => state === 'staging'))) actor.send(done(id, output));
    stopped.length = 0;
    clock.increment(15 * 60_000);
    expect(actor.getSnapshot().value).toBe('undoing');
    clock.increment(15 * 60_000 - 1);
    expect(actor.getSnapshot().value).toBe('undoing');
    clock.increment(1);
    expect(actor.getSnapshot().value).toBe('aborted');
    expect(actor.getSnapshot().context).toMatchObject({ abortCode: 'preflight', undoFailed: HUNG, failedStep: 'staging' });
    expect(stopped).toEqual(['stageComposeFile', 'undoPreflight']);
  });

  it('the guard\'s minutes come from the input', () => {
    const clock = new SimulatedClock();
    const machine = selfUpdateMachine.provide({ actors: { resolveTarget: fromPromise(() => new Promise<never>(() => {})) } as never });
    const actor = createActor(machine, { input: { requestId: 'r-2', hungMinutes: 2 }, clock }).start();
    clock.increment(2 * 60_000);
    expect(actor.getSnapshot().value).toBe('unresolved');
    expect(actor.getSnapshot().context.detail).toBe('No output for 2 minutes — aborted as hung');
  });
});

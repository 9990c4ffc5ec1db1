// Simulation of the host migration chart: every transition through xstate/graph paths replayed on
// a live actor, and the hung guard on a SimulatedClock.
import { describe, expect, it } from 'vitest';
import { createActor, fromCallback, SimulatedClock, type EventObject, type AnyStateMachine } from 'xstate';
import { getAdjacencyMap, getSimplePaths } from 'xstate/graph';
import { hostMigrationMachine, type HostMigrationEvent } from '../../machines/host-migration.machine.ts';
import { declaredEdges, edgeKey, enabledEdges, stateIds } from '../helpers/sim/chart.ts';

const HUNG = 'xstate.after.hungTimeout.hostMigration.running.watching';
const HUNG_COPYING = 'xstate.after.hungTimeout.hostMigration.copying.watching';
const EVENTS = [
  { type: 'COPIED' },
  { type: 'COPY_FAILED', message: 'no space left' },
  { type: 'COPY_FAILED', message: 'copying failed (exit 1)', exitCode: 1 },
  { type: 'OUTPUT' },
  { type: 'EXITED', exitCode: 0 },
  { type: 'EXITED', exitCode: 2 },
  { type: 'RUN_FAILED', message: 'image missing' },
  { type: 'CANCEL', by: 'root' },
  { type: HUNG },
  { type: HUNG_COPYING },
  { type: 'xstate.error.actor.copyScript', error: new Error('copy crashed') },
  { type: 'xstate.error.actor.runScript', error: new Error('run crashed') },
] as unknown as HostMigrationEvent[];

const quiet = fromCallback<EventObject, Record<string, never>>(() => () => {});
const simulated = (): AnyStateMachine => hostMigrationMachine.provide({ actors: { copyScript: quiet, runScript: quiet } });
const input = { hungMinutes: 15 };

function model(events: readonly { type: string; message?: string; exitCode?: number; by?: string }[]) {
  let state = 'copying';
  let detail: string | null = null;
  let exitCode: number | null = null;
  for (const e of events) {
    if (state === 'copying') {
      if (e.type === 'COPIED') state = 'running';
      else if (e.type === HUNG_COPYING) [state, detail] = ['hung', 'No output for 15 minutes — aborted as hung'];
      else if (e.type === 'COPY_FAILED') [state, detail, exitCode] = ['failed', e.message!, e.exitCode ?? null];
      else if (e.type === 'xstate.error.actor.copyScript') [state, detail] = ['failed', 'copy crashed'];
      else if (e.type === 'CANCEL') [state, detail] = ['cancelled', `cancelled by ${e.by}`];
    } else if (state === 'running') {
      if (e.type === 'EXITED') [state, detail, exitCode] = e.exitCode === 0 ? ['completed', null, 0] : ['failed', `migrate-host.sh exited with code ${e.exitCode}`, e.exitCode!];
      else if (e.type === 'RUN_FAILED') [state, detail] = ['failed', e.message!];
      else if (e.type === 'xstate.error.actor.runScript') [state, detail] = ['failed', 'run crashed'];
      else if (e.type === 'CANCEL') [state, detail] = ['cancelled', `cancelled by ${e.by}`];
      else if (e.type === HUNG) [state, detail] = ['hung', 'No output for 15 minutes — aborted as hung'];
    }
  }
  return { state, detail, exitCode };
}

describe('host migration chart', () => {
  it('reaches every state and takes every declared transition', () => {
    const states = Object.values(getAdjacencyMap(simulated(), { input, events: EVENTS })).map((v) => v.state);
    const reached = new Set(states.flatMap((s) => s._nodes.map((n: { id: string }) => n.id)));
    expect(reached).toEqual(new Set(stateIds(hostMigrationMachine)));
    const taken = enabledEdges(states, EVENTS);
    expect(declaredEdges(hostMigrationMachine).map(edgeKey).filter((k) => !taken.has(k))).toEqual([]);
  });

  it('agrees with the model on every simple path', () => {
    const paths = getSimplePaths(simulated(), { input, events: EVENTS });
    expect(paths.length).toBeGreaterThan(8);
    for (const p of paths) {
      const events = p.steps.map((s) => s.event).filter((e) => e.type !== 'xstate.init');
      const actor = createActor(simulated(), { input, clock: new SimulatedClock() }).start();
      for (const e of events) actor.send(e);
      const want = model(events as never);
      const value = actor.getSnapshot().value;
      expect(typeof value === 'string' ? value : Object.keys(value)[0]).toBe(want.state);
      expect(actor.getSnapshot().context.detail).toBe(want.detail);
      // Only a process's own end gives an exit code (the copy's or the script's); a cancel, the
      // guard or a step that could not start give null.
      expect(actor.getSnapshot().context.exitCode).toBe(want.exitCode);
      // A final state outputs how the job ended; a chart still at work outputs nothing.
      const ended = ['completed', 'failed', 'hung', 'cancelled'].includes(want.state);
      expect(actor.getSnapshot().output).toEqual(ended ? { state: want.state, detail: want.detail, exitCode: want.exitCode } : undefined);
    }
  });

  it('aborts as hung after 15 silent minutes of the running script', () => {
    const clock = new SimulatedClock();
    const actor = createActor(simulated(), { input, clock }).start();
    actor.send({ type: 'COPIED' });
    clock.increment(14 * 60_000);
    actor.send({ type: 'OUTPUT' });
    clock.increment(15 * 60_000 - 1);
    expect(actor.getSnapshot().matches('running')).toBe(true);
    clock.increment(1);
    expect(actor.getSnapshot().value).toBe('hung');
  });

  it('aborts as hung after 15 silent minutes of copying the script; output resets the guard', () => {
    let stopped = 0;
    const copy = fromCallback<EventObject, Record<string, never>>(() => () => {
      stopped++;
    });
    const clock = new SimulatedClock();
    const actor = createActor(hostMigrationMachine.provide({ actors: { copyScript: copy, runScript: quiet } }), { input, clock }).start();
    expect(actor.getSnapshot().value).toEqual({ copying: 'watching' });
    clock.increment(14 * 60_000);
    actor.send({ type: 'OUTPUT' });
    clock.increment(15 * 60_000 - 1);
    expect(actor.getSnapshot().matches('copying')).toBe(true);
    expect(stopped).toBe(0);
    clock.increment(1);
    expect(actor.getSnapshot().value).toBe('hung');
    expect(actor.getSnapshot().context).toMatchObject({ detail: 'No output for 15 minutes — aborted as hung', exitCode: null });
    expect(stopped).toBe(1);
  });
});

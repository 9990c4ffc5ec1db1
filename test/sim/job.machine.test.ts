// Simulation of the job chart with fake actors: every transition is walked through paths that
// xstate/graph generates, each path is replayed on a real actor and checked against a small model,
// and the hung guard runs on a SimulatedClock instead of waiting 15 minutes.
import { describe, expect, it } from 'vitest';
import { createActor, fromCallback, SimulatedClock, type EventObject, type AnyStateMachine } from 'xstate';
import { getAdjacencyMap, getShortestPaths, getSimplePaths } from 'xstate/graph';
import { jobMachine, hungMessage, type JobEvent, type JobInput, type StepInput } from '../../machines/job.machine.ts';
import { declaredEdges, edgeKey, enabledEdges, stateIds } from '../helpers/sim/chart.ts';

const HUNG_EVENT = 'xstate.after.hungTimeout.job.running.watching';
const HUNG_PREPARING = 'xstate.after.hungTimeout.job.preparing.watching';
const EVENTS = [
  { type: 'PREPARED' },
  { type: 'PREPARE_FAILED', message: 'templates unreachable' },
  { type: 'OUTPUT' },
  { type: 'STEP_DONE', exitCode: 0 },
  { type: 'STEP_DONE', exitCode: 3 },
  { type: 'STEP_FAILED', message: 'docker not found' },
  { type: 'STEP_FAILED', message: 'up failed: the Docker engine is not reachable', exitCode: 1 },
  { type: 'CANCEL', by: 'amy' },
  { type: HUNG_EVENT },
  { type: HUNG_PREPARING },
  { type: 'xstate.error.actor.prepare', error: new Error('prepare crashed') },
  { type: 'xstate.error.actor.runStep', error: new Error('spawn failed') },
] as unknown as JobEvent[];

const INPUTS: JobInput[] = [
  { steps: ['restart'], needsPrepare: false, hungMinutes: 15 },
  { steps: ['pull', 'up'], needsPrepare: true, hungMinutes: 15 },
];

/** What the chart must conclude from a sequence of events: the model the paths are checked against. */
function model(input: JobInput, events: readonly JobEvent[]): { state: string; detail: string | null; exitCode: number | null } {
  let state = input.needsPrepare ? 'preparing' : 'running';
  let step = 0;
  let detail: string | null = null;
  let exitCode: number | null = null;
  for (const e of events as (JobEvent | { type: string; error?: Error })[]) {
    if (['completed', 'failed', 'hung', 'cancelled'].includes(state)) break;
    if (state === 'preparing') {
      if (e.type === 'PREPARED') state = 'running';
      else if (e.type === 'PREPARE_FAILED') [state, detail] = ['failed', (e as { message: string }).message];
      else if (e.type === 'xstate.error.actor.prepare') [state, detail] = ['failed', 'prepare crashed'];
      else if (e.type === 'CANCEL') [state, detail] = ['cancelled', `cancelled by ${(e as { by: string }).by}`];
      else if (e.type === HUNG_PREPARING) [state, detail] = ['hung', hungMessage(input.hungMinutes)];
    } else if (state === 'running') {
      // The exit code is the one of the step that ended the job; a step that ends it without its
      // process ending (cancel, hung, cannot run) leaves null, never an earlier step's 0.
      if (e.type === 'STEP_DONE') {
        exitCode = (e as { exitCode: number }).exitCode;
        if (exitCode !== 0) [state, detail] = ['failed', `${input.steps[step]} exited with code ${exitCode}`];
        else if (step + 1 < input.steps.length) [step, exitCode] = [step + 1, null];
        else state = 'completed';
      } else if (e.type === 'STEP_FAILED') [state, detail, exitCode] = ['failed', (e as { message: string }).message, (e as { exitCode?: number }).exitCode ?? null];
      else if (e.type === 'xstate.error.actor.runStep') [state, detail] = ['failed', 'spawn failed'];
      else if (e.type === 'CANCEL') [state, detail] = ['cancelled', `cancelled by ${(e as { by: string }).by}`];
      else if (e.type === HUNG_EVENT) [state, detail] = ['hung', hungMessage(input.hungMinutes)];
    }
  }
  return { state, detail, exitCode };
}

const quietPrepare = fromCallback<EventObject, Record<string, never>>(() => () => {});
const quietStep = fromCallback<EventObject, StepInput>(() => () => {});
const simulated = (): AnyStateMachine => jobMachine.provide({ actors: { prepare: quietPrepare, runStep: quietStep } });

const topState = (value: unknown) => (typeof value === 'string' ? value : Object.keys(value as object)[0]!);

describe('job chart', () => {
  const paths = INPUTS.flatMap((input) => [
    ...getShortestPaths(simulated(), { input, events: EVENTS }).map((p) => ({ input, p })),
    ...getSimplePaths(simulated(), { input, events: EVENTS }).map((p) => ({ input, p })),
  ]);

  it('reaches every state and takes every declared transition', () => {
    const reached = new Set<string>();
    const taken = new Set<string>();
    for (const input of INPUTS) {
      const states = Object.values(getAdjacencyMap(simulated(), { input, events: EVENTS })).map((v) => v.state);
      for (const s of states) for (const n of s._nodes) reached.add(n.id);
      for (const k of enabledEdges(states, EVENTS)) taken.add(k);
    }
    // `starting` is transient: its eventless transition is taken on every start, so it never rests.
    reached.add('job.starting');
    taken.add(edgeKey({ from: 'job.starting', event: '(always)' }));
    expect(reached).toEqual(new Set(stateIds(jobMachine)));
    expect(declaredEdges(jobMachine).map(edgeKey).filter((k) => !taken.has(k))).toEqual([]);
    expect(paths.length).toBeGreaterThan(20);
  });

  it('agrees with the model on every generated path, replayed on a live actor', () => {
    for (const { input, p } of paths) {
      const events = p.steps.map((s) => s.event).filter((e) => e.type !== 'xstate.init');
      const actor = createActor(simulated(), { input, clock: new SimulatedClock() }).start();
      for (const e of events) actor.send(e);
      const snap = actor.getSnapshot();
      const want = model(input, events);
      const label = events.map((e) => e.type).join(' > ');
      expect(topState(snap.value), label).toBe(want.state);
      expect(snap.context.detail, label).toBe(want.detail);
      expect(snap.context.exitCode, label).toBe(want.exitCode);
      if (want.state === 'completed') expect(snap.context.exitCode).toBe(0);
      if (['cancelled', 'hung'].includes(want.state)) expect(snap.context.exitCode, label).toBeNull();
      // A final state outputs how the job ended; a chart still at work outputs nothing.
      const ended = ['completed', 'failed', 'hung', 'cancelled'].includes(want.state);
      expect(snap.output, label).toEqual(ended ? { state: want.state, detail: want.detail, exitCode: want.exitCode } : undefined);
      actor.stop();
    }
  });

  it('aborts as hung after exactly the configured minutes of silence; output resets the guard', () => {
    const clock = new SimulatedClock();
    const actor = createActor(simulated(), { input: { steps: ['pull'], needsPrepare: false, hungMinutes: 15 }, clock }).start();
    clock.increment(15 * 60_000 - 1);
    expect(actor.getSnapshot().matches('running')).toBe(true);
    actor.send({ type: 'OUTPUT' });
    clock.increment(15 * 60_000 - 1);
    expect(actor.getSnapshot().matches('running')).toBe(true);
    clock.increment(1);
    expect(actor.getSnapshot().value).toBe('hung');
    expect(actor.getSnapshot().context.detail).toBe('No output for 15 minutes — aborted as hung');
  });

  it('aborts as hung while preparing after exactly the configured minutes of silence; output resets the guard', () => {
    let stopped = 0;
    const prepare = fromCallback<EventObject, Record<string, never>>(() => () => {
      stopped++;
    });
    const clock = new SimulatedClock();
    const actor = createActor(jobMachine.provide({ actors: { prepare, runStep: quietStep } }), {
      input: { steps: ['pull', 'up'], needsPrepare: true, hungMinutes: 15 },
      clock,
    }).start();
    expect(actor.getSnapshot().value).toEqual({ preparing: 'watching' });
    clock.increment(15 * 60_000 - 1);
    actor.send({ type: 'OUTPUT' });
    clock.increment(15 * 60_000 - 1);
    expect(actor.getSnapshot().matches('preparing')).toBe(true);
    expect(stopped).toBe(0); // output re-enters only the guard, never the preparation itself
    clock.increment(1);
    expect(actor.getSnapshot().value).toBe('hung');
    expect(actor.getSnapshot().context).toMatchObject({ detail: 'No output for 15 minutes — aborted as hung', exitCode: null });
    expect(stopped).toBe(1);
  });

  it('a deploy cancelled during up after a good pull records no exit code, not the pull\'s 0', () => {
    const actor = createActor(simulated(), { input: { steps: ['pull', 'up', 'prune'], needsPrepare: true, hungMinutes: 15 } }).start();
    actor.send({ type: 'PREPARED' });
    actor.send({ type: 'STEP_DONE', exitCode: 0 });
    expect(actor.getSnapshot().context).toMatchObject({ stepIndex: 1, exitCode: null });
    actor.send({ type: 'CANCEL', by: 'amy' });
    expect(actor.getSnapshot().value).toBe('cancelled');
    expect(actor.getSnapshot().context.exitCode).toBeNull();
  });

  it('stops the running step when cancelled (its cleanup runs)', () => {
    let stopped = 0;
    const step = fromCallback<EventObject, StepInput>(() => () => {
      stopped++;
    });
    const actor = createActor(jobMachine.provide({ actors: { prepare: quietPrepare, runStep: step } }), {
      input: { steps: ['up'], needsPrepare: false, hungMinutes: 15 },
    }).start();
    actor.send({ type: 'CANCEL', by: 'amy' });
    expect(actor.getSnapshot().value).toBe('cancelled');
    expect(actor.getSnapshot().context.detail).toBe('cancelled by amy');
    expect(stopped).toBe(1);
  });
});

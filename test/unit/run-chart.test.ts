// Running one chart on its own (controllers/runtime/run-chart.ts): a persist write for each change
// of the state value, in order and one at a time; the end awaited with its writes (or not, when
// asked); a stop through the signal, before or during the run; a chart that throws; and the
// ordered writes a reconciler shares with the chart's actors.
import { describe, expect, it } from 'vitest';
import { assign, createMachine, fromPromise } from 'xstate';
import { OrderedWrites, runChart, type ChartRun, type RunningChart } from '../../controllers/runtime/run-chart.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** idle -> working (GO) -> waiting (an actor that resolves) -> done (FINISH), counting in its context. */
const chart = createMachine({
  id: 'test',
  initial: 'idle',
  context: { n: 0 },
  states: {
    idle: { on: { GO: 'working', NOOP: { actions: assign({ n: ({ context }) => context.n + 1 }) } } },
    working: {
      invoke: { src: fromPromise(async () => sleep(5)), onDone: 'waiting' },
    },
    waiting: { on: { FINISH: 'done' } },
    done: { type: 'final' },
  },
});

/** Persist writes that take `ms` each and record their start and end. */
function recorder(ms = 0) {
  const log: string[] = [];
  let inFlight = 0;
  let overlapped = false;
  const persist = async (_snapshot: unknown, state: { value: unknown }) => {
    const v = String(state.value);
    inFlight++;
    if (inFlight > 1) overlapped = true;
    log.push(`start ${v}`);
    await sleep(ms);
    log.push(`end ${v}`);
    inFlight--;
  };
  return { log, persist, overlapped: () => overlapped };
}

const noError = (err: unknown) => {
  throw err;
};

/** The test chart run with fresh ordered writes, a chart error failing the test, and `o` over that. */
const run = (o: Partial<ChartRun<typeof chart>>) =>
  runChart({ machine: chart, input: {}, persist: async () => {}, writes: new OrderedWrites(noError), onChartError: noError, ...o });

describe('runChart', () => {
  it('persists each change of the state value once, in order and one at a time, and resolves after the last write', async () => {
    const r = recorder(10);
    const result = await run({
      persist: r.persist,
      started: (actor: RunningChart) => {
        // An event that changes the context but not the state value writes nothing.
        actor.send({ type: 'NOOP' });
        actor.send({ type: 'GO' });
        setTimeout(() => actor.send({ type: 'FINISH' }), 30);
      },
    });
    expect(r.log).toEqual(['start idle', 'end idle', 'start working', 'end working', 'start waiting', 'end waiting', 'start done', 'end done']);
    expect(r.overlapped()).toBe(false);
    expect(result.stopped).toBe(false);
    expect(result.snapshot.value).toBe('done');
    expect(result.snapshot.context.n).toBe(1);
    expect(result.persisted).toMatchObject({ value: 'done', status: 'done' });
  });

  it('with awaitWrites false, resolves at the end without waiting for the writes; flushing the writes waits for them', async () => {
    const r = recorder(30);
    const writes = new OrderedWrites(noError);
    await run({
      persist: r.persist,
      writes,
      awaitWrites: false,
      started: (actor) => {
        actor.send({ type: 'GO' });
        setTimeout(() => actor.send({ type: 'FINISH' }), 10);
      },
    });
    expect(r.log).not.toContain('end done');
    await writes.flush();
    expect(r.log.at(-1)).toBe('end done');
  });

  it('stops when the signal aborts during the run: the result says so, and the writes asked for have ended', async () => {
    const r = recorder(5);
    const stop = new AbortController();
    const result = await run({
      persist: r.persist,
      signal: stop.signal,
      started: (actor) => {
        actor.send({ type: 'GO' });
        setTimeout(() => stop.abort(), 30);
      },
    });
    expect(result.stopped).toBe(true);
    expect(result.snapshot.value).toBe('waiting');
    expect(r.log.at(-1)).toBe('end waiting');
  });

  it('never starts a chart whose signal has already aborted', async () => {
    const r = recorder();
    let started = false;
    const stop = new AbortController();
    stop.abort();
    const result = await run({
      persist: r.persist,
      signal: stop.signal,
      started: () => void (started = true),
    });
    expect(result.stopped).toBe(true);
    expect(started).toBe(false);
    expect(r.log).toEqual([]);
  });

  it('a chart that throws is reported and its run ends', async () => {
    const throwing = createMachine({
      initial: 'a',
      states: {
        a: {
          on: {
            BOOM: {
              actions: () => {
                throw new Error('boom');
              },
            },
          },
        },
      },
    });
    const reported: unknown[] = [];
    const result = await runChart({
      machine: throwing,
      input: {},
      persist: async () => {},
      writes: new OrderedWrites(noError),
      onChartError: (err) => reported.push(err),
      started: (actor) => actor.send({ type: 'BOOM' }),
    });
    expect(reported).toHaveLength(1);
    expect((reported[0] as Error).message).toBe('boom');
    expect(result.stopped).toBe(false);
  });
});

describe('OrderedWrites', () => {
  it('runs writes one after another in the order asked; a failed one holds up none after it', async () => {
    const errors: unknown[] = [];
    const w = new OrderedWrites((err) => errors.push(err));
    const order: string[] = [];
    w.queue(async () => {
      await sleep(20);
      order.push('first');
    });
    w.queue(async () => {
      throw new Error('second failed');
    });
    const third = w.add(async () => void order.push('third'));
    const fourth = w.add(async () => {
      throw new Error('fourth failed');
    });
    w.queue(async () => void order.push('fifth'));
    await third;
    await expect(fourth).rejects.toThrow('fourth failed');
    await w.flush();
    expect(order).toEqual(['first', 'third', 'fifth']);
    // `queue` reports its failure; `add` hands it to the caller only.
    expect(errors.map((e) => (e as Error).message)).toEqual(['second failed']);
  });
});

// The runtime alone (controllers/runtime/work-queue.ts): what each result of `reconcile` leads to,
// retries with their backoff and the row ended when they run out, one reconcile per key at a time,
// stop ending every timer, and the watchdog ending overdue rows (docs/adr/0042-reconcile-contract.md).
import { afterEach, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import type { Condition } from '../../src/contracts/conditions.ts';
import { done, requeueAfter, terminal, type ReconcileResult, type RowStatus } from '../../controllers/runtime/reconcile.ts';
import { WorkQueue, type Overdue, type WorkQueueOptions } from '../../controllers/runtime/work-queue.ts';
import { eventually } from '../helpers/shared/eventually.ts';

const logger = pino({ level: 'silent' });
const BACKOFF = { baseMs: 10, maxMs: 40, attempts: 3 };

/** A row status that remembers what the runtime wrote. */
function recorder<K>() {
  const errors: { key: K; condition: Condition }[] = [];
  const recovered: { key: K; condition: Condition }[] = [];
  const failed: { key: K; detail: string }[] = [];
  const status: RowStatus<K> = {
    recordError: async (key, condition) => void errors.push({ key, condition }),
    recordRecovered: async (key, condition) => void recovered.push({ key, condition }),
    fail: async (key, detail) => void failed.push({ key, detail }),
  };
  return { status, errors, recovered, failed };
}

const queues: WorkQueue<never>[] = [];
function queue<K>(o: Omit<WorkQueueOptions<K>, 'logger'>): WorkQueue<K> {
  const q = new WorkQueue<K>({ logger, backoff: BACKOFF, pollMs: 3_600_000, ...o });
  queues.push(q as WorkQueue<never>);
  return q;
}

/** Claims the given keys once each, in order. */
function claims(keys: string[]): () => Promise<string | undefined> {
  const left = [...keys];
  return async () => left.shift();
}

afterEach(async () => {
  await Promise.all(queues.splice(0).map((q) => q.stop()));
});

describe('work queue', () => {
  it('lets a key go on done, and claims the next', async () => {
    const seen: string[] = [];
    const r = recorder<string>();
    const q = queue<string>({ reconciler: { name: 't', reconcile: async (k) => (seen.push(k), done()) }, status: r.status, claim: claims(['a', 'b', 'c']), concurrency: 1 });
    await q.start();
    await eventually(() => seen.length === 3, 'three reconciles');
    await q.idle();
    expect(seen).toEqual(['a', 'b', 'c']);
    expect(q.inFlight).toBe(0);
    expect([r.errors, r.failed]).toEqual([[], []]);
  });

  it('looks again after requeue-after, holding the key (and its place) meanwhile', async () => {
    const calls: number[] = [];
    const r = recorder<string>();
    const q = queue<string>({
      reconciler: { name: 't', reconcile: async (k) => (k === 'a' && calls.push(Date.now()) < 3 ? requeueAfter(30, 'waiting') : done()) },
      status: r.status,
      claim: claims(['a', 'b']),
      concurrency: 1,
    });
    await q.start();
    await eventually(() => calls.length === 3, 'three looks at a');
    expect(calls[1]! - calls[0]!).toBeGreaterThanOrEqual(25);
    await eventually(() => q.inFlight === 0, 'b claimed once a is done');
    expect(r.failed).toEqual([]);
  });

  it('ends the row on terminal, with the error as its detail, without retrying', async () => {
    let calls = 0;
    const r = recorder<string>();
    const q = queue<string>({ reconciler: { name: 't', reconcile: async () => (calls++, terminal('the target is gone')) }, status: r.status, claim: claims(['a']) });
    await q.start();
    await eventually(() => r.failed.length === 1, 'the row ended');
    expect(r.failed).toEqual([{ key: 'a', detail: 'the target is gone' }]);
    expect(calls).toBe(1);
    expect(r.errors).toEqual([]);
  });

  it('records a throw on the row, retries after the backoff, and marks the row reconciled once it succeeds', async () => {
    const at: number[] = [];
    const r = recorder<string>();
    const q = queue<string>({
      reconciler: {
        name: 't',
        reconcile: async () => {
          at.push(Date.now());
          if (at.length < 3) throw new Error(`boom ${at.length}`);
          return done();
        },
      },
      status: r.status,
      claim: claims(['a']),
    });
    await q.start();
    await eventually(() => r.recovered.length === 1, 'the recovered condition');
    expect(r.errors.map((e) => [e.key, e.condition.status, e.condition.message])).toEqual([
      ['a', 'False', 't (attempt 1): boom 1'],
      ['a', 'False', 't (attempt 2): boom 2'],
    ]);
    expect(r.recovered[0]!.condition).toMatchObject({ type: 'Reconciled', status: 'True' });
    expect(at[1]! - at[0]!).toBeGreaterThanOrEqual(8); // base 10 ms
    expect(at[2]! - at[1]!).toBeGreaterThanOrEqual(18); // then 20 ms
    expect(r.failed).toEqual([]);
    await eventually(() => q.inFlight === 0, 'the key let go');
  });

  it('ends the row failed with the last error when retries run out, and frees its place', async () => {
    let calls = 0;
    const r = recorder<string>();
    const after: string[] = [];
    const q = queue<string>({
      reconciler: {
        name: 't',
        reconcile: async (k) => {
          if (k === 'b') return (after.push(k), done());
          calls++;
          throw new Error('the database did not answer');
        },
      },
      status: r.status,
      claim: claims(['a', 'b']),
      concurrency: 1,
    });
    await q.start();
    await eventually(() => after.length === 1, 'b claimed after a ended');
    expect(calls).toBe(BACKOFF.attempts);
    expect(r.errors).toHaveLength(BACKOFF.attempts);
    expect(r.failed).toEqual([{ key: 'a', detail: 'the database did not answer' }]);
  });

  it('runs one reconcile per key at a time: a wake during a run runs it once more after', async () => {
    let active = 0;
    let most = 0;
    let calls = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const q = queue<null>({
      reconciler: {
        name: 't',
        reconcile: async () => {
          active++;
          most = Math.max(most, active);
          calls++;
          if (calls === 1) await gate;
          active--;
          return done();
        },
      },
      status: recorder<null>().status,
    });
    await q.start();
    await eventually(() => calls === 1, 'the first run');
    for (let i = 0; i < 5; i++) q.wake();
    release();
    await eventually(() => calls === 2, 'one run more');
    await q.idle();
    expect(calls).toBe(2);
    expect(most).toBe(1);
  });

  it('stop ends every timer: no requeue or retry runs after it', async () => {
    let calls = 0;
    const q = queue<string>({
      reconciler: {
        name: 't',
        reconcile: async (k) => {
          calls++;
          if (k === 'a') return requeueAfter(20, 'later');
          throw new Error('again');
        },
      },
      status: recorder<string>().status,
      claim: claims(['a', 'b']),
      pollMs: 10,
      watchdog: { everyMs: 10, overdue: async () => [] },
    });
    await q.start();
    await eventually(() => calls >= 2, 'both keys run');
    await q.stop();
    await q.idle();
    const stoppedAt = calls;
    await new Promise((r) => setTimeout(r, 100)); // proving an absence: nothing may run in this time
    expect(calls).toBe(stoppedAt);
  });

  it('the watchdog aborts an overdue key in progress, waits for it, and ends its row', async () => {
    const r = recorder<string>();
    let aborted = false;
    let overdue: Overdue<string>[] = [];
    const q = queue<string>({
      reconciler: {
        name: 't',
        reconcile: (_k, signal) =>
          new Promise<ReconcileResult>((resolve) => {
            // Wedged until aborted; what it then returns is ignored.
            signal.addEventListener('abort', () => {
              aborted = true;
              resolve(requeueAfter(10, 'would loop'));
            });
          }),
      },
      status: r.status,
      claim: claims(['a', 'b']),
      concurrency: 1,
      watchdog: { everyMs: 3_600_000, overdue: async () => overdue },
    });
    await q.start();
    await eventually(() => q.inFlight === 1, 'a claimed');
    overdue = [{ key: 'a', detail: 'No output for 15 minutes — aborted as hung' }];
    await q.watchdog();
    overdue = [];
    expect(aborted).toBe(true);
    expect(r.failed).toEqual([{ key: 'a', detail: 'No output for 15 minutes — aborted as hung' }]);
    // Its place is free: b is claimed (and wedges in turn).
    await eventually(() => q.inFlight === 1, 'b claimed');
  });

  it('the watchdog ends an overdue row no reconcile here holds, at start too', async () => {
    const r = recorder<string>();
    const q = queue<string>({
      reconciler: { name: 't', reconcile: async () => done() },
      status: r.status,
      claim: async () => undefined,
      watchdog: { everyMs: 3_600_000, overdue: async () => (r.failed.length ? [] : [{ key: 'left', detail: 'hung' }]) },
    });
    await q.start();
    expect(r.failed).toEqual([{ key: 'left', detail: 'hung' }]);
  });

  it('a keyless reconciler is retried with its backoff, never ended, and runs again at the next wake', async () => {
    let calls = 0;
    const r = recorder<null>();
    const q = queue<null>({
      reconciler: {
        name: 'policy',
        reconcile: async () => {
          calls++;
          throw new Error('no database');
        },
      },
      status: r.status,
    });
    await q.start();
    await eventually(() => r.failed.length === 1, 'retries ran out');
    expect(calls).toBe(BACKOFF.attempts);
    q.wake();
    await eventually(() => calls === BACKOFF.attempts + 1, 'the next wake');
  });

  it('a standing key is not let go when its retries run out: it rests, runs again, and records its recovery', async () => {
    const calls: number[] = [];
    let failing = true;
    const r = recorder<string>();
    const q = queue<string>({
      reconciler: {
        name: 'observer',
        reconcile: async () => {
          calls.push(Date.now());
          if (failing) throw new Error('the row was not written');
          return requeueAfter(3_600_000, 'the next look');
        },
      },
      status: r.status,
      claim: async () => undefined,
      restAfterGivingUp: () => 150,
    });
    await q.start();
    q.enqueue('platform');
    await eventually(() => r.failed.length === 1, 'retries ran out');
    const gaveUpAt = Date.now();
    expect(r.failed).toEqual([{ key: 'platform', detail: 'the row was not written' }]);
    // Held while it rests.
    expect(q.inFlight).toBe(1);
    failing = false;
    await eventually(() => r.recovered.length === 1, 'the run after the rest');
    expect(calls).toHaveLength(BACKOFF.attempts + 1);
    expect(calls.at(-1)! - gaveUpAt).toBeGreaterThanOrEqual(100);
    expect(r.recovered[0]!.condition).toMatchObject({ reason: 'Recovered', message: expect.stringContaining(`after ${BACKOFF.attempts} failed attempts`) });
    expect(q.inFlight).toBe(1);
  });

  it('enqueueAfter runs a key once its delay is over, or sooner when woken for it; a held key keeps its own timer', async () => {
    const seen: { key: string; at: number }[] = [];
    const r = recorder<string>();
    const q = queue<string>({ reconciler: { name: 't', reconcile: async (key) => (seen.push({ key, at: Date.now() }), done()) }, status: r.status, claim: async () => undefined });
    await q.start();
    const began = Date.now();
    q.enqueueAfter('channel', 200);
    q.enqueueAfter('other', 5_000);
    await new Promise((res) => setTimeout(res, 50));
    expect(seen).toEqual([]);
    q.enqueueAfter('channel', 10); // held already: its timer stays
    await eventually(() => seen.length === 1, 'the delayed key');
    expect(seen[0]!.key).toBe('channel');
    expect(seen[0]!.at - began).toBeGreaterThanOrEqual(190);
    q.enqueue('other');
    await eventually(() => seen.length === 2, 'the key woken before its delay');
    expect(seen[1]!.key).toBe('other');
    expect(seen[1]!.at - began).toBeLessThan(5_000);
  });
});

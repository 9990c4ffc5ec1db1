// The work queue's claiming (controllers/runtime/work-queue.ts) against a real Postgres: a NOTIFY
// wakes it, it holds no more keys than its concurrency and claims again as places free, a
// notification that comes while a claim is under way is not lost, a failed claim is tried again at
// the next wake, and two queues claiming from one table (two processes) never take the same row.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { pino } from 'pino';
import { done, type RowStatus } from '../../controllers/runtime/reconcile.ts';
import { WorkQueue, type WorkQueueOptions } from '../../controllers/runtime/work-queue.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { eventually } from '../helpers/shared/eventually.ts';

const logger = pino({ level: 'silent' });
const CHANNEL = 'test_work';
const status: RowStatus<number> = { recordError: async () => {}, recordRecovered: async () => {}, fail: async () => {} };

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase({ migrate: false });
  await sql`create table work (id serial primary key, state text not null default 'queued', claimed_by text)`.execute(t.database.db);
});
afterAll(async () => {
  await t?.drop();
});

const queues: WorkQueue<number>[] = [];
afterEach(async () => {
  await Promise.all(queues.splice(0).map(async (q) => (await q.stop(), await q.idle())));
  await sql`truncate work restart identity`.execute(t.database.db);
});

/** Queued rows, and a NOTIFY for them when `notify`. */
async function add(n: number, notify = true): Promise<void> {
  await sql`insert into work (state) select 'queued' from generate_series(1, ${n}::int)`.execute(t.database.db);
  if (notify) await sql`select pg_notify(${CHANNEL}, '')`.execute(t.database.db);
}

/** Claims the oldest queued row for `worker`, as the controllers claim theirs (skipping rows locked by another claim). */
async function claimRow(worker: string): Promise<number | undefined> {
  const r = await sql<{ id: number }>`
    update work set state = 'running', claimed_by = ${worker}
    where id = (select id from work where state = 'queued' order by id limit 1 for update skip locked)
    returning id`.execute(t.database.db);
  return r.rows[0]?.id;
}

function queue(o: Partial<WorkQueueOptions<number>> & Pick<WorkQueueOptions<number>, 'reconciler'>): WorkQueue<number> {
  const q = new WorkQueue<number>({
    status,
    logger,
    listen: (c, n) => t.database.listen(c, n),
    channels: [CHANNEL],
    // No poll within a test: only a notification (or a freed place) makes it claim.
    pollMs: 3_600_000,
    claim: () => claimRow('a'),
    ...o,
  });
  queues.push(q);
  return q;
}

/** A reconciler whose runs wait until released, recording what it ran and how many ran at once. */
function held() {
  const seen: number[] = [];
  const waiting: (() => void)[] = [];
  let running = 0;
  let most = 0;
  return {
    seen,
    most: () => most,
    waiting: () => waiting.length,
    releaseAll: () => waiting.splice(0).forEach((r) => r()),
    reconciler: {
      name: 'held',
      reconcile: async (key: number) => {
        seen.push(key);
        running++;
        most = Math.max(most, running);
        await new Promise<void>((r) => waiting.push(r));
        running--;
        return done();
      },
    },
  };
}

describe('work queue claims', () => {
  it('a NOTIFY on its channel wakes it: it claims and runs the rows queued since', async () => {
    const seen: number[] = [];
    const q = queue({ reconciler: { name: 't', reconcile: async (k) => (seen.push(k), done()) } });
    await q.start();
    await q.idle();
    expect(seen).toEqual([]);
    await add(2);
    await eventually(() => seen.length === 2, 'the notified rows to run');
    expect(seen).toEqual([1, 2]);
    // Rows queued without a notification wait for the next wake.
    await add(1, false);
    await new Promise((r) => setTimeout(r, 200));
    expect(seen).toEqual([1, 2]);
    q.wake();
    await eventually(() => seen.length === 3, 'the row to run at the next wake');
  });

  it('holds no more keys than its concurrency, and claims the next as soon as a place frees', async () => {
    const h = held();
    const q = queue({ reconciler: h.reconciler, concurrency: 2 });
    await add(5, false);
    await q.start();
    await eventually(() => h.waiting() === 2, 'two rows running');
    await new Promise((r) => setTimeout(r, 100));
    expect(h.seen).toEqual([1, 2]);
    expect(q.inFlight).toBe(2);
    const claimed = async () => Number((await sql<{ n: number }>`select count(*)::int as n from work where state = 'running'`.execute(t.database.db)).rows[0]!.n);
    expect(await claimed()).toBe(2);
    h.releaseAll();
    await eventually(() => h.waiting() === 2 && h.seen.length === 4, 'the next two rows running');
    h.releaseAll();
    await eventually(() => h.waiting() === 1 && h.seen.length === 5, 'the last row running');
    h.releaseAll();
    await eventually(() => q.inFlight === 0, 'every key let go');
    expect(h.seen).toEqual([1, 2, 3, 4, 5]);
    expect(h.most()).toBe(2);
  });

  it('a notification that comes while a claim is under way makes it claim again', async () => {
    const seen: number[] = [];
    let claims = 0;
    let inClaim: () => void = () => {};
    const entered = new Promise<void>((r) => (inClaim = r));
    let go: () => void = () => {};
    const proceed = new Promise<void>((r) => (go = r));
    const q = queue({
      reconciler: { name: 't', reconcile: async (k) => (seen.push(k), done()) },
      claim: async () => {
        claims++;
        if (claims === 1) {
          // The first claim has looked and found nothing; the row comes while it returns.
          inClaim();
          await proceed;
          return undefined;
        }
        return claimRow('a');
      },
    });
    await q.start();
    await entered;
    await add(1);
    // The queue hears the notification during the claim.
    await new Promise((r) => setTimeout(r, 200));
    go();
    await eventually(() => seen.length === 1, 'the row notified during the claim to run');
    expect(seen).toEqual([1]);
  });

  it('a failed claim is tried again at the next wake', async () => {
    const seen: number[] = [];
    let fail = true;
    const q = queue({
      reconciler: { name: 't', reconcile: async (k) => (seen.push(k), done()) },
      claim: async () => {
        if (fail) throw new Error('the database is away');
        return claimRow('a');
      },
    });
    await add(1, false);
    await q.start();
    await q.idle();
    expect(seen).toEqual([]);
    fail = false;
    await sql`select pg_notify(${CHANNEL}, '')`.execute(t.database.db);
    await eventually(() => seen.length === 1, 'the row to run after the failed claim');
  });

  it('two queues claiming from one table never run the same row', async () => {
    const seen: { worker: string; key: number }[] = [];
    const reconcile = (worker: string) => async (key: number) => {
      seen.push({ worker, key });
      await new Promise((r) => setTimeout(r, 5));
      return done();
    };
    const a = queue({ reconciler: { name: 'a', reconcile: reconcile('a') }, claim: () => claimRow('a'), concurrency: 3 });
    const b = queue({ reconciler: { name: 'b', reconcile: reconcile('b') }, claim: () => claimRow('b'), concurrency: 3 });
    await Promise.all([a.start(), b.start()]);
    await add(40);
    await eventually(() => seen.length >= 40, 'every row to run');
    await Promise.all([a.idle(), b.idle()]);
    expect(seen.map((s) => s.key).sort((x, y) => x - y)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
    const rows = (await sql<{ id: number; claimed_by: string }>`select id, claimed_by from work order by id`.execute(t.database.db)).rows;
    for (const s of seen) expect(rows[s.key - 1]!.claimed_by).toBe(s.worker);
  });

  it('runs onWake at every wake, besides claiming', async () => {
    let wakes = 0;
    const q = queue({ reconciler: { name: 't', reconcile: async () => done() }, onWake: async () => void wakes++ });
    await q.start();
    await eventually(() => wakes === 1, 'the wake at start');
    await sql`select pg_notify(${CHANNEL}, '')`.execute(t.database.db);
    await eventually(() => wakes === 2, 'the wake of a notification');
  });
});

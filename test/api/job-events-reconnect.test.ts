// A lost LISTEN connection: notices sent while it is away are lost, so when it comes back every
// stream of the process is woken once and re-reads the rows after its cursor. Nothing is missed
// and nothing is read twice; no stream waits for its slow poll.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { openDatabase, type Database } from '../../src/db/database.ts';
import { createJob } from '../../src/state/jobs.ts';
import { JobEventLog } from '../../src/state/job-events.ts';
import { eventually } from '../helpers/shared/eventually.ts';

let db: TestDatabase;
let apiSide: Database;
beforeAll(async () => {
  db = await createTestDatabase();
  // The follower's own connections: another process's view of the same database.
  apiSide = await openDatabase({ url: db.url, dataDir: '/nonexistent', poolSize: 2 });
});
afterAll(async () => {
  await apiSide?.close();
  await db?.drop();
});

async function dropListenConnections(): Promise<number> {
  const admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  try {
    const r = await admin.query(`select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and query ilike 'LISTEN %'`);
    return r.rowCount ?? 0;
  } finally {
    await admin.end();
  }
}

describe('job events when the LISTEN connection is lost', () => {
  it('wakes every followed job once the listener is back, and its reader catches up from the table', async () => {
    const writer = new JobEventLog(db.database.db, { memoryRetentionMs: 60_000 });
    const reader = new JobEventLog(apiSide.db, { memoryRetentionMs: 60_000 });
    const unfollow = await reader.follow((c, n) => apiSide.listen(c, n));
    const jobs = [
      await createJob(db.database.db, { kind: 'stop', params: {}, actor: { id: 'ops' } }),
      await createJob(db.database.db, { kind: 'stop', params: {}, actor: { id: 'ops' } }),
    ];
    const followers = jobs.map((jobId) => {
      const heard: number[] = [];
      const seen: number[] = [];
      let reading = Promise.resolve();
      const unsubscribe = reader.subscribe(jobId, (seq) => {
        heard.push(seq);
        reading = reading.then(async () => {
          seen.push(...(await reader.read(jobId, seen.at(-1) ?? 0)).map((r) => r.seq));
        });
      });
      return { jobId, heard, seen, unsubscribe, settled: () => reading };
    });
    try {
      for (const jobId of jobs) {
        await writer.open(jobId);
        await writer.append(jobId, 'output', { line: 'before' });
      }
      await eventually(async () => followers.every((f) => f.seen.length === 1), 'the first event of each job');

      expect(await dropListenConnections()).toBe(1);
      // Stored while nobody listens: their notices are lost.
      for (const jobId of jobs) for (let i = 0; i < 5; i++) await writer.append(jobId, 'output', { line: `during ${i}` });

      for (const f of followers) {
        await eventually(async () => {
          await f.settled();
          return f.seen.length === 6;
        }, `job ${f.jobId} to catch up after the listener came back`, 10_000);
        expect(f.seen).toEqual([1, 2, 3, 4, 5, 6]);
        // Woken by the reconnect itself (the listener retries within a second), not by a later notice.
        expect(f.heard).toContain(Number.POSITIVE_INFINITY);
      }

      // Followed as before once the listener is back.
      await writer.append(jobs[0]!, 'finished', { outcome: 'completed' });
      await eventually(async () => {
        await followers[0]!.settled();
        return followers[0]!.seen.length === 7;
      }, 'the event after the reconnect');
      expect(followers[0]!.seen).toEqual([1, 2, 3, 4, 5, 6, 7]);
    } finally {
      for (const f of followers) f.unsubscribe();
      await unfollow();
    }
  });
});

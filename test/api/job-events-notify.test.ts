// Job events between processes: a writer stores events and announces `jobId:seq` with NOTIFY in
// the same transaction; a follower with its own database connection (another process's view)
// hears each batch, never before its rows are readable, and reads them in order. The same on the
// embedded PGlite database, where writer and follower share one process.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { openDatabase, type Database } from '../../src/db/database.ts';
import { migrateToLatest } from '../../src/db/migrate.ts';
import { createJob } from '../../src/state/jobs.ts';
import { JobEventLog, JOB_EVENTS_CHANNEL } from '../../src/state/job-events.ts';
import { eventually } from '../helpers/shared/eventually.ts';

async function exchange(writerDb: Database, readerDb: Database): Promise<void> {
  const jobId = await createJob(writerDb.db, { kind: 'restart', params: { services: ['web'] }, actor: { id: 'ops' } });
  const writer = new JobEventLog(writerDb.db, { memoryRetentionMs: 60_000 });
  const reader = new JobEventLog(readerDb.db, { memoryRetentionMs: 60_000 });
  const unfollow = await reader.follow((c, n) => readerDb.listen(c, n));
  const heard: number[] = [];
  const seen: number[] = [];
  let reading = Promise.resolve();
  const unsubscribe = reader.subscribe(jobId, (seq) => {
    heard.push(seq);
    // What a stream does when woken: read the rows after its cursor. They must be there.
    reading = reading.then(async () => {
      const rows = await reader.read(jobId, seen.at(-1) ?? 0);
      seen.push(...rows.map((r) => r.seq));
      // An earlier read may already have taken these rows; either way, they are there now.
      expect(seen.at(-1) ?? 0, `notified of ${seq} before its rows were readable`).toBeGreaterThanOrEqual(seq);
    });
  });
  await writer.open(jobId);
  const writes: Promise<unknown>[] = [];
  for (let i = 0; i < 200; i++) writes.push(writer.append(jobId, 'output', { line: `line ${i}` }));
  await Promise.all(writes);
  await writer.append(jobId, 'finished', { outcome: 'completed' });
  await eventually(async () => heard.includes(201), 'the notification of the last event');
  await reading;
  unsubscribe();
  await unfollow();
  expect(seen).toEqual(Array.from({ length: 201 }, (_, i) => i + 1));
  // Batched: fewer notifications than events, and each names the newest seq of its batch.
  expect(heard.length).toBeLessThanOrEqual(201);
  expect(heard).toEqual([...heard].sort((a, b) => a - b));
}

describe('job events through NOTIFY', () => {
  let pg: TestDatabase;
  let second: Database;
  beforeAll(async () => {
    pg = await createTestDatabase();
    second = await openDatabase({ url: pg.url, dataDir: '/nonexistent', poolSize: 2 });
  });
  afterAll(async () => {
    await second?.close();
    await pg?.drop();
  });

  it('on Postgres: another connection hears each stored batch and reads every event once, in order', async () => {
    await exchange(pg.database, second);
  });

  it('reads every job of a notice and ignores what it cannot parse', async () => {
    const reader = new JobEventLog(second.db, { memoryRetentionMs: 60_000 });
    const unfollow = await reader.follow((c, n) => second.listen(c, n));
    const heard: number[] = [];
    const off = reader.subscribe('x', (seq) => heard.push(seq));
    for (const payload of ['garbage', 'x:', 'x:not-a-number', ':5', 'x:-1', 'x:7', 'y:2 x:8']) await sql`select pg_notify(${JOB_EVENTS_CHANNEL}, ${payload})`.execute(pg.database.db);
    await eventually(async () => heard.length > 1, 'the good notifications');
    // A batch of several jobs is one notice naming each; only this job's parts reach its listener.
    expect(heard).toEqual([7, 8]);
    off();
    await unfollow();
  });

  it('on the embedded PGlite database: the same, in one process', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'installer-events-'));
    const lite = await openDatabase({ dataDir: dir });
    try {
      await migrateToLatest(lite.db);
      await exchange(lite, lite);
    } finally {
      await lite.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

// Job event retention: in memory for 60 minutes after a job ends, then served from the database;
// rows older than 30 days are pruned when the backend starts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { JobEventLog } from '../../src/state/job-events.ts';
import { createJob } from '../../src/state/jobs.ts';
import pg from 'pg';
import { sql } from 'kysely';
import { eventually } from '../helpers/shared/eventually.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => t?.close());

describe('job event retention', () => {
  it('drops a finished job from memory after the retention, and reads it back from the database', async () => {
    let now = Date.parse('2026-11-22T10:00:00Z');
    const log = new JobEventLog(t.db.database.db, { memoryRetentionMs: 60 * 60_000, now: () => now });
    const jobId = await createJob(t.db.database.db, { kind: 'stop', params: {}, actor: { id: 'operator' } });
    await log.open(jobId);
    for (let i = 0; i < 5; i++) void log.append(jobId, 'output', { line: `l${i}` });
    await log.append(jobId, 'finished', { outcome: 'completed' });
    const fromMemory = await log.read(jobId, 0);
    now += 59 * 60_000;
    expect(log.sweep()).toBe(0);
    expect(log.inMemory(jobId)).toBe(true);
    now += 60_000;
    expect(log.sweep()).toBe(1);
    expect(log.inMemory(jobId)).toBe(false);
    const fromDb = await log.read(jobId, 0);
    expect(fromDb.map((e) => [e.seq, e.type, e.payload])).toEqual(fromMemory.map((e) => [e.seq, e.type, e.payload]));
    expect(fromDb).toHaveLength(6);
  });

  it('reads stored events page by page across a gap in their seqs (a batch whose insert failed)', async () => {
    const db = t.db.database.db;
    const jobId = await createJob(db, { kind: 'stop', params: {}, actor: { id: 'operator' } });
    const seqs = [1, 2, 3, 10, 11, 12];
    await db.insertInto('deployment_job_events').values(seqs.map((seq) => ({ job_id: jobId, seq, type: 'output', payload: JSON.stringify({ line: `l${seq}` }) }))).execute();
    const log = new JobEventLog(db, { memoryRetentionMs: 1 }); // nothing of this job in memory: every read goes to the database
    const seqsOf = async (after: number, limit: number) => (await log.read(jobId, after, limit)).map((e) => e.seq);
    expect(await seqsOf(0, 2)).toEqual([1, 2]);
    expect(await seqsOf(2, 2)).toEqual([3, 10]);
    expect(await seqsOf(3, 5)).toEqual([10, 11, 12]);
    expect(await seqsOf(0, 100)).toEqual(seqs);
    expect(await seqsOf(12, 5)).toEqual([]);
    // A replay in pages of 2 sees every event once, in order.
    const replayed: number[] = [];
    for (let cursor = 0, page = await seqsOf(0, 2); page.length; cursor = page.at(-1)!, page = await seqsOf(cursor, 2)) replayed.push(...page);
    expect(replayed).toEqual(seqs);
  });

  it('keeps a batch whose insert lost its connection (a database restart) and stores it once the database answers', async () => {
    const db = t.db.database.db;
    const jobId = await createJob(db, { kind: 'stop', params: {}, actor: { id: 'operator' } });
    const log = new JobEventLog(db, { memoryRetentionMs: 60_000, storeRetryMs: 30_000 });
    await log.open(jobId);
    await log.append(jobId, 'output', { line: 'before' });
    // Another session holds the table, so the next insert waits on it; that insert's connection is
    // then ended the way a restart of Postgres ends it (57P01), and the table let go.
    const holder = new pg.Client({ connectionString: t.db.url });
    await holder.connect();
    try {
      const holderPid = (await holder.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
      await holder.query('begin');
      await holder.query('lock table deployment_job_events in access exclusive mode');
      const during = log.append(jobId, 'output', { line: 'during' });
      const after = log.append(jobId, 'output', { line: 'after' });
      // Looked for from outside the holder's transaction: inside one, pg_stat_activity is a snapshot
      // taken at its first read, and an insert that reached the lock after that read is never seen.
      const pid = await eventually(async () => {
        const r = await sql<{ pid: number }>`select pid from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%deployment_job_events%' and pid <> ${holderPid}`.execute(db);
        return r.rows[0]?.pid;
      }, 'the insert to wait on the lock');
      await holder.query('select pg_terminate_backend($1)', [pid]);
      await holder.query('rollback');
      expect((await during).seq).toBe(2);
      expect((await after).seq).toBe(3);
    } finally {
      await holder.end();
    }
    const rows = await db.selectFrom('deployment_job_events').select(['seq', 'payload']).where('job_id', '=', jobId).orderBy('seq').execute();
    expect(rows.map((r) => [r.seq, (r.payload as { line: string }).line])).toEqual([[1, 'before'], [2, 'during'], [3, 'after']]);
  });

  it('scrubs the installer secrets from every string of a payload', async () => {
    const log = new JobEventLog(t.db.database.db, { memoryRetentionMs: 1, scrub: (s) => s.replaceAll('hunter2-secret', '[REDACTED]') });
    const jobId = await createJob(t.db.database.db, { kind: 'stop', params: {}, actor: { id: 'operator' } });
    await log.open(jobId);
    await log.append(jobId, 'output', { line: 'password=hunter2-secret', nested: { list: ['x hunter2-secret y'] } });
    const rows = await t.db.database.db.selectFrom('deployment_job_events').select('payload').where('job_id', '=', jobId).execute();
    expect(JSON.stringify(rows)).not.toContain('hunter2-secret');
    expect(rows[0]!.payload).toEqual({ line: 'password=[REDACTED]', nested: { list: ['x [REDACTED] y'] } });
  });

  it('prunes events older than 30 days on startup and keeps younger ones', async () => {
    const jobId = await createJob(t.db.database.db, { kind: 'stop', params: {}, actor: { id: 'operator' } });
    const day = 86_400_000;
    await t.db.database.db
      .insertInto('deployment_job_events')
      .values([
        { job_id: jobId, seq: 1, type: 'output', payload: '{}', at: new Date(Date.now() - 31 * day) },
        { job_id: jobId, seq: 2, type: 'output', payload: '{}', at: new Date(Date.now() - 29 * day) },
      ])
      .execute();
    await t.wired.start();
    const left = await t.db.database.db.selectFrom('deployment_job_events').select('seq').where('job_id', '=', jobId).execute();
    expect(left.map((r) => r.seq)).toEqual([2]);
  });
});

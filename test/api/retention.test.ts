// Retention while the backend runs (docs/adr/0043-healthy-means-reconciling.md): rows past their
// retention go at the passes that follow, without a restart, in batches of RETENTION_BATCH_ROWS,
// and a pass that fails (here a statement timeout) leaves the process running and the next pass
// finishes the job. Real Postgres.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { createJob } from '../../src/state/jobs.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({
    controllers: async (w) => w.retention.start(),
    observer: false,
    logLevel: 'info',
    env: { RETENTION_INTERVAL_MINUTES: '0.01', RETENTION_BATCH_ROWS: '100', RETENTION_BATCH_TIMEOUT_MS: '300' },
  });
  const db = t.db.database.db;
  // Counts the DELETE statements on the events table, and can make each one slow.
  await sql`create table test_retention (deletes int not null, slow boolean not null)`.execute(db);
  await sql`insert into test_retention values (0, false)`.execute(db);
  await sql`create function test_retention_count() returns trigger language plpgsql as $$
    begin
      if (select slow from test_retention) then perform pg_sleep(1); end if;
      update test_retention set deletes = deletes + 1;
      return null;
    end $$`.execute(db);
  await sql`create trigger test_retention_count before delete on deployment_job_events for each statement execute function test_retention_count()`.execute(db);
  // When each DELETE statement began and ended (the database's clock), and a pause within it that
  // makes a batch take a while without reaching its timeout.
  await sql`create table test_retention_batches (began timestamptz, ended timestamptz, took_ms int)`.execute(db);
  await sql`create table test_retention_drag (ms int not null)`.execute(db);
  await sql`insert into test_retention_drag values (0)`.execute(db);
  await sql`create function test_retention_began() returns trigger language plpgsql as $$
    begin
      perform pg_sleep((select ms from test_retention_drag) / 1000.0);
      insert into test_retention_batches (began) values (statement_timestamp());
      return null;
    end $$`.execute(db);
  await sql`create function test_retention_ended() returns trigger language plpgsql as $$
    begin
      update test_retention_batches set ended = clock_timestamp() where ended is null;
      return null;
    end $$`.execute(db);
  await sql`create trigger test_retention_began before delete on deployment_job_events for each statement execute function test_retention_began()`.execute(db);
  await sql`create trigger test_retention_ended after delete on deployment_job_events for each statement execute function test_retention_ended()`.execute(db);
});
afterAll(async () => t?.close());

async function addEvents(jobId: string, n: number, at: Date, from = 1): Promise<void> {
  const rows = Array.from({ length: n }, (_, i) => ({ job_id: jobId, seq: from + i, type: 'output', payload: JSON.stringify({ line: `line ${i}` }), at }));
  for (let i = 0; i < rows.length; i += 500) await t.db.database.db.insertInto('deployment_job_events').values(rows.slice(i, i + 500)).execute();
}

const daysAgo = (d: number) => new Date(Date.now() - d * 86_400_000);
const eventsOf = async (jobId: string) =>
  Number((await t.db.database.db.selectFrom('deployment_job_events').select((eb) => eb.fn.countAll().as('n')).where('job_id', '=', jobId).executeTakeFirstOrThrow()).n);
const state = async () => (await sql<{ deletes: number; slow: boolean }>`select deletes, slow from test_retention`.execute(t.db.database.db)).rows[0]!;

describe('retention while the backend runs', () => {
  it('prunes rows older than the retention at the next pass, in batches, and keeps the recent ones', async () => {
    const db = t.db.database.db;
    const old = await createJob(db, { kind: 'pull', params: {}, actor: { id: 'tester' } });
    const recent = await createJob(db, { kind: 'pull', params: {}, actor: { id: 'tester' } });
    const deletesBefore = (await state()).deletes;
    // Written while the process runs, after its first pass.
    await addEvents(old, 1_050, daysAgo(31));
    await addEvents(recent, 10, daysAgo(29));
    await db.insertInto('sign_in_counters').values({ key: `user:old-${randomUUID()}`, window_start: daysAgo(1), attempts: 3 }).execute();

    await eventually(async () => (await eventsOf(old)) === 0, 'the events past the retention to go');
    expect(await eventsOf(recent)).toBe(10);
    // 1,050 rows at 100 a statement: eleven statements at least, never one.
    expect((await state()).deletes - deletesBefore).toBeGreaterThanOrEqual(11);
    await eventually(async () => !(await db.selectFrom('sign_in_counters').select('key').where('window_start', '<', daysAgo(0.5)).executeTakeFirst()), 'the old sign-in counter to go');
    expect(t.logs.join('')).toContain('pruned rows past their retention');
  });

  it('pauses after each batch as long as the batch took, so that a pass takes at most half of the database', async () => {
    const db = t.db.database.db;
    const old = await createJob(db, { kind: 'pull', params: {}, actor: { id: 'tester' } });
    await sql`delete from test_retention_batches`.execute(db);
    await sql`update test_retention_drag set ms = 150`.execute(db);
    try {
      await addEvents(old, 450, daysAgo(35));
      await eventually(async () => (await eventsOf(old)) === 0, 'the events past the retention to go');
    } finally {
      await sql`update test_retention_drag set ms = 0`.execute(db);
    }
    const batches = (await sql<{ began: Date; ended: Date }>`select began, ended from test_retention_batches where ended is not null order by began`.execute(db)).rows;
    // 450 rows at 100 a statement: five batches of one pass (and maybe a statement of a later pass).
    expect(batches.length).toBeGreaterThanOrEqual(5);
    const gaps = batches.slice(1, 5).map((b, i) => ({
      took: batches[i]!.ended.getTime() - batches[i]!.began.getTime(),
      pause: b.began.getTime() - batches[i]!.ended.getTime(),
    }));
    for (const g of gaps) {
      expect(g.took).toBeGreaterThanOrEqual(140);
      expect(g.pause).toBeGreaterThanOrEqual(g.took);
    }
  });

  it('a pass that fails by statement timeout ends nothing, and the next one finishes the job', async () => {
    const db = t.db.database.db;
    const old = await createJob(db, { kind: 'pull', params: {}, actor: { id: 'tester' } });
    await sql`update test_retention set slow = true`.execute(db);
    const logsBefore = t.logs.length;
    await addEvents(old, 250, daysAgo(40));

    const failed = await eventually(
      () => t.logs.slice(logsBefore).find((l) => l.includes('retention: the pass failed')),
      'a failed retention pass in the log',
    );
    expect(failed).toContain('canceling statement due to statement timeout');
    expect(await eventsOf(old)).toBe(250);
    // The process serves on.
    expect((await t.app.inject({ method: 'GET', url: '/api/health' })).statusCode).toBe(200);

    await sql`update test_retention set slow = false`.execute(db);
    await eventually(async () => (await eventsOf(old)) === 0, 'the next pass to prune what the failed one left');
  });
});

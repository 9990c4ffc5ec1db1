// The data of `npm run bench big-db`: a database (`bigdb` by default, on the machine's Postgres)
// holding what a busy host holds after months in service: 20 million job events within the
// retention (20,000 jobs of 999 events, plus one job of 100,000 for the replay) and 1 million audit
// rows. Made once, server-side (INSERT … SELECT generate_series, in slices of a million rows), and
// reused: a run finds the counts already there and makes nothing. `ensureOldEvents` tops up the
// events past the retention the bench's first prune has to delete.
//
// Run alone: `node --import tsx bench/big-db/generate.ts` (knobs: BIGDB_NAME, BIGDB_EVENTS,
// BIGDB_AUDIT_ROWS, TEST_DATABASE_ADMIN_URL).
import pg from 'pg';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { pathToFileURL } from 'node:url';
import { migrateToLatest } from '../../src/db/migrate.ts';
import type { DB } from '../../src/db/schema.ts';

export const ADMIN_URL = process.env.TEST_DATABASE_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const BIGDB_NAME = process.env.BIGDB_NAME ?? 'bigdb';
export const EVENTS = Number(process.env.BIGDB_EVENTS ?? 20_000_000);
export const AUDIT_ROWS = Number(process.env.BIGDB_AUDIT_ROWS ?? 1_000_000);
const EVENTS_PER_JOB = 999;
/** The job whose replay the bench times. */
export const REPLAY_JOB = '00000000-0000-4000-8000-000000100000';
export const REPLAY_EVENTS = 100_000;
const SLICE = 1_000_000;

export function bigDbUrl(name = BIGDB_NAME): string {
  const u = new URL(ADMIN_URL);
  u.pathname = `/${name}`;
  return u.toString();
}

async function ensureDatabase(name: string): Promise<void> {
  const c = new pg.Client({ connectionString: ADMIN_URL });
  await c.connect();
  try {
    const exists = await c.query('select 1 from pg_database where datname = $1', [name]);
    if (!exists.rowCount) await c.query(`CREATE DATABASE ${name}`);
  } finally {
    await c.end();
  }
}

/** A generated job's id: stable, so that a rerun continues where an interrupted one stopped. */
const jobIdSql = (j: unknown) => sql`md5('bigdb-job-' || ${j})::uuid`;

/** Jobs `from`..`to` (1-based) and their events, dated over the last 29 days (job 1 the oldest). */
async function insertJobs(db: Kysely<DB>, from: number, to: number, jobs: number): Promise<void> {
  const startOf = (j: unknown) => sql`now() - interval '29 days' + (${j}::float8 / ${jobs}) * interval '29 days'`;
  await db.transaction().execute(async (tx) => {
    await sql`insert into deployment_jobs (job_id, kind, params, actor, actor_kind, created_at)
      select ${jobIdSql(sql`j`)}, (array['deploy','pull','restart'])[j % 3 + 1], '{}'::jsonb, 'user' || (j % 20), 'user', ${startOf(sql`j`)}
      from generate_series(${from}::int, ${to}::int) j on conflict do nothing`.execute(tx);
    await sql`insert into deployment_job_status (job_id, phase, started_at, finished_at, exit_code)
      select ${jobIdSql(sql`j`)}, 'completed', ${startOf(sql`j`)}, ${startOf(sql`j`)} + interval '100 seconds', 0
      from generate_series(${from}::int, ${to}::int) j on conflict do nothing`.execute(tx);
    await sql`insert into deployment_job_events (job_id, seq, type, payload, at)
      select ${jobIdSql(sql`j`)}, s, case when s = ${EVENTS_PER_JOB} then 'finished' else 'output' end,
             case when s = ${EVENTS_PER_JOB} then '{"outcome":"completed"}'::jsonb
                  else jsonb_build_object('stream', 'stdout', 'line', 'layer ' || s || ' Downloading [=====>   ] 1.2MB/3.4MB') end,
             ${startOf(sql`j`)} + s * interval '100 milliseconds'
      from generate_series(${from}::int, ${to}::int) j, generate_series(1, ${EVENTS_PER_JOB}) s
      on conflict do nothing`.execute(tx);
  });
}

async function count(db: Kysely<DB>, table: 'deployment_job_events' | 'deployment_actions'): Promise<number> {
  return Number((await sql<{ n: string }>`select count(*) as n from ${sql.table(table)}`.execute(db)).rows[0]!.n);
}

/** Makes the big database unless it is there already; returns it open (the caller destroys it). */
export async function generate(log: (msg: string) => void = (m) => process.stdout.write(`${m}\n`)): Promise<Kysely<DB>> {
  await ensureDatabase(BIGDB_NAME);
  // A pool of its own, without the backend's 30 s statement timeout: a slice takes longer.
  const pool = new pg.Pool({ connectionString: bigDbUrl(), max: 2 });
  const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
  await migrateToLatest(db);
  const jobs = Math.ceil((EVENTS - REPLAY_EVENTS) / EVENTS_PER_JOB);
  let events = await count(db, 'deployment_job_events');
  if (events < EVENTS) {
    log(`${BIGDB_NAME}: ${events} job events, making ${EVENTS}`);
    const perSlice = Math.floor(SLICE / EVENTS_PER_JOB);
    for (let from = 1; from <= jobs; from += perSlice) {
      const t0 = Date.now();
      const to = Math.min(jobs, from + perSlice - 1);
      await insertJobs(db, from, to, jobs);
      log(`  jobs ${from}..${to} of ${jobs} (${Date.now() - t0} ms)`);
    }
    await db.transaction().execute(async (tx) => {
      await sql`insert into deployment_jobs (job_id, kind, params, actor, actor_kind) values (${REPLAY_JOB}, 'pull', '{}'::jsonb, 'bench', 'user') on conflict do nothing`.execute(tx);
      await sql`insert into deployment_job_status (job_id, phase, started_at, finished_at, exit_code) values (${REPLAY_JOB}, 'completed', now(), now(), 0) on conflict do nothing`.execute(tx);
      await sql`insert into deployment_job_events (job_id, seq, type, payload, at)
        select ${REPLAY_JOB}::uuid, s, case when s = ${REPLAY_EVENTS} then 'finished' else 'output' end,
               case when s = ${REPLAY_EVENTS} then '{"outcome":"completed"}'::jsonb
                    else jsonb_build_object('stream', 'stdout', 'line', 'layer ' || s || ' Downloading [=====>   ] 1.2MB/3.4MB') end,
               now() - interval '1 day' + s * interval '1 millisecond'
        from generate_series(1, ${REPLAY_EVENTS}) s on conflict do nothing`.execute(tx);
    });
    events = await count(db, 'deployment_job_events');
  }
  let audit = await count(db, 'deployment_actions');
  if (audit < AUDIT_ROWS) {
    log(`${BIGDB_NAME}: ${audit} audit rows, making ${AUDIT_ROWS}`);
    // One every 2.5 s back from now (about a month); 4 kinds, 3 statuses, 50 busy actors and a rare one.
    await sql`insert into deployment_actions (kind, status, actor, actor_kind, detail, created_at, updated_at)
      select (array['restart','stop','pull','deploy'])[g % 4 + 1], (array['started','completed','failed'])[g % 3 + 1],
             case when g % 1000 = 0 then 'rare' else 'user' || (g % 50) end, 'user', 'row ' || g,
             now() - g * interval '2500 milliseconds', now() - g * interval '2500 milliseconds'
      from generate_series(${audit + 1}::int, ${AUDIT_ROWS}::int) g`.execute(db);
    audit = await count(db, 'deployment_actions');
  }
  await sql`vacuum analyze`.execute(db);
  log(`${BIGDB_NAME}: ${events} job events, ${audit} audit rows`);
  return db;
}

/**
 * Makes sure at least `n` events are older than the retention (in jobs of their own, 31 to 60 days
 * old): what the first prune after a boot deletes. Returns how many there are.
 */
export async function ensureOldEvents(db: Kysely<DB>, n: number, retentionDays: number): Promise<number> {
  const old = async () => Number((await sql<{ n: string }>`select count(*) as n from deployment_job_events where at < now() - make_interval(days => ${retentionDays})`.execute(db)).rows[0]!.n);
  const have = await old();
  if (have >= n) return have;
  const jobs = Math.ceil((n - have) / EVENTS_PER_JOB);
  const tag = Date.now();
  for (let from = 1; from <= jobs; from += 1000) {
    const to = Math.min(jobs, from + 999);
    await sql`insert into deployment_job_events (job_id, seq, type, payload, at)
      select md5('bigdb-old-' || ${tag} || '-' || j)::uuid, s, 'output',
             jsonb_build_object('stream', 'stdout', 'line', 'layer ' || s || ' Downloading [=====>   ] 1.2MB/3.4MB'),
             now() - make_interval(days => ${retentionDays + 1}) - (j::float8 / ${jobs}) * interval '29 days' + s * interval '100 milliseconds'
      from generate_series(${from}::int, ${to}::int) j, generate_series(1, ${EVENTS_PER_JOB}) s`.execute(db);
  }
  await sql`analyze deployment_job_events`.execute(db);
  return old();
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const db = await generate();
  await db.destroy();
}

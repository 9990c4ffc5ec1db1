// A database of months in service (docs/adr/0043-healthy-means-reconciling.md): 20 million job
// events and 1 million audit rows (bench/big-db/generate.ts makes them once, in `bigdb` on the
// machine's Postgres, and later runs reuse them), plus events past the 30-day retention for the
// first prune to delete (topped up at every run). Against the backend as the image runs it (its
// bundle from its code cache, bench/load/backend.ts), with the audit cache off (every page read from the database):
// - boot to healthy (the first 200 of GET /api/health: controllers running);
// - p99 of the API (the audit page, the job list, health; 4 clients) while the first prune runs;
// - replay of a 100,000-event job over SSE, from the database;
// - a page of the audit trail deep in it (900,000 rows in; and a busy actor's, 15,000 of its rows in).
// Knobs (environment): BIGDB_NAME (bigdb), BIGDB_EVENTS, BIGDB_AUDIT_ROWS (see the generator),
// BENCH_BIGDB_OLD_EVENTS (1000000) events past the retention at boot, RETENTION_BATCH_ROWS the
// backend's batch (its default unless set), BENCH_BACKEND_DIST a build
// to run instead of making one (what buildBackend in bench/load/backend.ts makes).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import type { Bench, Figure } from './run.ts';
import { bigDbUrl, BIGDB_NAME, ensureOldEvents, generate, REPLAY_EVENTS, REPLAY_JOB } from './big-db/generate.ts';
import { buildBackend, startBackend, type Backend } from './load/backend.ts';
import { http } from './load/processes.ts';
import { median } from './stats.ts';
import { hashPassword } from '../src/state/users.ts';
import type { TestDatabase } from '../test/helpers/shared/db.ts';

const OLD_EVENTS = Number(process.env.BENCH_BIGDB_OLD_EVENTS ?? 1_000_000);
const RETENTION_DAYS = 30;
const VIEWER = { username: 'bigdb_viewer', password: 'bigdb-viewer-password-1' };
const CLIENTS = 4;

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]!;

/** Reads an SSE stream to its `finished` event; returns the events' count and whether their ids ran 1, 2, 3 … */
async function replay(url: string, token: string): Promise<{ count: number; ordered: boolean }> {
  const res = await fetch(url, { headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' } });
  if (!res.ok || !res.body) throw new Error(`the job's stream answered ${res.status}`);
  const decoder = new TextDecoder();
  let buf = '';
  let count = 0;
  let last = 0;
  let ordered = true;
  for await (const chunk of res.body) {
    buf += decoder.decode(chunk as Uint8Array, { stream: true });
    let cut: number;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const frame = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      const id = /^id: (\d+)$/m.exec(frame);
      if (!id) continue;
      const n = Number(id[1]);
      if (n !== last + 1) ordered = false;
      last = n;
      count++;
      if (/^event: finished$/m.test(frame)) {
        await res.body.cancel().catch(() => {});
        return { count, ordered };
      }
    }
  }
  return { count, ordered };
}

const bench: Bench = async (log) => {
  const figures: Figure[] = [];
  const add = (name: string, value: number, unit: string, goal?: string, ok?: boolean) => figures.push({ name, value, unit, ...(goal ? { goal } : {}), ...(ok === undefined ? {} : { ok }) });
  const db = await generate(log);
  const tmp = mkdtempSync(path.join(tmpdir(), 'bench-bigdb-'));
  let backend: Backend | undefined;
  try {
    const old = await ensureOldEvents(db, OLD_EVENTS, RETENTION_DAYS);
    log(`${old} events past the ${RETENTION_DAYS}-day retention`);
    await db
      .insertInto('users')
      .values({ username: VIEWER.username, password_hash: await hashPassword(VIEWER.password), role: 'viewer' })
      .onConflict((oc) => oc.column('username').doNothing())
      .execute();
    const cursorOf = async (n: number, actor?: string) =>
      (await sql<{ id: string }>`select id from deployment_actions ${actor ? sql`where actor = ${actor}` : sql``} order by created_at desc, id desc offset ${n} limit 1`.execute(db)).rows[0]!.id;
    const deep = await cursorOf(900_000);
    const busyDeep = await cursorOf(15_000, 'user7');
    const size = (await sql<{ s: string }>`select pg_size_pretty(pg_database_size(${BIGDB_NAME})) as s`.execute(db)).rows[0]!.s;
    log(`database ${BIGDB_NAME}: ${size}`);

    const ctx = { dist: process.env.BENCH_BACKEND_DIST ?? (await buildBackend(tmp, log)), db: { url: bigDbUrl() } as TestDatabase, dataDir: path.join(tmp, 'data'), tmp };
    // 1. Boot to healthy, with a million rows to prune.
    const env: Record<string, string> = { LOG_LEVEL: 'info', AUDIT_CACHE_MS: '0' };
    if (process.env.RETENTION_BATCH_ROWS) env.RETENTION_BATCH_ROWS = process.env.RETENTION_BATCH_ROWS;
    backend = await startBackend('image', ctx, env, 1);
    const b = backend;
    add('boot to healthy', b.bootMs, 'ms', '<= 2000 ms', b.bootMs <= 2000);

    // 2. The API while the first prune runs: 4 clients, each one request after another.
    // fetch, not `http`: a sign-in's password hash may take longer than that helper's 2 s.
    const login = await fetch(`${b.base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(VIEWER) });
    if (login.status !== 200) throw new Error(`sign-in answered ${login.status}: ${await login.text()}`);
    const token = ((await login.json()) as { token: string }).token;
    const urls = ['/api/deployment/actions', '/api/deployment/jobs?limit=15', '/api/health', `/api/deployment/actions?before=${deep}`];
    const latencies: number[] = [];
    /** Each request's latency by its path, and when it started (ms after t0). */
    const byUrl = new Map<string, { at: number; ms: number }[]>(urls.map((u) => [u, []]));
    let errors = 0;
    const pruned = () => /pruned rows past their retention/.test(b.proc.tail()) || /retention: the pass failed/.test(b.proc.tail());
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: CLIENTS }, async (_, c) => {
        for (let i = c; !pruned() && performance.now() - t0 < 600_000; i++) {
          const s = performance.now();
          const url = urls[i % urls.length]!;
          const r = await http(`${b.base}${url}`, { token }).catch(() => ({ status: 0 }));
          latencies.push(performance.now() - s);
          byUrl.get(url)!.push({ at: s - t0, ms: performance.now() - s });
          if (r.status !== 200) errors++;
        }
      }),
    );
    const pruneMs = performance.now() - t0;
    if (/retention: the pass failed/.test(b.proc.tail())) throw new Error(`the first prune failed:\n${b.proc.tail()}`);
    const left = Number((await sql<{ n: string }>`select count(*) as n from deployment_job_events where at < now() - make_interval(days => ${RETENTION_DAYS})`.execute(db)).rows[0]!.n);
    log(`first prune: ${old} old events in ${(pruneMs / 1000).toFixed(1)} s (${left} left); ${latencies.length} requests meanwhile, ${errors} not 200`);
    if (errors) throw new Error(`${errors} requests failed while the prune ran`);
    latencies.sort((x, y) => x - y);
    for (const [url, runs] of byUrl) {
      const sorted = runs.map((r) => r.ms).sort((x, y) => x - y);
      log(`  ${url.replace(/before=[^&]+/, 'before=…')}: ${runs.length} requests, p50 ${pct(sorted, 50).toFixed(1)} ms, p99 ${pct(sorted, 99).toFixed(1)} ms, max ${sorted.at(-1)!.toFixed(0)} ms`);
    }
    // When the slowest requests came: in the first seconds after boot, or all along the prune.
    const slow = [...byUrl.values()].flat().filter((r) => r.ms >= pct(latencies, 99));
    const bySecond = new Map<number, number>();
    for (const r of slow) bySecond.set(Math.floor(r.at / 1000), (bySecond.get(Math.floor(r.at / 1000)) ?? 0) + 1);
    log(`  the slowest 1 % by second of the prune: ${[...bySecond].sort((x, y) => x[0] - y[0]).map(([sec, n]) => `${sec}s:${n}`).join(' ')}`);
    add('API p50 while the first prune runs', pct(latencies, 50), 'ms');
    add('API p99 while the first prune runs', pct(latencies, 99), 'ms', '<= 50 ms', pct(latencies, 99) <= 50);
    add('first prune (after boot, in the background)', pruneMs / 1000, 's');

    // 3. Replay of a 100,000-event job from the database.
    const r0 = performance.now();
    const r = await replay(`${b.base}/api/deployment/jobs/${REPLAY_JOB}/logs`, token);
    const replayMs = performance.now() - r0;
    if (r.count !== REPLAY_EVENTS || !r.ordered) throw new Error(`replay delivered ${r.count} of ${REPLAY_EVENTS} events (ordered: ${r.ordered})`);
    add('replay of a 100,000-event job', replayMs, 'ms', '<= 2000 ms', replayMs <= 2000);

    // 4. Deep pages of the audit trail, median of 20 reads each.
    for (const [what, url] of [
      ['900,000 rows in', `/api/deployment/actions?before=${deep}`],
      ["a busy actor's, 15,000 of its rows in", `/api/deployment/actions?actor=user7&before=${busyDeep}`],
    ] as const) {
      const runs: number[] = [];
      for (let i = 0; i < 20; i++) {
        const s = performance.now();
        const res = await http(`${b.base}${url}`, { token });
        runs.push(performance.now() - s);
        if (res.status !== 200) throw new Error(`${url} answered ${res.status}: ${res.body}`);
      }
      const ms = median(runs);
      add(`audit page of 50, ${what}, median`, ms, 'ms', '<= 20 ms', ms <= 20);
    }
  } finally {
    await backend?.proc.stop();
    await db.destroy();
    rmSync(tmp, { recursive: true, force: true });
  }
  return figures;
};

export default bench;

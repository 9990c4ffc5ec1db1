// Load figures of the real backend process (the "Hardening" issue), with wrk (Debian package,
// installed by scripts/rig/setup.sh) on the machine's Postgres:
// - p50/p99 of GET /api/health and GET /api/deployment/actions (viewer token, 200 audit rows, the
//   default page of 50) at a fixed ~1,000 requests/s, and of a bare Fastify handler in its own
//   process, measured in the same run;
// - the ratio of saturating throughput (wrk without delay, a few connections) of each installer
//   endpoint to the bare handler's: the median over a few pairs of runs, bare then endpoint,
//   back to back;
// - RSS of the backend process after boot and a few seconds idle, and after the load;
// - boot to healthy: from spawning the process to the first 200 from /api/health, on an already
//   migrated database (MIGRATE_ON_BOOT=false, as the compose files run the backend).
// The load runs against the backend as the image runs it (deploy/Dockerfile's CMD): compiled,
// bundled into dist/src/bundle/main.js, started by its loader from the code cache primed as the
// image's build primes it (scripts/build-image.sh and the Dockerfile's steps, outside a container), at
// LOG_LEVEL=info (the default, and what the compose files set: one line per request that changes
// something, is refused or fails; a successful read logs at debug, ADR 0015) and at warn. Boot
// and idle RSS are also measured for `npm start` (package.json's `start`: the bundle made from the
// sources by its `prestart`, the image's V8 flags, no code cache).
//
// Knobs (environment): BENCH_LOAD_SECONDS (10) length of each fixed-rate wrk run,
// BENCH_LOAD_PAIRS (3) pairs of saturating runs per ratio, BENCH_LOAD_PAIR_SECONDS (5) length of
// each saturating run, BENCH_LOAD_LEVELS (info,warn) log levels to load, BENCH_LOAD_UNCACHED (1)
// also load the audit trail with AUDIT_CACHE_MS=0, BENCH_BOOT_RUNS (5) boots per start mode,
// BENCH_BACKEND_NODE_ARGS node options for the built backend (default: those of deploy/Dockerfile's CMD).
//
// Its parts, in bench/load/: the processes it starts and reads (processes.ts), the backend built and
// booted as the image does it (backend.ts), the wrk runs (wrk.ts) and the bare Fastify baseline (bare.ts).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { median } from './stats.ts';
import type { Bench, Figure } from './run.ts';
import { http, live, rssMB, run, sleep, type Proc } from './load/processes.ts';
import { buildBackend, NODE_ARGS, startBackend, type Mode } from './load/backend.ts';
import { fixedRate, medianRun, paired, PAIR_SECONDS, PAIRS, RATE_CONNECTIONS, SAT_CONNECTIONS, SECONDS, TARGET_RPS, wrkScripts, type Paired, type Saturated, type Target } from './load/wrk.ts';
import { startBare } from './load/bare.ts';
import { bundleForNpmStart, npmStartArgs, ROOT } from '../test/helpers/shared/process.ts';
import { createTestDatabase, type TestDatabase } from '../test/helpers/shared/db.ts';
import { createUser } from '../src/state/users.ts';
import { ACTION_KINDS } from '../src/db/schema.ts';

const LEVELS = (process.env.BENCH_LOAD_LEVELS ?? 'info,warn').split(',').filter(Boolean);
const BOOT_RUNS = Number(process.env.BENCH_BOOT_RUNS ?? 5);
/** Also load the audit trail with AUDIT_CACHE_MS=0 (every request reads the database). */
const UNCACHED = process.env.BENCH_LOAD_UNCACHED !== '0';
const IDLE_MS = 5_000;
const VIEWER = { username: 'bench_viewer', password: 'bench-viewer-password-1' };

const bench: Bench = async (log) => {
  const figures: Figure[] = [];
  const add = (name: string, value: number, unit: string, goal?: string, ok?: boolean) =>
    figures.push({ name, value, unit, ...(goal ? { goal } : {}), ...(ok !== undefined ? { ok } : {}) });

  if ((await run('wrk', ['--version'], { allowFail: true }).catch(() => null)) === null) {
    throw new Error('wrk is not installed: run scripts/rig/setup.sh (it installs the Debian package)');
  }
  const tmp = mkdtempSync(path.join(tmpdir(), 'installer-load-'));
  let db: TestDatabase | undefined;
  const cleanup = async () => {
    for (const p of [...live]) await p.stop().catch(() => {});
    await db?.drop().catch((err: unknown) => log(`could not drop the bench database: ${(err as Error).message}`));
    db = undefined;
    rmSync(tmp, { recursive: true, force: true });
  };
  // An interrupted bench still stops its processes and drops its database.
  const onSignal = (sig: NodeJS.Signals) => void cleanup().finally(() => process.exit(sig === 'SIGINT' ? 130 : 143));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const scripts = wrkScripts(tmp);
    const fastifyVersion = (JSON.parse(readFileSync(path.join(ROOT, 'node_modules/fastify/package.json'), 'utf8')) as { version: string }).version;
    if (NODE_ARGS.length) log(`backend node options: ${NODE_ARGS.join(' ')}`);
    log(`wrk ${(await run('wrk', ['--version'], { allowFail: true })).out.split('\n')[0]!.split(' ')[1]}, fastify ${fastifyVersion}, node ${process.versions.node}`);

    // A database of its own, migrated here so that every boot below is one without migrations.
    db = await createTestDatabase();
    log(`database ${db.name} on ${new URL(db.url).host} (dropped at the end)`);
    await createUser(db.database.db, { username: VIEWER.username, password: VIEWER.password, role: 'viewer' });
    await createUser(db.database.db, { username: 'bench_admin', password: 'bench-admin-password-1', role: 'admin' });
    const rows = Array.from({ length: 200 }, (_, i) => ({
      kind: ACTION_KINDS[i % ACTION_KINDS.length]!,
      status: 'completed' as const,
      exit_code: 0,
      actor: 'bench_admin',
      actor_email: null,
      detail: `bench action ${i}`,
      job_id: null,
      target_digest: null,
      schema_migration: null,
      finished_at: new Date(),
    }));
    await db.database.db.insertInto('deployment_actions').values(rows).execute();
    const ctx = { dist: await buildBackend(tmp, log), db, dataDir: path.join(tmp, 'data'), tmp };

    // 1. Boot to healthy, modes interleaved; the last boot of each mode also gives its idle RSS.
    {
      // A first boot (not measured) writes the generated files into the data directory.
      const first = await startBackend('image', ctx, { LOG_LEVEL: 'warn' }, 0);
      await first.proc.stop();
      await bundleForNpmStart();
      const boots: Record<Mode, number[]> = { image: [], start: [] };
      const idle: Partial<Record<Mode, number>> = {};
      for (let k = 1; k <= BOOT_RUNS; k++) {
        for (const mode of ['image', 'start'] as const) {
          const b = await startBackend(mode, ctx, {}, k);
          boots[mode].push(b.bootMs);
          if (k === BOOT_RUNS) {
            await sleep(IDLE_MS);
            idle[mode] = rssMB(b.proc.pid);
          }
          await b.proc.stop();
        }
      }
      for (const mode of ['image', 'start'] as const) {
        const label = mode === 'image' ? `the image's, node ${NODE_ARGS.join(' ')} dist/src/bundle/start.js (code cache primed)` : `npm start's, node ${npmStartArgs().join(' ')}`;
        log(`boot to healthy, ${label}: ${boots[mode].map((ms) => Math.round(ms)).join(', ')} ms`);
        add(`boot to healthy, ${mode}: median of ${boots[mode].length}`, median(boots[mode]), 'ms', '<= 2000 ms', median(boots[mode]) <= 2000);
        add(`boot to healthy, ${mode}: max`, Math.max(...boots[mode]), 'ms', '<= 2000 ms', Math.max(...boots[mode]) <= 2000);
        add(`idle RSS after boot + ${IDLE_MS / 1000} s, ${mode} (LOG_LEVEL=info)`, idle[mode]!, 'MB', '<= 120 MB', idle[mode]! <= 120);
      }
    }

    // 2. The bare Fastify handler (bench/load/bare.ts), measured beside each level's installer
    // figures: its /actions sends the bytes the installer sends for the audit page, read from the
    // first backend below.
    const bareBody = path.join(tmp, 'bare-actions.json');
    let bare: { small: Target; sameBody: Target; procs: Proc[] } | undefined;

    // 3. Load, one backend process per log level.
    const table: string[] = [];
    const row = (cells: (string | number)[]) => table.push(cells.map((c, i) => String(c).padStart(i === 0 ? 30 : 10)).join(' '));
    row(['endpoint', 'rps', 'p50 ms', 'p99 ms', 'max ms', 'errors', 'sat rps', 'ratio', 'vs small', 'cpu us/req', 'cpu %', 'RSS MB']);
    // Each log level with the audit page reused (the default), then, at the first level, with
    // AUDIT_CACHE_MS=0: every request reads the database (docs/adr/0014-audit-trail-reads.md).
    const runs = [...LEVELS.map((level) => ({ level, cache: true })), ...(UNCACHED && LEVELS[0] ? [{ level: LEVELS[0], cache: false }] : [])];
    for (const { level, cache } of runs) {
      const b = await startBackend('image', ctx, { LOG_LEVEL: level, ...(cache ? {} : { AUDIT_CACHE_MS: '0' }) }, 100);
      const tag = cache ? level : `${level}, AUDIT_CACHE_MS=0`;
      try {
        await sleep(IDLE_MS);
        const rssIdle = rssMB(b.proc.pid);
        const login = await http(`${b.base}/api/auth/login`, { method: 'POST', body: VIEWER });
        if (login.status !== 200) throw new Error(`login answered ${login.status}: ${login.body}`);
        const token = (JSON.parse(login.body) as { token: string }).token;
        const actions = await http(`${b.base}/api/deployment/actions`, { token });
        if (actions.status !== 200 || (JSON.parse(actions.body) as unknown[]).length !== 50) throw new Error(`actions answered ${actions.status}: ${actions.body.slice(0, 300)}`);
        if (!bare) {
          writeFileSync(bareBody, actions.body);
          const small = await startBare('bare-small', bareBody, tmp);
          const same = await startBare('bare-same-body', bareBody, tmp);
          bare = {
            small: { url: `http://127.0.0.1:${small.port}/health`, pid: small.proc.pid },
            sameBody: { url: `http://127.0.0.1:${same.port}/actions`, pid: same.proc.pid },
            procs: [small.proc, same.proc],
          };
        }

        // Each endpoint against the bare handler that sends what it sends: /api/health against
        // small JSON, the audit trail against its own 13 KB. The audit trail is also set against
        // the small JSON, reported without a goal: that ratio counts the body's cost too.
        const baselines = { small: bare.small, sameBody: bare.sameBody };
        const baseRuns: Record<keyof typeof baselines, Saturated[]> = { small: [], sameBody: [] };
        const baseFixed = { small: await fixedRate(bare.small, scripts), sameBody: await fixedRate(bare.sameBody, scripts) };
        const endpointRows: (string | number)[][] = [];
        const endpoints = [
          { name: '/api/health', url: `${b.base}/api/health`, token: undefined, baseline: 'small' },
          { name: '/api/deployment/actions', url: `${b.base}/api/deployment/actions`, token, baseline: 'sameBody' },
        ] as const;
        for (const e of cache ? endpoints : endpoints.slice(1)) {
          const t: Target = { url: e.url, pid: b.proc.pid, ...(e.token ? { token: e.token } : {}) };
          const fixed = await fixedRate(t, scripts);
          const p = await paired(t, baselines[e.baseline], scripts);
          baseRuns[e.baseline].push(...p.baselineRuns);
          const vsSmall = e.baseline === 'small' ? p : await paired(t, baselines.small, scripts);
          if (vsSmall !== p) baseRuns.small.push(...vsSmall.baselineRuns);
          const errors = fixed.errors + p.endpoint.errors;
          endpointRows.push([`${e.name} (${tag})`, fixed.rps.toFixed(0), fixed.p50.toFixed(2), fixed.p99.toFixed(2), fixed.max.toFixed(1), errors, p.endpoint.rps.toFixed(0), p.ratio.toFixed(2), vsSmall.ratio.toFixed(2), p.endpoint.cpuUsPerReq.toFixed(0), (p.endpoint.cpuShare * 100).toFixed(0), rssMB(b.proc.pid).toFixed(0)]);
          const pairs = (x: Paired) => `median of ${PAIRS} pairs (${x.ratios.map((r) => r.toFixed(2)).join(', ')})`;
          const against = e.baseline === 'small' ? "bare Fastify's (small JSON)" : `bare Fastify's sending the same ${actions.body.length} bytes`;
          add(`[${tag}] ${e.name}: achieved rate`, fixed.rps, 'req/s', `~${TARGET_RPS}`);
          add(`[${tag}] ${e.name}: p50`, fixed.p50, 'ms');
          add(`[${tag}] ${e.name}: p99`, fixed.p99, 'ms', '<= 10 ms', fixed.p99 <= 10 && errors === 0);
          add(`[${tag}] ${e.name}: saturating throughput / ${against}, ${pairs(p)}`, p.ratio, 'x', '>= 0.5', p.ratio >= 0.5);
          if (vsSmall !== p) add(`[${tag}] ${e.name}: saturating throughput / bare Fastify's small JSON, ${pairs(vsSmall)}`, vsSmall.ratio, 'x');
          if (fixed.rps < 0.9 * TARGET_RPS) log(`[${tag}] ${e.name}: could not sustain ${TARGET_RPS} req/s (its saturating rate here: ${p.endpoint.rps.toFixed(0)})`);
          if (errors) log(`[${tag}] ${e.name}: ${errors} errors (non-2xx, timeouts or socket errors)`);
        }
        for (const k of ['small', 'sameBody'] as const) {
          if (!baseRuns[k].length) continue;
          const f = baseFixed[k];
          const sat = medianRun(baseRuns[k]);
          const label = k === 'small' ? 'bare Fastify, small JSON' : 'bare Fastify, same body';
          row([`${label} (${tag})`, f.rps.toFixed(0), f.p50.toFixed(2), f.p99.toFixed(2), f.max.toFixed(1), f.errors + sat.errors, sat.rps.toFixed(0), '', '', sat.cpuUsPerReq.toFixed(0), (sat.cpuShare * 100).toFixed(0), rssMB(baselines[k].pid).toFixed(0)]);
          add(`[${tag}] ${label}: p99 at ${f.rps.toFixed(0)} req/s`, f.p99, 'ms');
          add(`[${tag}] ${label}: saturating (median run)`, sat.rps, 'req/s');
        }
        for (const r of endpointRows) row(r);
        const rssAfter = rssMB(b.proc.pid);
        add(`[${tag}] RSS after boot + ${IDLE_MS / 1000} s idle`, rssIdle, 'MB', '<= 120 MB', rssIdle <= 120);
        add(`[${tag}] RSS after the load`, rssAfter, 'MB');
      } finally {
        await b.proc.stop();
      }
    }
    for (const p of bare?.procs ?? []) await p.stop();
    log(`fixed rate: wrk -t1 -c${RATE_CONNECTIONS}, random delay per request aimed at ${TARGET_RPS} req/s, ${SECONDS} s; saturating: wrk -t1 -c${SAT_CONNECTIONS}, no delay, ${PAIR_SECONDS} s a run`);
    log(`ratio = median over ${PAIRS} pairs of saturating runs (the bare Fastify handler, then the endpoint, back to back) of endpoint req/s / bare req/s, against the bare handler sending what the endpoint sends: small JSON for /api/health, the same bytes for the audit trail; vs small: the same against the small JSON; bare handlers: same fastify, no auth, no logger, one process per route; sat rps and cpu: the run of median rate`);
    log('cpu us/req and cpu %: CPU time of the server process per request in that saturating run, and its share of one core (the rest of the 2 cores go to wrk and Postgres)');
    log(`backend under load: the image's, node ${NODE_ARGS.join(' ')} dist/src/bundle/start.js, NODE_ENV=production, MIGRATE_ON_BOOT=false, its output to a file`);
    for (const line of table) log(line);
  } finally {
    process.removeListener('SIGINT', onSignal);
    process.removeListener('SIGTERM', onSignal);
    await cleanup();
  }
  return figures;
};

export default bench;

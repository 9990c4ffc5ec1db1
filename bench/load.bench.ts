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
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, symlinkSync, copyFileSync, existsSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { median } from './stats.ts';
import type { Bench, Figure } from './run.ts';
import { bundleForNpmStart, NODE, npmStartArgs, ROOT } from '../test/helpers/shared/process.ts';
import { createTestDatabase, type TestDatabase } from '../test/helpers/shared/db.ts';
import { createUser } from '../src/state/users.ts';
import { ACTION_KINDS } from '../src/db/schema.ts';

const SECONDS = Number(process.env.BENCH_LOAD_SECONDS ?? 10);
/** Pairs of saturating runs (baseline, endpoint) per ratio, and the length of each run. */
const PAIRS = Number(process.env.BENCH_LOAD_PAIRS ?? 3);
const PAIR_SECONDS = Number(process.env.BENCH_LOAD_PAIR_SECONDS ?? 5);
const LEVELS = (process.env.BENCH_LOAD_LEVELS ?? 'info,warn').split(',').filter(Boolean);
const BOOT_RUNS = Number(process.env.BENCH_BOOT_RUNS ?? 5);
/** Also load the audit trail with AUDIT_CACHE_MS=0 (every request reads the database). */
const UNCACHED = process.env.BENCH_LOAD_UNCACHED !== '0';
/** The node options the image starts the backend with (deploy/Dockerfile's CMD), unless overridden. */
function imageNodeArgs(): string[] {
  const cmd = /^CMD (\[.*\])\s*$/m.exec(readFileSync(path.join(ROOT, 'deploy/Dockerfile'), 'utf8'))?.[1];
  if (!cmd) throw new Error('deploy/Dockerfile has no CMD in exec form');
  const argv = JSON.parse(cmd) as string[];
  return argv.slice(1, -1);
}
const NODE_ARGS = process.env.BENCH_BACKEND_NODE_ARGS !== undefined ? process.env.BENCH_BACKEND_NODE_ARGS.split(/\s+/).filter(Boolean) : imageNodeArgs();
const IDLE_MS = 5_000;
const TARGET_RPS = 1_000;
/** Connections of the rate-limited runs: each waits a random delay (mean ≈ this many ms) between requests. */
const RATE_CONNECTIONS = 50;
/** Connections of the saturating runs. */
const SAT_CONNECTIONS = 8;
const VIEWER = { username: 'bench_viewer', password: 'bench-viewer-password-1' };
const SECRETS = {
  JWT_SECRET: 'bench-jwt-secret-0123456789-abcdefghijklmnopqrstu',
  ENCRYPTION_KEY: 'bench-encryption-key-0123456789-abcdefghijklmn',
  SERVICE_TOKEN: 'bench-service-token-0123456789-abcdefghijklmno',
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------- processes

interface Proc {
  name: string;
  child: ChildProcess;
  pid: number;
  exited: Promise<void>;
  /** The end of what it printed (stdout and stderr go to a file, so the bench never parses request logs). */
  tail(): string;
  stop(): Promise<void>;
}

/** Everything started here, stopped in `finally` whatever happened. */
const live = new Set<Proc>();

function startProc(name: string, cmd: string, args: string[], opts: { env?: Record<string, string>; cwd?: string; logFile: string }): Proc {
  const fd = openSync(opts.logFile, 'w');
  const child = spawn(cmd, args, {
    cwd: opts.cwd ?? ROOT,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root', ...opts.env },
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  const exited = new Promise<void>((res) => child.once('exit', () => res()));
  const p: Proc = {
    name,
    child,
    pid: child.pid ?? -1,
    exited,
    tail: () => {
      try {
        return readFileSync(opts.logFile, 'utf8').slice(-4_000);
      } catch {
        return '';
      }
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const killed = await Promise.race([exited.then(() => true), sleep(10_000).then(() => false)]);
        if (!killed) {
          child.kill('SIGKILL');
          await exited;
        }
      }
      live.delete(p);
    },
  };
  child.once('error', () => {}); // a spawn failure shows as an exit
  live.add(p);
  return p;
}

/** Runs a command to its end, collecting its output; rejects on a non-zero exit unless `allowFail`. */
function run(cmd: string, args: string[], opts: { cwd?: string; allowFail?: boolean } = {}): Promise<{ code: number; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd ?? ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => {
      if (code !== 0 && !opts.allowFail) reject(new Error(`${cmd} ${args.join(' ')} exited ${code}:\n${out.slice(-3_000)}`));
      else resolve({ code: code ?? -1, out });
    });
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** One HTTP request on a fresh connection (no pool that could keep the server from closing). */
export function http(url: string, opts: { method?: string; body?: unknown; token?: string } = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    const req = request(
      url,
      {
        method: opts.method ?? 'GET',
        agent: false,
        timeout: 2_000,
        headers: {
          connection: 'close',
          ...(payload ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } : {}),
          ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
        },
      },
      (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(payload);
  });
}

function rssMB(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]) / 1024;
}

/** CPU time (user + system) the process has used, in ms (USER_HZ is 100 on Linux). */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
}

// ---------------------------------------------------------------- the backend

export interface Backend {
  proc: Proc;
  base: string;
  bootMs: number;
}

type Mode = 'image' | 'start';

/** Spawns the backend and waits for the first 200 from /api/health; the wall time is the boot. */
export async function startBackend(mode: Mode, ctx: { dist: string; db: TestDatabase; dataDir: string; tmp: string }, env: Record<string, string>, n: number): Promise<Backend> {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const [cmd, args, cwd] =
    mode === 'image'
      ? ([NODE, [...NODE_ARGS, path.join(ctx.dist, 'dist/src/bundle/start.js')], ctx.dist] as const)
      : ([NODE, npmStartArgs(), ROOT] as const);
  const t0 = performance.now();
  const proc = startProc(`backend-${mode}-${n}`, cmd, [...args], {
    cwd,
    logFile: path.join(ctx.tmp, `backend-${mode}-${n}.log`),
    env: {
      NODE_ENV: 'production',
      HOST: '127.0.0.1',
      PORT: String(port),
      DATABASE_URL: ctx.db.url,
      DATA_DIR: ctx.dataDir,
      MIGRATE_ON_BOOT: 'false',
      DOCKER_SOCKET: process.env.DOCKER_SOCKET ?? '/var/run/docker.sock',
      ...SECRETS,
      ...env,
    },
  });
  let gone = false;
  void proc.exited.then(() => (gone = true));
  for (;;) {
    if (gone) throw new Error(`the backend (${mode}) exited before it was healthy:\n${proc.tail()}`);
    if (performance.now() - t0 > 30_000) throw new Error(`the backend (${mode}) was not healthy within 30 s:\n${proc.tail()}`);
    try {
      if ((await http(`${base}/api/health`)).status === 200) break;
    } catch {
      /* not listening yet */
    }
    await sleep(10);
  }
  return { proc, base, bootMs: performance.now() - t0 };
}

/**
 * The backend as the image holds it (scripts/build-image.sh, then the Dockerfile's priming step):
 * dist/ compiled by tsc, the bundle in dist/src/bundle, its code cache made under the CMD's flags,
 * package.json, and node_modules (linked).
 */
export async function buildBackend(tmp: string, log: (m: string) => void): Promise<string> {
  const dir = path.join(tmp, 'app');
  const t0 = performance.now();
  const r = await run(NODE, [path.join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json', '--outDir', path.join(dir, 'dist')], { allowFail: true });
  // tsc emits despite type errors; a type error elsewhere in the tree must not stop a benchmark.
  if (!existsSync(path.join(dir, 'dist/src/main.js'))) throw new Error(`tsc produced no dist/src/main.js:\n${r.out.slice(-3_000)}`);
  if (r.code !== 0) log(`warning: tsc exited ${r.code} (type errors in the tree); measuring what it emitted`);
  copyFileSync(path.join(ROOT, 'package.json'), path.join(dir, 'package.json'));
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
  await run(NODE, ['--import', 'tsx', path.join(ROOT, 'scripts/bundle-backend.ts'), path.join(dir, 'dist')]);
  await run(NODE, [...NODE_ARGS, path.join(dir, 'dist/src/bundle/start.js'), '--prime-code-cache'], { cwd: dir });
  log(`the backend compiled, bundled and its code cache primed in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  return dir;
}

// ---------------------------------------------------------------- wrk

interface WrkResult {
  requests: number;
  rps: number;
  p50: number;
  p99: number;
  max: number;
  errors: number;
}

// done() prints the figures as one JSON line; latencies in wrk are microseconds.
const DONE_LUA = `
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%.0f,"duration_us":%.0f,"p50":%.0f,"p99":%.0f,"max":%.0f,"errors":%.0f}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    e.connect + e.read + e.write + e.status + e.timeout))
end
`;
// Each connection waits a random delay, uniform in [0, 2 * mean] ms, before each request: the
// connections drift apart instead of firing in bursts, and the rate is connections / (mean + latency).
const RATE_LUA = `
local mean = 0
function init(args)
  mean = tonumber(args[1]) or 0
  math.randomseed(os.time())
end
function delay()
  return math.random(0, 2 * mean)
end
${DONE_LUA}`;

async function wrk(url: string, opts: { token?: string; seconds: number; connections: number; delayMs?: number; scripts: { rate: string; sat: string } }): Promise<WrkResult> {
  const args = ['-t1', `-c${opts.connections}`, `-d${opts.seconds}s`, '--latency', '--timeout', '2s'];
  if (opts.token) args.push('-H', `Authorization: Bearer ${opts.token}`);
  args.push('-s', opts.delayMs === undefined ? opts.scripts.sat : opts.scripts.rate, url);
  if (opts.delayMs !== undefined) args.push('--', String(opts.delayMs));
  const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const p: Proc = {
    name: 'wrk',
    child,
    pid: child.pid ?? -1,
    exited: new Promise((res) => child.once('close', () => res())),
    tail: () => '',
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await p.exited;
      live.delete(p);
    },
  };
  live.add(p);
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const failed = new Promise<never>((_, rej) => child.once('error', rej));
  await Promise.race([p.exited, failed]);
  live.delete(p);
  const m = /^WRKJSON (.*)$/m.exec(out);
  if (!m) throw new Error(`wrk ${args.join(' ')} printed no result:\n${out}`);
  const j = JSON.parse(m[1]!) as { requests: number; duration_us: number; p50: number; p99: number; max: number; errors: number };
  return { requests: j.requests, rps: j.requests / (j.duration_us / 1e6), p50: j.p50 / 1000, p99: j.p99 / 1000, max: j.max / 1000, errors: j.errors };
}

/** A saturating run: wrk without delay, and the server's CPU over it. */
interface Saturated {
  rps: number;
  errors: number;
  /** CPU of the server process per request, and its share of one core. */
  cpuUsPerReq: number;
  cpuShare: number;
}

interface Target {
  url: string;
  token?: string;
  pid: number;
}

async function saturate(t: Target, scripts: { rate: string; sat: string }, seconds: number): Promise<Saturated> {
  const cpu0 = cpuMs(t.pid);
  const r = await wrk(t.url, { token: t.token, seconds, connections: SAT_CONNECTIONS, scripts });
  const cpu = cpuMs(t.pid) - cpu0;
  return { rps: r.rps, errors: r.errors, cpuUsPerReq: (cpu * 1000) / r.requests, cpuShare: cpu / (seconds * 1000) };
}

/** Warm-up, a short calibration of the delay for ~1,000 req/s, then the fixed-rate run. */
async function fixedRate(t: Target, scripts: { rate: string; sat: string }): Promise<WrkResult> {
  await wrk(t.url, { token: t.token, seconds: 2, connections: SAT_CONNECTIONS, scripts });
  // Per connection a cycle is mean delay + latency + wrk's own overhead: measure it, then aim.
  const target = (RATE_CONNECTIONS * 1000) / TARGET_RPS;
  let delayMs = target;
  for (let i = 0; i < 2; i++) {
    const probe = await wrk(t.url, { token: t.token, seconds: 3, connections: RATE_CONNECTIONS, delayMs, scripts });
    const overhead = Math.max(0, (RATE_CONNECTIONS * 1000) / probe.rps - delayMs);
    delayMs = Math.max(1, Math.round(target - overhead));
  }
  return wrk(t.url, { token: t.token, seconds: SECONDS, connections: RATE_CONNECTIONS, delayMs, scripts });
}

interface Paired {
  /** Each pair's endpoint rate / baseline rate, in the order run. */
  ratios: number[];
  ratio: number;
  endpoint: Saturated;
  baseline: Saturated;
  baselineRuns: Saturated[];
}

/**
 * The saturating ratio of an endpoint to a baseline: PAIRS pairs of runs, baseline then endpoint
 * back to back, and the median of the pairs' ratios. A single pair moves with whatever else the
 * machine does in that minute; a pair's two runs share it.
 */
async function paired(endpoint: Target, baseline: Target, scripts: { rate: string; sat: string }): Promise<Paired> {
  const e: Saturated[] = [];
  const b: Saturated[] = [];
  for (let i = 0; i < PAIRS; i++) {
    b.push(await saturate(baseline, scripts, PAIR_SECONDS));
    e.push(await saturate(endpoint, scripts, PAIR_SECONDS));
  }
  const ratios = e.map((x, i) => x.rps / b[i]!.rps);
  return { ratios, ratio: median(ratios), endpoint: medianRun(e), baseline: medianRun(b), baselineRuns: b };
}

/** The run of median rate, with the errors of all runs. */
function medianRun(runs: Saturated[]): Saturated {
  const m = [...runs].sort((x, y) => x.rps - y.rps)[Math.floor(runs.length / 2)]!;
  return { ...m, errors: runs.reduce((n, r) => n + r.errors, 0) };
}

// ---------------------------------------------------------------- the bench

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
    const scripts = { rate: path.join(tmp, 'rate.lua'), sat: path.join(tmp, 'sat.lua') };
    writeFileSync(scripts.rate, RATE_LUA);
    writeFileSync(scripts.sat, DONE_LUA);
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

    // 2. The bare Fastify handler, measured beside each level's installer figures, in two
    // processes that each only ever serve one route (a process that serves both answers its first
    // route more slowly once it has served the second): /health answers small JSON, the baseline
    // of /api/health; /actions sends the bytes the installer sends for the audit page (read from
    // the first backend below), the baseline of /api/deployment/actions.
    const bareBody = path.join(tmp, 'bare-actions.json');
    const bareCode = (port: number) => `
      import Fastify from 'fastify';
      import { readFileSync } from 'node:fs';
      const actions = readFileSync(${JSON.stringify(bareBody)}, 'utf8');
      const app = Fastify({ logger: false });
      app.get('/health', async () => ({ status: 'ok', db: 'up' }));
      app.get('/actions', async (_req, reply) => reply.type('application/json; charset=utf-8').send(actions));
      await app.listen({ host: '127.0.0.1', port: ${port} });
      console.log('listening');`;
    const startBare = async (name: string) => {
      const port = await freePort();
      const p = startProc(name, NODE, ['--input-type=module', '-e', bareCode(port)], { logFile: path.join(tmp, `${name}.log`) });
      for (let i = 0; ; i++) {
        if (p.child.exitCode !== null) throw new Error(`the bare Fastify server exited:\n${p.tail()}`);
        if (i > 500) throw new Error('the bare Fastify server did not listen within 5 s');
        if (await http(`http://127.0.0.1:${port}/health`).then((r) => r.status === 200, () => false)) break;
        await sleep(10);
      }
      return { proc: p, port };
    };
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
          const small = await startBare('bare-small');
          const same = await startBare('bare-same-body');
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

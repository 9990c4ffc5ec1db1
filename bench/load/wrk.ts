// wrk runs against a target: at a fixed rate (latency), saturating (throughput and the server's CPU
// per request), and saturating in pairs against a baseline (the ratio of the two rates).
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { median } from '../stats.ts';
import { cpuMs, live, type Proc } from './processes.ts';

export const SECONDS = Number(process.env.BENCH_LOAD_SECONDS ?? 10);
/** Pairs of saturating runs (baseline, endpoint) per ratio, and the length of each run. */
export const PAIRS = Number(process.env.BENCH_LOAD_PAIRS ?? 3);
export const PAIR_SECONDS = Number(process.env.BENCH_LOAD_PAIR_SECONDS ?? 5);
export const TARGET_RPS = 1_000;
/** Connections of the rate-limited runs: each waits a random delay (mean ≈ this many ms) between requests. */
export const RATE_CONNECTIONS = 50;
/** Connections of the saturating runs. */
export const SAT_CONNECTIONS = 8;

/** Paths of the Lua scripts of wrkScripts(). */
export interface WrkScripts {
  rate: string;
  sat: string;
}

export interface WrkResult {
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

async function wrk(url: string, opts: { token?: string; seconds: number; connections: number; delayMs?: number; scripts: WrkScripts }): Promise<WrkResult> {
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
export interface Saturated {
  rps: number;
  errors: number;
  /** CPU of the server process per request, and its share of one core. */
  cpuUsPerReq: number;
  cpuShare: number;
}

export interface Target {
  url: string;
  token?: string;
  pid: number;
}

async function saturate(t: Target, scripts: WrkScripts, seconds: number): Promise<Saturated> {
  const cpu0 = cpuMs(t.pid);
  const r = await wrk(t.url, { token: t.token, seconds, connections: SAT_CONNECTIONS, scripts });
  const cpu = cpuMs(t.pid) - cpu0;
  return { rps: r.rps, errors: r.errors, cpuUsPerReq: (cpu * 1000) / r.requests, cpuShare: cpu / (seconds * 1000) };
}

/** Warm-up, a short calibration of the delay for ~1,000 req/s, then the fixed-rate run. */
export async function fixedRate(t: Target, scripts: WrkScripts): Promise<WrkResult> {
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

export interface Paired {
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
export async function paired(endpoint: Target, baseline: Target, scripts: WrkScripts): Promise<Paired> {
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
export function medianRun(runs: Saturated[]): Saturated {
  const m = [...runs].sort((x, y) => x.rps - y.rps)[Math.floor(runs.length / 2)]!;
  return { ...m, errors: runs.reduce((n, r) => n + r.errors, 0) };
}

/** The Lua scripts wrk runs, written into `dir`: `rate` waits a random delay before each request, `sat` does not. */
export function wrkScripts(dir: string): WrkScripts {
  const scripts = { rate: path.join(dir, 'rate.lua'), sat: path.join(dir, 'sat.lua') };
  writeFileSync(scripts.rate, RATE_LUA);
  writeFileSync(scripts.sat, DONE_LUA);
  return scripts;
}

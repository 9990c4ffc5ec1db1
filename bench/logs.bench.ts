// Container log figures on the real engine, against the real server process (src/main.ts):
// - throughput of the aggregated, timestamp-ordered SSE window (GET /api/deployment-log) against
//   raw `docker logs` of the same containers, run side by side in one run (goal ≥ 0.8×);
// - the server's RSS growth while a client downloads a 1 GB window (goal < 50 MB).
// The containers are this bench's own (a compose project label of its own) and are removed after.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Bench, Figure } from './run.ts';
import { createTestDatabase } from '../test/helpers/shared/db.ts';
import { bundleForNpmStart, npmStartNodeFlags, runNpmStart } from '../test/helpers/shared/process.ts';
import { docker, run, uniqueName } from '../test/helpers/e2e/rig.ts';
import { firstAdminToken } from '../test/helpers/e2e/first-admin.ts';

const IMAGE = 'installer-rig/busybox:latest';
const MB = 1024 * 1024;

/** Starts `count` containers of a project that each print `lines` lines of `width` characters, then idle. */
async function makeContainers(project: string, count: number, lines: number, width: number): Promise<string[]> {
  const names: string[] = [];
  const text = 'x'.repeat(width);
  for (let i = 1; i <= count; i++) {
    const name = `${project}-s${i}-1`;
    names.push(name);
    await docker([
      'run', '-d', '--name', name,
      '--label', `com.docker.compose.project=${project}`, '--label', `com.docker.compose.service=s${i}`,
      IMAGE, 'sh', '-c', `yes "s${i} ${text}" | head -n ${lines}; echo done; trap 'exit 0' TERM; sleep 3600 & wait`,
    ]);
  }
  // Written once the last line (`done`) is in each container's log.
  for (const name of names) {
    const until = Date.now() + 180_000;
    while (!(await run('docker', ['logs', '--tail', '1', name])).stdout.includes('done')) {
      if (Date.now() > until) throw new Error(`${name} did not finish writing its lines`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  return names;
}

/** `docker logs --timestamps` of every container at once; resolves with lines and bytes read. */
function rawDockerLogs(names: string[]): Promise<{ lines: number; bytes: number }> {
  return Promise.all(
    names.map(
      (name) =>
        new Promise<{ lines: number; bytes: number }>((resolve, reject) => {
          const child = spawn('docker', ['logs', '--timestamps', name], { stdio: ['ignore', 'pipe', 'pipe'] });
          let lines = 0;
          let bytes = 0;
          const count = (d: Buffer) => {
            bytes += d.length;
            for (let i = d.indexOf(10); i >= 0; i = d.indexOf(10, i + 1)) lines++;
          };
          child.stdout.on('data', count);
          child.stderr.on('data', count);
          child.on('error', reject);
          child.on('close', (code) => (code === 0 ? resolve({ lines, bytes }) : reject(new Error(`docker logs ${name} exited ${code}`))));
        }),
    ),
  ).then((all) => all.reduce((a, b) => ({ lines: a.lines + b.lines, bytes: a.bytes + b.bytes })));
}

/**
 * Reads a response body to its end, counting bytes and newlines, sampling the server's RSS meanwhile:
 * the peak overall and the peak while the first quarter of a gigabyte came in.
 */
async function drain(res: Response, pid: number): Promise<{ bytes: number; newlines: number; peakRss: number; firstQuarterPeakRss: number; tail: string }> {
  if (!res.ok || !res.body) throw new Error(`answered ${res.status}: ${await res.text()}`);
  let bytes = 0;
  let newlines = 0;
  let peakRss = rss(pid);
  let firstQuarterPeakRss = peakRss;
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, rss(pid));
    if (bytes < 256 * MB) firstQuarterPeakRss = peakRss;
  }, 50);
  let last: Uint8Array = new Uint8Array();
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      bytes += chunk.length;
      for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, i + 1)) newlines++;
      last = chunk;
    }
  } finally {
    clearInterval(sampler);
  }
  return { bytes, newlines, peakRss: Math.max(peakRss, rss(pid)), firstQuarterPeakRss, tail: Buffer.from(last.subarray(-200)).toString('utf8') };
}

function rss(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

async function timed<T>(fn: () => Promise<T>): Promise<{ value: T; seconds: number }> {
  const t0 = performance.now();
  const value = await fn();
  return { value, seconds: (performance.now() - t0) / 1000 };
}

interface Server {
  base: string;
  pid: number;
  get(path: string): Promise<Response>;
  stop(): Promise<unknown>;
}

/** The real server process as `npm start` runs it, with these V8 flags, on a database of its own, signed in as the first admin. */
async function startServer(project: string, nodeFlags: string[]): Promise<Server> {
  const db = await createTestDatabase();
  const dataDir = mkdtempSync(path.join(tmpdir(), 'logs-bench-'));
  const proc = runNpmStart({ DATABASE_URL: db.url, DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', PLATFORM_PROJECT: project, LOG_LEVEL: 'info' }, nodeFlags);
  try {
    const base = await proc.url;
    const password = readFileSync(path.join(dataDir, 'secrets', 'initial-admin-password'), 'utf8').trim();
    const token = await firstAdminToken(base, password);
    let stopped = false;
    const stop = async () => {
      if (stopped) return;
      stopped = true;
      await proc.stop();
      await db.drop();
    };
    return { base, pid: proc.child.pid!, get: (p) => fetch(`${base}${p}`, { headers: { authorization: `Bearer ${token}` } }), stop };
  } catch (err) {
    await proc.stop();
    await db.drop();
    throw err;
  }
}

/** 1 GB downloads in a row on a fresh server (`times` of them); RSS growth over the first and the last. */
async function downloads(server: Server, label: string, log: (m: string) => void, times: number) {
  const all = '/api/deployment-log/download?since=2000-01-01T00:00:00Z';
  await drain(await server.get('/api/deployment-log/download?since=2000-01-01T00:00:00Z&until=2000-01-02T00:00:00Z'), server.pid); // an empty window warms the code paths
  await new Promise((r) => setTimeout(r, 1_000));
  const before = rss(server.pid);
  const first = await timed(async () => drain(await server.get(all), server.pid));
  let between = rss(server.pid);
  let last = first.value;
  for (let i = 1; i < times; i++) {
    between = rss(server.pid);
    last = await drain(await server.get(all), server.pid);
  }
  for (const d of [first.value, last]) if (d.newlines !== 1_000_004) throw new Error(`a download held ${d.newlines} lines, not 1,000,004`);
  log(
    `${label}: ${(first.value.bytes / MB).toFixed(0)} MB in ${first.seconds.toFixed(1)} s; RSS ${(before / MB).toFixed(0)} MB before, ` +
      `${(first.value.firstQuarterPeakRss / MB).toFixed(0)} MB peak over the first 256 MB, ${(first.value.peakRss / MB).toFixed(0)} MB over all` +
      (times > 1 ? `; download ${times}: ${(between / MB).toFixed(0)} → ${(last.peakRss / MB).toFixed(0)} MB` : ''),
  );
  return { first: first.value, seconds: first.seconds, firstGrowth: (first.value.peakRss - before) / MB, lastGrowth: (last.peakRss - between) / MB };
}

const bench: Bench = async (log) => {
  const figures: Figure[] = [];
  const project = uniqueName('logs-bench');
  const servers: Server[] = [];
  try {
    // 1. Memory: 1 GB downloads (four containers of 250,000 lines of 1,000 characters) on a fresh
    //    server run as `npm start` runs it (the image's V8 flags), and on V8's defaults.
    log('writing 4 × 250,000 lines of 1,000 characters …');
    const big = await makeContainers(project, 4, 250_000, 1_000);
    await bundleForNpmStart();
    const flags = npmStartNodeFlags().join(' ');
    const plain = await startServer(project, npmStartNodeFlags());
    servers.push(plain);
    const d = await downloads(plain, `download, npm start's flags (${flags})`, log, 2);
    figures.push({ name: 'download size', value: Math.round(d.first.bytes / MB), unit: 'MB' });
    figures.push({ name: 'download throughput', value: d.first.bytes / MB / d.seconds, unit: 'MB/s' });
    figures.push({ name: "server RSS growth, 1st 1 GB download (npm start's flags)", value: d.firstGrowth, unit: 'MB', goal: '< 50', ok: d.firstGrowth < 50 });
    figures.push({ name: "server RSS growth, 2nd 1 GB download (npm start's flags)", value: d.lastGrowth, unit: 'MB', goal: '< 50', ok: d.lastGrowth < 50 });
    const defaults = await startServer(project, []);
    servers.push(defaults);
    const c = await downloads(defaults, 'download, V8 defaults', log, 1);
    figures.push({ name: 'server RSS growth, 1st 1 GB download (V8 defaults, for comparison)', value: c.firstGrowth, unit: 'MB' });
    await defaults.stop();
    await docker(['rm', '-f', ...big]);

    // 2. Throughput: four containers of 250,000 short lines each (1 M lines), the same lines read
    //    by `docker logs` (all four at once) and by the aggregated, timestamp-ordered SSE window.
    log('writing 4 × 250,000 lines of 100 characters …');
    const small = await makeContainers(project, 4, 250_000, 96);
    const windowEnd = new Date().toISOString();
    const raw = await timed(() => rawDockerLogs(small));
    log(`docker logs: ${raw.value.lines} lines, ${(raw.value.bytes / MB).toFixed(0)} MB in ${raw.seconds.toFixed(2)} s`);
    const sse = await timed(async () => drain(await plain.get(`/api/deployment-log?since=2000-01-01T00:00:00Z&until=${windowEnd}`), plain.pid));
    const end = /event: end\ndata: \{"lines":(\d+)\}/.exec(sse.value.tail);
    const sseLines = end ? Number(end[1]) : NaN;
    if (sseLines !== raw.value.lines) throw new Error(`the SSE window delivered ${sseLines} lines; docker logs ${raw.value.lines}`);
    log(`aggregated SSE window: ${sseLines} lines, ${(sse.value.bytes / MB).toFixed(0)} MB in ${sse.seconds.toFixed(2)} s`);
    const raw2 = await timed(() => rawDockerLogs(small)); // once more after, so that neither side alone had the warmer cache
    log(`docker logs again: ${raw2.seconds.toFixed(2)} s`);
    const rawRate = raw.value.lines / Math.min(raw.seconds, raw2.seconds);
    const sseRate = sseLines / sse.seconds;
    figures.push({ name: 'raw docker logs (4 containers at once, best of 2)', value: Math.round(rawRate), unit: 'lines/s' });
    figures.push({ name: 'aggregated SSE window (timestamp-ordered)', value: Math.round(sseRate), unit: 'lines/s' });
    figures.push({ name: 'aggregated SSE / raw docker logs', value: sseRate / rawRate, unit: '×', goal: '≥ 0.8' });
    await docker(['rm', '-f', ...small]);
  } finally {
    const left = (await docker(['ps', '-aq', '--filter', `label=com.docker.compose.project=${project}`])).split('\n').filter(Boolean);
    if (left.length) await run('docker', ['rm', '-f', ...left]);
    for (const s of servers) await s.stop();
  }
  return figures;
};

export default bench;

// The Docker engine stopped and started under a running backend. A private dockerd (never the
// rig's shared one) runs a small platform; the backend (a real process) talks to it through
// DOCKER_SOCKET, compose included. While the engine is down, the status endpoint answers at once
// with `engineError`, the log endpoints answer 503 naming the engine, and a job requested meanwhile
// ends failed saying the engine is not reachable. Once the engine is back, the same process shows
// the platform again, streams its logs and runs a new job (docs/adr/0012-dependency-faults.md).
// Measured figures are printed with the prefix `faults-engine:`.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cpSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { runEntry, ROOT, type Running } from '../helpers/shared/process.ts';
import { docker, freePort, uniqueName } from '../helpers/e2e/rig.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { createUser } from '../../src/state/users.ts';
import { loadImage, startPrivateEngine, type PrivateEngine } from '../helpers/e2e/private-engine.ts';
import { login, requestJob, timed, UNAVAILABLE_SHAPE, waitJob } from '../helpers/e2e/http-api.ts';
import { eventually } from '../helpers/shared/eventually.ts';

/** Every endpoint answers within this while the engine is down (it fails fast: the socket is gone). */
const OUTAGE_ANSWER_BOUND_MS = 2_000;
/** A job requested during the outage has failed within this. */
const JOB_FAIL_BOUND_MS = 15_000;
/** After the engine answers again the status shows the platform running within this. */
const RECOVERY_BOUND_MS = 30_000;

const project = uniqueName('faults-engine');

let engine: PrivateEngine | undefined;
let db: TestDatabase | undefined;
let proc: Running | undefined;
let platformDir: string;
let base: string;
let token: string;

beforeAll(async () => {
  engine = await startPrivateEngine();
  await loadImage(engine, 'installer-rig/busybox:latest');
  platformDir = mkdtempSync(path.join(tmpdir(), `${project}-`));
  cpSync(path.join(ROOT, 'deploy/rig/demo-platform'), platformDir, { recursive: true });
  writeFileSync(path.join(platformDir, '.env'), `TZ=UTC\nWEB_PORT=${await freePort()}\n`);
  db = await createTestDatabase();
  await createUser(db.database.db, { username: 'admin', password: 'admin-password-1', role: 'admin' });
  proc = runEntry('src/main.ts', {
    DATABASE_URL: db.url,
    DATA_DIR: mkdtempSync(path.join(tmpdir(), 'faults-engine-data-')),
    PORT: '0',
    HOST: '127.0.0.1',
    PLATFORM_DIR: platformDir,
    PLATFORM_PROJECT: project,
    DOCKER_SOCKET: engine.socket,
    LOG_LEVEL: 'info',
    // Status reads the observer's platform row; the test reads it right after the engine stops,
    // so every read asks for an observation that began after it (docs/adr/0023-observed-state.md).
    OBSERVED_MAX_AGE_SECONDS: '0',
  });
  base = await proc.url;
  token = await login(base, 'admin', 'admin-password-1');
});

afterAll(async () => {
  await proc?.stop('SIGKILL');
  if (engine) {
    if (!engine.running()) await engine.start().catch(() => {});
    if (engine.running()) await engine.docker(['compose', '-p', project, '-f', path.join(platformDir, 'docker-compose.yml'), 'down', '-v', '-t', '1'], { cwd: platformDir }).catch(() => {});
    await engine.destroy();
  }
  await db?.drop();
});

const auth = () => ({ authorization: `Bearer ${token}` });

interface Status {
  containers: { name: string; service: string; state: string }[];
  engineError?: string;
}

async function status() {
  const r = await timed(`${base}/api/deployment/status`, { headers: auth() });
  return { ...r, status: r.status, view: r.body as Status };
}

/** Opens an SSE endpoint, reads its first bytes and closes it. */
async function sseStart(url: string): Promise<{ status: number; ms: number; contentType: string; first: string; body: unknown }> {
  const started = Date.now();
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), 15_000);
  try {
    const res = await fetch(url, { headers: { ...auth(), accept: 'text/event-stream' }, signal: abort.signal });
    const ms = Date.now() - started;
    const contentType = res.headers.get('content-type') ?? '';
    if (!contentType.startsWith('text/event-stream')) {
      const text = await res.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        /* text */
      }
      return { status: res.status, ms, contentType, first: text, body };
    }
    const reader = res.body!.getReader();
    let first = '';
    while (!first.includes('data:')) {
      const { value, done } = await reader.read();
      if (done) break;
      first += Buffer.from(value).toString('utf8');
    }
    abort.abort();
    return { status: res.status, ms, contentType, first, body: null };
  } finally {
    clearTimeout(timer);
    abort.abort();
  }
}

function logEndpoints() {
  const since = new Date(Date.now() - 10 * 60_000).toISOString();
  const until = new Date().toISOString();
  return {
    all: `${base}/api/deployment/logs?tail=5`,
    service: `${base}/api/deployment/logs/worker?tail=5`,
    window: `${base}/api/deployment-log?since=${encodeURIComponent(since)}&until=${encodeURIComponent(until)}`,
    download: `${base}/api/deployment-log/download?since=${encodeURIComponent(since)}&until=${encodeURIComponent(until)}`,
  };
}

async function waitRunning(bound: number): Promise<number> {
  const started = Date.now();
  await eventually(async () => {
    const s = await status();
    if (s.status === 200 && !s.view.engineError && s.view.containers.length === 3 && s.view.containers.every((c) => c.state === 'running')) return true;
    throw new Error(s.text);
  }, 'the platform to show as running', bound, 200);
  return Date.now() - started;
}

describe('Docker engine stopped and started', () => {
  it('answers with a clear error meanwhile, fails jobs clearly, and recovers without a restart', async () => {
    // Compose runs against DOCKER_SOCKET: the platform comes up in the private engine only.
    const up = await waitJob(base, token, await requestJob(base, token, 'compose-up'));
    expect(up).toMatchObject({ phase: 'completed' });
    expect((await engine!.docker(['ps', '-q', '--filter', `label=com.docker.compose.project=${project}`])).trim().split('\n')).toHaveLength(3);
    expect((await docker(['ps', '-aq', '--filter', `label=com.docker.compose.project=${project}`])).trim()).toBe('');
    await waitRunning(60_000);

    const before = logEndpoints();
    for (const url of [before.all, before.service, before.window]) {
      const r = await sseStart(url);
      expect({ url, status: r.status, contentType: r.contentType }).toEqual({ url, status: 200, contentType: expect.stringMatching(/^text\/event-stream/) });
      expect(r.first).toContain('data:');
    }
    const dl = await timed(before.download, { headers: auth() });
    expect(dl.status).toBe(200);
    expect(dl.text).toMatch(/worker: line \d+/);
    const pid = proc!.child.pid;

    // The outage.
    const stopMs = await engine!.stop();
    expect(engine!.running()).toBe(false);
    const outage = Date.now();

    const s = await status();
    expect(s.status).toBe(200);
    expect(s.view.engineError).toMatch(/^the Docker engine did not answer: .*docker\.sock/);
    expect(s.view.containers).toEqual([]);
    expect(s.ms).toBeLessThanOrEqual(OUTAGE_ANSWER_BOUND_MS);

    const during = logEndpoints();
    const logFigures: Record<string, number> = {};
    for (const [name, url] of Object.entries(during)) {
      const r = name === 'download' ? await timed(url, { headers: auth() }) : await sseStart(url);
      expect({ name, status: r.status, body: r.body }).toEqual({ name, status: 503, body: { ...UNAVAILABLE_SHAPE, message: 'the Docker engine did not answer; try again shortly' } });
      expect(r.ms).toBeLessThanOrEqual(OUTAGE_ANSWER_BOUND_MS);
      logFigures[name] = r.ms;
    }
    // The database is fine: health says so.
    expect((await timed(`${base}/api/health`)).status).toBe(200);

    const requested = Date.now();
    const failed = await waitJob(base, token, await requestJob(base, token, 'restart', ['web']), JOB_FAIL_BOUND_MS);
    const jobFailMs = Date.now() - requested;
    expect(failed.phase).toBe('failed');
    expect(failed.detail).toMatch(/^restart failed: the Docker engine is not reachable \(.*Cannot connect to the Docker daemon at unix:\/\/.*docker\.sock/);
    const outageMs = Date.now() - outage;

    // The engine comes back; `restart: unless-stopped` brings the platform back with it.
    const engineStartMs = await engine!.start();
    const recoveryMs = await waitRunning(RECOVERY_BOUND_MS);
    const after = logEndpoints();
    for (const url of [after.all, after.service, after.window]) {
      const r = await sseStart(url);
      expect({ url, status: r.status }).toEqual({ url, status: 200 });
      expect(r.first).toContain('data:');
    }
    expect((await timed(after.download, { headers: auth() })).status).toBe(200);
    const again = Date.now();
    const ok = await waitJob(base, token, await requestJob(base, token, 'restart', ['web']));
    expect(ok).toMatchObject({ phase: 'completed', exitCode: 0 });
    const jobOkMs = Date.now() - again;

    expect(proc!.child.pid).toBe(pid);
    expect(proc!.child.exitCode).toBeNull();
    console.log(`faults-engine: ${JSON.stringify({ dockerdStopMs: stopMs, statusDuringOutageMs: s.ms, logEndpoints503Ms: logFigures, jobFailedAfterMs: jobFailMs, outageMs, dockerdStartMs: engineStartMs, platformRunningAfterEngineStartMs: recoveryMs, jobAfterRecoveryMs: jobOkMs })}`);
  });
});

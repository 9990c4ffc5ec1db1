// Job output reaches the backend's stdout whatever LOG_LEVEL is: the real backend process runs with
// LOG_LEVEL=silent, a compose job and a host migration run through its API on the real engine and a
// real systemd host, and every output line of both jobs is on the process's stdout as
// `[job <jobId>] <line>`, while the backend's own messages are not.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { NODE, ROOT } from '../helpers/shared/process.ts';
import { buildInstallerImage, freePort, REGISTRY, run, startPlatform, uniqueName, type PlatformProject } from '../helpers/e2e/rig.ts';
import { startSystemdHost, type SystemdHost } from '../helpers/e2e/systemd-host.ts';
import { parseSse } from '../helpers/shared/sse.ts';
import { createUser } from '../../src/state/users.ts';
import { eventually } from '../helpers/shared/eventually.ts';

const scriptPath = '/opt/installer-mirror/migrate-host.sh';
let db: TestDatabase;
let platform: PlatformProject;
let host: SystemdHost;
let installerImage: string;
let dataDir: string;
let child: ChildProcess | undefined;
let stdout = '';
let stderr = '';
let base = '';
let token = '';

beforeAll(async () => {
  installerImage = `${REGISTRY}/installer:dev-mirror-${uniqueName('x').slice(2)}`;
  [platform, host] = await Promise.all([startPlatform(), startSystemdHost(), buildInstallerImage([installerImage])]);
  db = await createTestDatabase();
  await createUser(db.database.db, { username: 'root', password: 'root-password-1', role: 'admin' });
  dataDir = mkdtempSync(path.join(tmpdir(), 'installer-mirror-'));
  const port = await freePort();
  // The real entry point; stdout and stderr are read apart, since the spec names stdout.
  child = spawn(NODE, ['--import', 'tsx', path.join(ROOT, 'src/main.ts')], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/root',
      DATABASE_URL: db.url,
      DATA_DIR: dataDir,
      HOST: '127.0.0.1',
      PORT: String(port),
      LOG_LEVEL: 'silent',
      PLATFORM_DIR: platform.dir,
      PLATFORM_PROJECT: platform.project,
      PLATFORM_URL: 'https://platform.example.com',
      MIGRATE_HOST_SCRIPT_PATH: scriptPath,
      MIGRATE_RUNNER_IMAGE: installerImage,
      MIGRATE_RUNNER_PRIVILEGED: 'false',
      MIGRATE_RUNNER_PID_MODE: `container:${host.name}`,
      MIGRATE_HOST_STOP_TIMEOUT: '3',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  base = `http://127.0.0.1:${port}`;
  const until = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the backend exited (${child.exitCode}):\n${stdout}\n${stderr}`);
    const ok = await fetch(`${base}/api/health`).then((r) => r.ok, () => false);
    if (ok) break;
    if (Date.now() > until) throw new Error(`the backend did not answer within 60 s:\n${stdout}\n${stderr}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  const res = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'root', password: 'root-password-1' }) });
  expect(res.status).toBe(200);
  token = ((await res.json()) as { token: string }).token;
});

afterAll(async () => {
  if (child && child.exitCode === null) {
    const exited = new Promise((r) => child!.once('exit', r));
    child.kill('SIGTERM');
    await exited;
  }
  await platform?.remove();
  await host?.remove();
  await db?.drop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  if (installerImage) await run('docker', ['rmi', installerImage]);
});

const h = () => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' });

async function follow(jobId: string) {
  const res = await fetch(`${base}/api/deployment/jobs/${jobId}/logs`, { headers: { ...h(), accept: 'text/event-stream' } });
  expect(res.status).toBe(200);
  return parseSse(await res.text());
}

/** The JSON lines of stdout that mirror a job's output, as `[job <id>] <line>` messages. */
function mirrored(jobId: string): string[] {
  const prefix = `[job ${jobId}] `;
  const messages = stdout.split('\n').flatMap((l) => {
    try {
      return [(JSON.parse(l) as { msg?: string }).msg ?? ''];
    } catch {
      return []; // a line not yet complete
    }
  });
  return messages.filter((m) => m.startsWith(prefix)).map((m) => m.slice(prefix.length));
}

async function waitMirrored(jobId: string, count: number): Promise<string[]> {
  // The logger writes asynchronously: the last lines can trail the stream's end by a moment.
  await eventually(() => mirrored(jobId).length >= count, `${count} mirrored lines of job ${jobId}`, 5_000, 100).catch(() => {}); // fewer fail the caller's comparison, which shows them
  return mirrored(jobId);
}

describe('job output on the backend\'s stdout with LOG_LEVEL=silent', () => {
  it('mirrors every output line of a compose job', async () => {
    const res = await fetch(`${base}/api/deployment/jobs`, { method: 'POST', headers: h(), body: JSON.stringify({ action: 'restart', services: ['worker'] }) });
    expect(res.status).toBe(202);
    const { jobId } = (await res.json()) as { jobId: string };
    const events = await follow(jobId);
    expect(events.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'completed', exitCode: 0 } });
    const lines = events.filter((e) => e.event === 'output' || e.event === 'progress').map((e) => String(e.data.line));
    expect(lines.length).toBeGreaterThan(0);
    expect(await waitMirrored(jobId, lines.length)).toEqual(lines);
    // LOG_LEVEL still silences the backend's own messages: only the mirrored output is there.
    expect(stdout).not.toContain('installer listening');
    expect(stdout).not.toContain(`job ${jobId} started`);
  });

  it('mirrors every output line of a host migration', async () => {
    expect((await fetch(`${base}/api/migrate/vm-user`, { method: 'POST', headers: h(), body: JSON.stringify({ vmUser: 'ubuntu' }) })).status).toBe(200);
    const res = await fetch(`${base}/api/migrate/run-host`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
    expect(res.status, await res.clone().text()).toBe(202);
    const { jobId } = (await res.json()) as { jobId: string };
    const events = await follow(jobId);
    const lines = events.filter((e) => e.event === 'output').map((e) => String(e.data.line));
    expect(events.at(-1), lines.slice(-10).join('\n')).toMatchObject({ event: 'finished', data: { outcome: 'completed', exitCode: 0 } });
    expect(lines.at(-1)).toMatch(/^Full log: \/var\/log\/platform-migrate-host-\d{8}-\d{6}\.log$/);
    expect(await waitMirrored(jobId, lines.length)).toEqual(lines);
  });
});

// The installer's own stack (deploy/docker-compose.dev.yml) for crash injection: as
// startInstaller (self-update-rig.ts) makes it, except that the backend's engine socket comes from
// the engine gate (test/helpers/e2e/engine-gate.ts) instead of the host's, so that a test can hold the
// backend's engine requests. The same change is in the published file, so a backend recreated by
// the helper keeps the gate. The helper itself mounts the host's real socket (DOCKER_SOCKET keeps
// its default inside the backend).
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, rmdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { ROOT } from '../shared/process.ts';
import { docker, freePort, removeWorkDirReaders, run } from './rig.ts';
import { removeLeftovers } from './stack.ts';
import { HELPER, STAGING_ROOT, type Images } from './self-update-rig.ts';
import { firstAdminToken } from './first-admin.ts';
import { eventually } from '../shared/eventually.ts';

const SOCKET_MOUNT = '- /var/run/docker.sock:/var/run/docker.sock';

export interface CrashInstaller {
  project: string;
  workDir: string;
  composeFile: string;
  baseUrl: string;
  publishedFile: string;
  publishedText: string;
  databaseUrl(): Promise<string>;
  token(): string;
  login(): Promise<string>;
  call(method: string, p: string, body?: unknown, timeoutMs?: number): Promise<{ status: number; body: unknown }>;
  /** `docker kill -s KILL installer-backend`. */
  kill(): Promise<void>;
  /** The killed backend container started again (unless its restart policy did), answering, signed in. */
  restart(): Promise<void>;
  waitHealthy(timeoutMs?: number): Promise<void>;
  down(): Promise<void>;
}

/** The compose file with the backend's engine socket taken from CRASH_ENGINE_SOCKET. */
function gatedCompose(text: string): string {
  if (!text.includes(SOCKET_MOUNT)) throw new Error(`the compose file no longer mounts the engine socket as "${SOCKET_MOUNT}": update crash-stack.ts`);
  return text.replace(SOCKET_MOUNT, '- ${CRASH_ENGINE_SOCKET:?CRASH_ENGINE_SOCKET must be set}:/var/run/docker.sock');
}

export async function startCrashInstaller(images: Images, tag: string, gateSocket: string): Promise<CrashInstaller> {
  await removeLeftovers();
  chmodSync(gateSocket, 0o666);
  const project = `installer-crash-${randomBytes(3).toString('hex')}`;
  const workDir = mkdtempSync(path.join(tmpdir(), 'installer-crash-'));
  const composeFile = path.join(workDir, 'docker-compose.dev.yml');
  const original = readFileSync(path.join(ROOT, 'deploy/docker-compose.dev.yml'), 'utf8');
  writeFileSync(composeFile, gatedCompose(original));
  const publishedDir = path.join(STAGING_ROOT, `published-${images.namespace}`);
  mkdirSync(publishedDir, { recursive: true });
  const publishedFile = path.join(publishedDir, 'docker-compose.yml');
  const publishedText = `${gatedCompose(original)}# published for ${images.namespace}\n`;
  writeFileSync(publishedFile, publishedText);
  const port = await freePort();
  let httpsPort = await freePort();
  while (httpsPort === port) httpsPort = await freePort();
  const databasePassword = randomBytes(12).toString('hex');
  const env: Record<string, string> = {
    TZ: 'UTC',
    COMPOSE_PROJECT_NAME: project,
    VERSION: tag,
    INSTALLER_REGISTRY: images.registry,
    POSTGRES_IMAGE: 'installer-rig/postgres:15',
    DATABASE_PASSWORD: databasePassword,
    INSTALLER_BIND: '127.0.0.1',
    // The published HTTPS port is not used here: the tests speak plain HTTP on loopback.
    INSTALLER_PORT: String(httpsPort),
    INSTALLER_HTTP_PORT: String(port),
    INSTALLER_WORK_DIR: workDir,
    STAGING_ROOT,
    PUBLISHED_COMPOSE_URL: `file://${publishedFile}`,
    SELF_UPDATE_WAIT_TIMEOUT_SECONDS: '90',
    CRASH_ENGINE_SOCKET: gateSocket,
  };
  writeFileSync(path.join(workDir, '.env'), Object.entries(env).map(([k, v]) => `${k}=${v}`).join('\n') + '\n');
  const compose = (args: string[]) => docker(['compose', '-p', project, '-f', composeFile, ...args], { cwd: workDir, timeoutMs: 10 * 60_000 });
  const baseUrl = `http://127.0.0.1:${port}`;
  let token = '';
  const removeStaging = () => {
    rmSync(publishedDir, { recursive: true, force: true });
    rmSync(path.join(STAGING_ROOT, 'self-update'), { recursive: true, force: true });
    try {
      rmdirSync(STAGING_ROOT);
    } catch {
      /* not empty or gone */
    }
  };
  const down = async () => {
    await run('docker', ['compose', '-p', project, '-f', composeFile, 'down', '-v', '--remove-orphans', '-t', '5'], { cwd: workDir });
    await run('docker', ['rm', '-f', HELPER]);
    await removeWorkDirReaders(workDir); // a backend killed by the test leaves its reader
    removeStaging();
    rmSync(workDir, { recursive: true, force: true });
  };
  const i: CrashInstaller = {
    project,
    workDir,
    composeFile,
    baseUrl,
    publishedFile,
    publishedText,
    async databaseUrl() {
      const ip = (await docker(['inspect', '-f', '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}', 'installer-postgres'])).trim().split(/\s+/)[0];
      return `postgres://installer:${databasePassword}@${ip}:5432/installer`;
    },
    token: () => token,
    async login() {
      const password = (await docker(['exec', 'installer-backend', 'cat', '/var/lib/installer/secrets/initial-admin-password'])).trim();
      token = await firstAdminToken(baseUrl, password);
      return token;
    },
    async call(method, p, body, timeoutMs = 30_000) {
      const res = await fetch(`${baseUrl}${p}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(timeoutMs),
      });
      const text = await res.text();
      try {
        return { status: res.status, body: JSON.parse(text) as unknown };
      } catch {
        return { status: res.status, body: text };
      }
    },
    async waitHealthy(timeoutMs = 90_000) {
      await eventually(() => fetch(`${baseUrl}/api/health`, { signal: AbortSignal.timeout(2_000) }).then((r) => r.ok).catch(() => false), 'the backend to answer', timeoutMs, 200).catch(async (err: Error) => {
        const logs = await run('docker', ['logs', '--tail', '60', 'installer-backend']);
        throw new Error(`${err.message}\n${logs.stdout}${logs.stderr}`);
      });
    },
    async kill() {
      await docker(['kill', '-s', 'KILL', 'installer-backend']);
    },
    async restart() {
      // Its restart policy may bring it back by itself; otherwise start it as an operator would.
      await new Promise((r) => setTimeout(r, 300));
      const state = (await docker(['inspect', '-f', '{{.State.Status}}', 'installer-backend'])).trim();
      if (state !== 'running' && state !== 'restarting') await docker(['start', 'installer-backend']);
      await i.waitHealthy();
      await i.login();
    },
    down,
  };
  try {
    await compose(['up', '-d', '--wait', '--wait-timeout', '180', 'backend']);
  } catch (err) {
    const logs = await run('docker', ['compose', '-p', project, '-f', composeFile, 'logs', '--no-color', '--tail', '80'], { cwd: workDir });
    await down();
    throw new Error(`${(err as Error).message}\n--- stack logs ---\n${logs.stdout}${logs.stderr}`);
  }
  await i.login();
  return i;
}

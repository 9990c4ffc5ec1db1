// Runs the installer's own compose stack (deploy/docker-compose*.yml) on the rig, with images
// built here and the rig's Postgres image standing in for the public one.
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { ROOT } from '../shared/process.ts';
import { docker, freePort, removeWorkDirReaders, run, REGISTRY } from './rig.ts';
import { firstAdminToken } from './first-admin.ts';
import { applyEnvChanges } from '../../../src/adapters/platform-files.ts';

export { freePort };

export const FIXED_CONTAINERS = ['installer-backend', 'installer-backend-init', 'installer-postgres', 'installer-self-updater'];

export interface Stack {
  project: string;
  workDir: string;
  composeFile: string;
  /** PLATFORM_DIR: on the host in the work dir, bind-mounted into the backend at the same path. */
  platformDir: string;
  /** Plain HTTP on the host's loopback (INSTALLER_HTTP_PORT). */
  baseUrl: string;
  /** The published HTTPS port (INSTALLER_PORT), e.g. `https://127.0.0.1:<port>`. */
  httpsUrl: string;
  databasePassword: string;
  compose(args: string[], env?: Record<string, string>): Promise<string>;
  adminPassword(): Promise<string>;
  login(username: string, password: string): Promise<string>;
  down(): Promise<void>;
}

/** The project name deploy/docker-compose*.yml give themselves (`name:`), as an operator's stack has it. */
export const FILE_PROJECT = 'installer';

/**
 * Removes what an earlier, interrupted run left: containers with the installer's fixed names, and
 * the volumes of the file's own project. A stack deployed as an operator does (no -p) reuses those
 * volumes by name, and a database volume another run initialised with its own password refuses the
 * next one's ("password authentication failed").
 */
export async function removeLeftovers(): Promise<void> {
  await run('docker', ['rm', '-f', ...FIXED_CONTAINERS]);
  const volumes = await docker(['volume', 'ls', '-q', '--filter', `label=com.docker.compose.project=${FILE_PROJECT}`]);
  const names = volumes.split('\n').filter(Boolean);
  if (names.length > 0) await docker(['volume', 'rm', '-f', ...names]);
}

export async function startStack(opts: { version: string; channel?: 'dev' | 'prod'; env?: Record<string, string> }): Promise<Stack> {
  await removeLeftovers();
  const channel = opts.channel ?? 'dev';
  const project = `installer-e2e-${randomBytes(3).toString('hex')}`;
  const workDir = mkdtempSync(path.join(tmpdir(), 'installer-stack-'));
  const file = channel === 'dev' ? 'docker-compose.dev.yml' : 'docker-compose.yml';
  const composeFile = path.join(workDir, file);
  copyFileSync(path.join(ROOT, 'deploy', file), composeFile);
  const port = await freePort();
  let httpsPort = await freePort();
  while (httpsPort === port) httpsPort = await freePort();
  const databasePassword = randomBytes(12).toString('hex');
  const staging = path.join(workDir, 'staging');
  mkdirSync(staging);
  // The platform's directory is bind-mounted into the backend: keep it in the work dir, not /opt.
  const platformDir = path.join(workDir, 'platform');
  mkdirSync(platformDir);
  const env: Record<string, string> = {
    TZ: 'UTC',
    // The backend's INSTALLER_PROJECT: the self-update helper switches this project.
    COMPOSE_PROJECT_NAME: project,
    VERSION: opts.version,
    INSTALLER_REGISTRY: REGISTRY,
    POSTGRES_IMAGE: 'installer-rig/postgres:15',
    DATABASE_PASSWORD: databasePassword,
    INSTALLER_BIND: '127.0.0.1',
    INSTALLER_PORT: String(httpsPort),
    INSTALLER_HTTP_PORT: String(port),
    INSTALLER_WORK_DIR: workDir,
    STAGING_ROOT: staging,
    PLATFORM_DIR: platformDir,
    ...opts.env,
  };
  writeFileSync(path.join(workDir, '.env'), Object.entries(env).map(([k, v]) => `${k}=${v}`).join('\n') + '\n');
  const compose = (args: string[], extra: Record<string, string> = {}) =>
    docker(['compose', '-p', project, '-f', composeFile, ...args], { cwd: workDir, env: extra, timeoutMs: 10 * 60_000 });
  const baseUrl = `http://127.0.0.1:${port}`;
  const stack: Stack = {
    project,
    workDir,
    composeFile,
    platformDir,
    baseUrl,
    httpsUrl: `https://127.0.0.1:${httpsPort}`,
    databasePassword,
    compose,
    async adminPassword() {
      return (await docker(['exec', 'installer-backend', 'cat', '/var/lib/installer/secrets/initial-admin-password'])).trim();
    },
    async login(username, password) {
      // The generated admin chooses its password at first sign-in (test/helpers/e2e/first-admin.ts).
      if (username === 'admin') return firstAdminToken(baseUrl, password);
      const res = await fetch(`${baseUrl}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password }) });
      if (!res.ok) throw new Error(`login failed: ${res.status} ${await res.text()}`);
      return ((await res.json()) as { token: string }).token;
    },
    async down() {
      await run('docker', ['compose', '-p', project, '-f', composeFile, 'down', '-v', '--remove-orphans', '-t', '5'], { cwd: workDir });
      await removeWorkDirReaders(workDir); // a backend killed past the stop timeout leaves its reader
    },
  };
  try {
    await compose(['up', '-d', '--wait', '--wait-timeout', '180', 'backend']);
  } catch (err) {
    const logs = await run('docker', ['compose', '-p', project, '-f', composeFile, 'logs', '--no-color', '--tail', '80'], { cwd: workDir });
    await stack.down();
    throw new Error(`${(err as Error).message}\n--- stack logs ---\n${logs.stdout}${logs.stderr}`);
  }
  return stack;
}

export interface DocumentedStack {
  workDir: string;
  baseUrl: string;
  /** `docker compose <args>` run in the work dir, as an operator types it (no -p, no -f). */
  compose(args: string[]): Promise<string>;
  down(): Promise<void>;
}

/**
 * Deploys the production stack by the steps of docs/deploy.md, literally: the compose file and a
 * .env made from deploy/.env.example in a work dir, the values the page says must be set, then
 * `docker compose up -d --wait` there. The rig adds only what this machine needs: its registry,
 * its Postgres image (no public registry here), and a port and directories of its own.
 */
export async function deployAsDocumented(opts: { mustSet: (workDir: string) => Record<string, string>; upCommand: string[] }): Promise<DocumentedStack> {
  await removeLeftovers();
  const workDir = mkdtempSync(path.join(tmpdir(), 'installer-deploy-'));
  copyFileSync(path.join(ROOT, 'deploy/docker-compose.yml'), path.join(workDir, 'docker-compose.yml'));
  const port = await freePort();
  // The published port speaks HTTPS with a self-signed certificate; the test talks plain HTTP on loopback.
  const httpPort = await freePort();
  const rig: Record<string, string> = {
    POSTGRES_IMAGE: 'installer-rig/postgres:15',
    INSTALLER_BIND: '127.0.0.1',
    INSTALLER_PORT: String(port),
    INSTALLER_HTTP_PORT: String(httpPort),
    STAGING_ROOT: path.join(workDir, 'staging'),
    PLATFORM_DIR: path.join(workDir, 'platform'),
  };
  const example = readFileSync(path.join(ROOT, 'deploy/.env.example'), 'utf8');
  writeFileSync(path.join(workDir, '.env'), applyEnvChanges(example, { ...opts.mustSet(workDir), ...rig }, []), { mode: 0o600 });
  const compose = (args: string[]) => docker(['compose', ...args], { cwd: workDir, timeoutMs: 10 * 60_000 });
  const stack: DocumentedStack = {
    workDir,
    baseUrl: `http://127.0.0.1:${httpPort}`,
    compose,
    async down() {
      await run('docker', ['compose', 'down', '-v', '--remove-orphans', '-t', '5'], { cwd: workDir });
    },
  };
  try {
    if (opts.upCommand[0] !== 'docker' || opts.upCommand[1] !== 'compose') throw new Error(`not a docker compose command: ${opts.upCommand.join(' ')}`);
    await compose(opts.upCommand.slice(2));
  } catch (err) {
    const logs = await run('docker', ['compose', 'logs', '--no-color', '--tail', '80'], { cwd: workDir });
    await stack.down();
    throw new Error(`${(err as Error).message}\n--- stack logs ---\n${logs.stdout}${logs.stderr}`);
  }
  return stack;
}

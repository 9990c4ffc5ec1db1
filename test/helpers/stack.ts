// Runs the installer's own compose stack (deploy/docker-compose*.yml) on the rig, with images
// built here and the rig's Postgres image standing in for the public one.
import { copyFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { ROOT } from './process.ts';
import { docker, freePort, run, REGISTRY } from './rig.ts';

export { freePort };

export const FIXED_CONTAINERS = ['installer-backend', 'installer-backend-init', 'installer-postgres', 'installer-self-updater'];

export interface Stack {
  project: string;
  workDir: string;
  composeFile: string;
  baseUrl: string;
  databasePassword: string;
  compose(args: string[], env?: Record<string, string>): Promise<string>;
  adminPassword(): Promise<string>;
  login(username: string, password: string): Promise<string>;
  down(): Promise<void>;
}

/** Removes containers with the installer's fixed names that an earlier, interrupted run left. */
export async function removeLeftovers(): Promise<void> {
  await run('docker', ['rm', '-f', ...FIXED_CONTAINERS]);
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
  const databasePassword = randomBytes(12).toString('hex');
  const staging = path.join(workDir, 'staging');
  mkdirSync(staging);
  const env: Record<string, string> = {
    TZ: 'UTC',
    // The backend's INSTALLER_PROJECT: the self-update helper switches this project.
    COMPOSE_PROJECT_NAME: project,
    VERSION: opts.version,
    INSTALLER_REGISTRY: REGISTRY,
    POSTGRES_IMAGE: 'installer-rig/postgres:15',
    DATABASE_PASSWORD: databasePassword,
    INSTALLER_BIND: '127.0.0.1',
    INSTALLER_PORT: String(port),
    INSTALLER_WORK_DIR: workDir,
    STAGING_ROOT: staging,
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
    baseUrl,
    databasePassword,
    compose,
    async adminPassword() {
      return (await docker(['exec', 'installer-backend', 'cat', '/var/lib/installer/secrets/initial-admin-password'])).trim();
    },
    async login(username, password) {
      const res = await fetch(`${baseUrl}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password }) });
      if (!res.ok) throw new Error(`login failed: ${res.status} ${await res.text()}`);
      return ((await res.json()) as { token: string }).token;
    },
    async down() {
      await run('docker', ['compose', '-p', project, '-f', composeFile, 'down', '-v', '--remove-orphans', '-t', '5'], { cwd: workDir });
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

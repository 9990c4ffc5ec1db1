// The packaged installer stack (deploy/docker-compose.yml) on the soak's private engine: brought up,
// called through its API, queried in its Postgres, hurt (its backend's node process killed) and
// taken down.
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort, run } from '../../test/helpers/e2e/rig.ts';
import type { Images } from '../../test/helpers/e2e/self-update-rig.ts';
import { firstAdminToken } from '../../test/helpers/e2e/first-admin.ts';
import { ROOT } from '../../test/helpers/shared/process.ts';
import type { Engine } from './engine.ts';

export class Stack {
  readonly project = `soak-${randomBytes(3).toString('hex')}`;
  readonly workDir = mkdtempSync(path.join(tmpdir(), 'soak-stack-'));
  readonly composeFile = path.join(this.workDir, 'docker-compose.yml');
  baseUrl = '';
  token = '';

  constructor(private readonly engine: Engine, private readonly images: Images) {}

  compose(args: string[], timeoutMs = 10 * 60_000): Promise<string> {
    return this.engine.docker(['compose', '-p', this.project, '-f', this.composeFile, ...args], { cwd: this.workDir, timeoutMs });
  }

  async up(tag: string): Promise<void> {
    copyFileSync(path.join(ROOT, 'deploy/docker-compose.yml'), this.composeFile);
    const staging = path.join(this.workDir, 'staging');
    const published = path.join(staging, 'published');
    mkdirSync(published, { recursive: true });
    // The channel's compose file as a self-update fetches it (the file the stack runs).
    writeFileSync(path.join(published, 'docker-compose.yml'), readFileSync(this.composeFile, 'utf8'));
    const platformDir = path.join(this.workDir, 'platform');
    cpSync(path.join(ROOT, 'deploy/rig/demo-platform'), platformDir, { recursive: true });
    writeFileSync(path.join(platformDir, '.env'), `TZ=UTC\nWEB_PORT=${await freePort()}\n`);
    const port = await freePort();
    let httpsPort = await freePort();
    while (httpsPort === port) httpsPort = await freePort();
    const env: Record<string, string> = {
      TZ: 'UTC',
      COMPOSE_PROJECT_NAME: this.project,
      VERSION: tag,
      INSTALLER_REGISTRY: this.images.registry,
      POSTGRES_IMAGE: 'installer-rig/postgres:15',
      DATABASE_PASSWORD: randomBytes(12).toString('hex'),
      INSTALLER_BIND: '127.0.0.1',
      INSTALLER_PORT: String(httpsPort),
      INSTALLER_HTTP_PORT: String(port),
      INSTALLER_WORK_DIR: this.workDir,
      STAGING_ROOT: staging,
      PLATFORM_DIR: platformDir,
      PUBLISHED_COMPOSE_URL: `file://${path.join(published, 'docker-compose.yml')}`,
      // Builds are published and updated to at once: no observation of the channel is old enough.
      OBSERVED_CHANNEL_MAX_AGE_SECONDS: '0',
    };
    writeFileSync(path.join(this.workDir, '.env'), Object.entries(env).map(([k, v]) => `${k}=${v}\n`).join(''), { mode: 0o600 });
    this.baseUrl = `http://127.0.0.1:${port}`;
    await this.compose(['up', '-d', '--wait', '--wait-timeout', '180', 'backend']);
    const generated = (await this.engine.docker(['exec', 'installer-backend', 'cat', '/var/lib/installer/secrets/initial-admin-password'])).trim();
    this.token = await firstAdminToken(this.baseUrl, generated);
  }

  async call(method: string, p: string, body?: unknown, timeoutMs = 60_000): Promise<{ status: number; body: Record<string, unknown> }> {
    try {
      const res = await fetch(`${this.baseUrl}${p}`, {
        method,
        headers: { authorization: `Bearer ${this.token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(timeoutMs),
      });
      const text = await res.text();
      let parsed: Record<string, unknown> = {};
      try {
        parsed = JSON.parse(text) as Record<string, unknown>;
      } catch {
        parsed = { text };
      }
      return { status: res.status, body: parsed };
    } catch (err) {
      return { status: 0, body: { error: (err as Error).message } };
    }
  }

  async healthy(): Promise<boolean> {
    const r = await this.call('GET', '/api/health', undefined, 3_000);
    return r.status === 200;
  }

  /** Rows of a query, read with psql in the stack's Postgres container. */
  async query<T>(sql: string): Promise<T[]> {
    const text = await this.engine.docker(['exec', 'installer-postgres', 'psql', '-U', 'installer', '-d', 'installer', '-At', '-c', `select coalesce(json_agg(q), '[]') from (${sql}) q`]);
    return JSON.parse(text.trim()) as T[];
  }

  /** SIGKILL to the backend's node process (the container's init then exits and the engine restarts it). */
  async killBackend(): Promise<boolean> {
    const r = await run('docker', ['-H', this.engine.host, 'inspect', '--format', '{{.State.Pid}}', 'installer-backend']);
    const init = Number(r.stdout.trim());
    if (r.code !== 0 || !init) return false;
    let children: number[] = [];
    try {
      children = readFileSync(`/proc/${init}/task/${init}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
    } catch {
      return false;
    }
    let killed = false;
    for (const pid of children) {
      try {
        if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() !== 'node') continue;
        process.kill(pid, 'SIGKILL');
        killed = true;
      } catch {
        /* already gone */
      }
    }
    return killed;
  }

  async down(): Promise<void> {
    await run('docker', ['-H', this.engine.host, 'compose', '-p', this.project, '-f', this.composeFile, 'down', '-v', '--remove-orphans', '-t', '2'], { cwd: this.workDir, timeoutMs: 120_000 });
    await run('docker', ['-H', this.engine.host, 'rm', '-f', 'installer-self-updater']);
    await run('docker', ['-H', this.engine.host, 'compose', '-p', 'platform', '-f', path.join(this.workDir, 'platform/docker-compose.yml'), 'down', '-v', '-t', '1'], { cwd: path.join(this.workDir, 'platform'), timeoutMs: 120_000 });
    rmSync(this.workDir, { recursive: true, force: true });
  }
}

// Self-update API tests: the real app, controller and Postgres, with the engine and host held in
// memory (tags, registry, staged file, helper), so that every preflight step can be made to fail
// and what it changed can be compared before and after.
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import type { ReconcileOptions, Wired } from '../../../src/wiring.ts';
import type { ControllerGroup } from '../../../controllers/index.ts';
import type { Settings } from '../../../src/config.ts';
import type { RuntimePort, VersionInfo } from '../../../src/contracts/ports.ts';
import type { SelfUpdateEngine } from '../../../src/adapters/self-update.ts';
import type { HelperExit, HelperSpec } from '../../../src/adapters/self-update-helper.ts';
import type { BackupResult } from '../../../src/adapters/database-backup.ts';
import type { BackupRoom, BuildDeclaration } from '../../../src/contracts/preflight-report.ts';
import type { TestDatabase } from '../shared/db.ts';
import { expect } from 'vitest';
import { startTestApp, TEST_SECRETS } from './app.ts';
import type { Role } from '../../../src/db/schema.ts';

export const REPO = 'registry.test/installer';

/** The newest schema migration of this checkout: what a migrated database is at (`preUpdateMigration`). */
export const LATEST_MIGRATION = readdirSync(fileURLToPath(new URL('../../../migrations/', import.meta.url)))
  .filter((f) => /^\d{4}_[\w-]+\.ts$/.test(f))
  .sort()
  .at(-1)!
  .replace(/\.ts$/, '');

/** The body of GET /api/system/self-update-check, as the end-to-end tests read it. */
export interface SelfUpdateCheck {
  updateAvailable: boolean;
  currentDigest: string | null;
  remoteDigest: string | null;
  composeChanged: boolean | null;
  error?: string;
  warning?: string;
  lastUpdate: { status: string | null; detail: string | null; at: string | null; targetDigest: string | null; jobId?: string | null };
  /** The remote build's signature (docs/adr/0053-signed-builds.md). */
  signature: { policy: 'off' | 'warn' | 'require'; result: string | null; detail: string; keyId?: string; refused: boolean };
  /** When the observation of the channel the answer comes from began. */
  observedAt: string | null;
  ageMs: number | null;
}

export class FakeRuntime implements RuntimePort {
  info: VersionInfo = { inContainer: true, image: `${REPO}:dev-41`, tag: 'dev-41', digest: 'sha256:old', imageId: 'img-old', containerId: 'c-backend' };
  async version(): Promise<VersionInfo> {
    return { ...this.info };
  }
}

interface Helper {
  id: string;
  spec: HelperSpec;
  running: boolean;
  exit: HelperExit | null;
  finish: (exit: HelperExit) => void;
}

/** The engine, registry and host files of one installer, in memory. */
export class FakeEngine implements SelfUpdateEngine {
  /** Registry: reference → digest. */
  registry = new Map<string, string>([[`${REPO}:dev-latest`, 'sha256:new']]);
  registryDown = false;
  /** Digest → image id, for what a pull by digest brings in. */
  pullable = new Map<string, string>([['sha256:new', 'img-new'], ['sha256:old', 'img-old']]);
  /** Local tags: reference → image id. */
  tags = new Map<string, string>([[`${REPO}:dev-41`, 'img-old'], [`${REPO}:rollback`, 'img-older'], [`${REPO}:dev-latest`, 'img-stale']]);
  staged: string | null = 'services:\n  staged-before: {}\n';
  local: string | Error = 'services:\n  backend: {}\n';
  published: string | Error = 'services:\n  backend: {}\n  # published\n';
  own: { project: string | null; service: string | null } | null = { project: 'installer', service: 'backend' };
  helpers: Helper[] = [];
  /** Method names that throw. */
  failing = new Set<string>();
  /** Runs inside remoteDigest (to make something happen while a request is in preflight). */
  onResolve: (() => Promise<void>) | null = null;
  /** Delay of the pull, to keep an update in preflight for a while. */
  pullDelayMs = 0;
  calls: string[] = [];

  private check(name: string): void {
    this.calls.push(name);
    if (this.failing.has(name)) throw new Error(`${name} failed (injected)`);
  }

  state() {
    return { tags: new Map(this.tags), staged: this.staged, helpers: this.helpers.map((h) => h.id) };
  }

  async remoteDigest(reference: string): Promise<string> {
    this.check('remoteDigest');
    if (this.onResolve) await this.onResolve();
    if (this.registryDown) throw new Error(`cannot resolve ${reference} in the registry: dial tcp 127.0.0.1:5999: connect: connection refused`);
    const d = this.registry.get(reference);
    // As the adapter words the registry's "manifest unknown" (code registry-not-found).
    if (!d) throw Object.assign(new Error(`tag ${reference.split(':').pop()} does not exist in repository ${reference.slice(0, reference.lastIndexOf(':'))}`), { code: 'registry-not-found' });
    return d;
  }
  async localComposeFile(): Promise<string> {
    this.check('localComposeFile');
    if (this.local instanceof Error) throw this.local;
    return this.local;
  }
  /** The channel and digest (or image id) the published file was last asked for. */
  publishedFor: { channel: string | null; digest?: string | null; imageId?: string }[] = [];
  async publishedComposeFile(channel: string | null, newestDigest: string | null): Promise<string> {
    this.check('publishedComposeFile');
    this.publishedFor.push({ channel, digest: newestDigest });
    if (this.published instanceof Error) throw this.published;
    return this.published;
  }
  async publishedComposeOf(channel: string, imageId: string): Promise<string> {
    this.check('publishedComposeFile');
    this.publishedFor.push({ channel, imageId });
    if (this.published instanceof Error) throw this.published;
    return this.published;
  }
  /** What each local image declares (by reference); a reference not here is not local. Not counted in `calls`: the observer reads it at every check. */
  declarations = new Map<string, BuildDeclaration>();
  async buildDeclaration(reference: string): Promise<BuildDeclaration | null> {
    return this.declarations.get(reference) ?? null;
  }
  /** Where the pre-switch backup would go; not counted in `calls` either. */
  room: BackupRoom | Error = { free: 8 * 1024 ** 3, estimate: { bytes: 2 * 1024 ** 2, basis: "the database's size, there being no backup yet" } };
  async backupRoom(): Promise<BackupRoom> {
    if (this.room instanceof Error) throw this.room;
    return this.room;
  }
  async ownCompose() {
    this.check('ownCompose');
    return this.own;
  }
  /** Database backups taken, by name, and the `keep` and the alarmed backups each was asked to keep. */
  backups: { file: string; fromDigest: string | null; keep: number; alarmed: readonly string[] }[] = [];
  async backupDatabase(fromDigest: string | null, keep: number, alarmed: readonly string[] = []): Promise<BackupResult> {
    this.check('backupDatabase');
    const file = `installer-20260101T000000${String(this.backups.length).padStart(3, '0')}Z-${(fromDigest ?? 'unknown').replace(':', '-')}.dump`;
    this.backups.push({ file, fromDigest, keep, alarmed });
    return { file, removed: [], pruneProblem: null };
  }
  async pullByDigest(_repository: string, digest: string): Promise<string> {
    this.check('pullByDigest');
    if (this.pullDelayMs) await new Promise((r) => setTimeout(r, this.pullDelayMs));
    const id = this.pullable.get(digest);
    if (!id) throw new Error(`manifest unknown: ${digest}`);
    return id;
  }
  async imageIdOf(reference: string): Promise<string | null> {
    this.check('imageIdOf');
    return this.tags.get(reference) ?? null;
  }
  async tag(imageId: string, repository: string, tag: string): Promise<void> {
    this.check(`tag:${tag}`);
    this.tags.set(`${repository}:${tag}`, imageId);
  }
  async untag(reference: string): Promise<void> {
    this.check('untag');
    this.tags.delete(reference);
  }
  async readStaged(): Promise<string | null> {
    this.check('readStaged');
    return this.staged;
  }
  async writeStaged(content: string): Promise<void> {
    this.check('writeStaged');
    this.staged = content;
  }
  async removeStaged(): Promise<void> {
    this.check('removeStaged');
    this.staged = null;
  }
  async removeHelper(): Promise<boolean> {
    this.check('removeHelper');
    const before = this.helpers.length;
    this.helpers = this.helpers.filter((h) => h.spec.name !== 'installer-self-updater');
    return this.helpers.length < before;
  }
  /** Helpers killed past their deadline, by id. */
  stopped: (string | null)[] = [];
  async stopHelper(id: string | null): Promise<void> {
    this.check('stopHelper');
    this.stopped.push(id);
    const h = this.helpers.find((x) => x.id === id);
    if (h?.running) h.finish({ state: 'exited', exitCode: 137, status: null, switchFailure: null, rollbackFailure: null });
  }
  async spawnHelper(spec: HelperSpec): Promise<string> {
    this.check('spawnHelper');
    let finish!: (e: HelperExit) => void;
    const h: Helper = { id: `helper-${this.helpers.length + 1}`, spec, running: true, exit: null, finish: (e) => finish(e) };
    const exited = new Promise<HelperExit>((r) => (finish = r));
    void exited.then((e) => {
      h.running = false;
      h.exit = e;
    });
    this.exits.set(h.id, exited);
    this.helpers.push(h);
    return h.id;
  }
  private exits = new Map<string, Promise<HelperExit>>();
  async helperOf(requestId: string): Promise<{ id: string; running: boolean } | null> {
    const h = this.helpers.find((x) => x.spec.labels['io.installer.self-update.request'] === requestId);
    return h ? { id: h.id, running: h.running } : null;
  }
  /** A helper left by an earlier backend (boot tests): already exited. */
  addExitedHelper(id: string, exit: HelperExit, requestId = 'earlier'): void {
    const spec: HelperSpec = { name: 'installer-self-updater', image: `${REPO}:dev-latest`, cmd: [], binds: [], env: [], labels: { 'io.installer.self-update.request': requestId } };
    this.helpers.push({ id, spec, running: false, exit, finish: () => {} });
    this.exits.set(id, Promise.resolve(exit));
  }
  /** What each helper printed, by container id (helperOutput). */
  outputs = new Map<string, string[]>();
  async helperOutput(id: string | null): Promise<string[]> {
    this.check('helperOutput');
    const out = id ? this.outputs.get(id) : undefined;
    if (!out) throw new Error(`no such container: ${id ?? 'installer-self-updater'}`);
    return [...out];
  }
  async waitHelper(id: string | null, opts: { deadline: Date | null; signal: AbortSignal }): Promise<HelperExit> {
    this.check('waitHelper');
    const exited = id ? this.exits.get(id) : undefined;
    if (!exited) return { state: 'missing', exitCode: null, status: null, switchFailure: null, rollbackFailure: null };
    return new Promise<HelperExit>((resolve, reject) => {
      opts.signal.addEventListener('abort', () => reject(new Error('stopped waiting for the helper')), { once: true });
      // As the engine's wait: still running at the deadline is `timed-out`.
      const timer = opts.deadline ? setTimeout(() => resolve({ state: 'timed-out', exitCode: null, status: null, switchFailure: null, rollbackFailure: null }), Math.max(0, opts.deadline.getTime() - Date.now())) : undefined;
      void exited.then((e) => {
        clearTimeout(timer);
        resolve(e);
      });
    });
  }
}

/** Forgets every self-update between tests: requests (and their status), audit rows, quarantines. */
export async function clearSelfUpdates(db: TestDatabase): Promise<void> {
  await db.database.db.deleteFrom('self_update_requests').execute();
  await db.database.db.deleteFrom('deployment_actions').execute();
  await db.database.db.deleteFrom('update_quarantine').execute();
}

export interface SelfUpdateApp {
  app: FastifyInstance;
  wired: Wired;
  db: TestDatabase;
  settings: Settings;
  engine: FakeEngine;
  runtime: FakeRuntime;
  logs: string[];
  token(role: Role): Promise<string>;
  /** Stops the app; the database stays for a following "boot" unless `drop` is set. */
  close(opts?: { drop?: boolean }): Promise<void>;
}

export async function startSelfUpdateApp(
  opts: { db?: TestDatabase; engine?: FakeEngine; runtime?: FakeRuntime; env?: Record<string, string>; controllers?: boolean; groups?: ControllerGroup[]; reconcile?: ReconcileOptions } = {},
): Promise<SelfUpdateApp> {
  const engine = opts.engine ?? new FakeEngine();
  const runtime = opts.runtime ?? new FakeRuntime();
  const t = await startTestApp({
    ...(opts.db ? { db: opts.db } : {}),
    runtime,
    selfUpdateEngine: engine,
    ...(opts.reconcile ? { reconcile: opts.reconcile } : {}),
    env: { OBSERVED_CHANNEL_MAX_AGE_SECONDS: '0', INSTALLER_REGISTRY: 'registry.test', INSTALLER_CHANNEL: 'dev', INSTALLER_WORK_DIR: '/opt/installer', STAGING_ROOT: '/var/tmp/installer', ...opts.env },
    // Only the self-update controller (unless `groups` says otherwise): jobs created by a test stay
    // queued, as the 409 cases need.
    controllers: opts.controllers === false ? false : (wired) => wired.controllers.start(opts.groups ?? ['self-update']),
  });
  return { ...t, engine, runtime };
}

/** The control plane's service token with actor headers, as the self-update tests call with it. */
export const SERVICE_CALLER = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'amy', 'x-actor-email': 'amy@example.com' };

/** POST /api/system/self-update, as the service token by default. */
export function postSelfUpdate(t: SelfUpdateApp, headers: Record<string, string> = SERVICE_CALLER) {
  return t.app.inject({ method: 'POST', url: '/api/system/self-update', headers });
}

/** GET /api/system/self-update-check: its body, after asserting a 200. */
export async function checkSelfUpdate(t: SelfUpdateApp) {
  const res = await t.app.inject({ method: 'GET', url: '/api/system/self-update-check', headers: SERVICE_CALLER });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as Record<string, unknown> & { lastUpdate: Record<string, unknown> };
}

/** The self-update audit rows, oldest first. */
export const selfUpdateAudit = (t: SelfUpdateApp) => t.db.database.db.selectFrom('deployment_actions').selectAll().where('kind', '=', 'self-update').orderBy('id').execute();

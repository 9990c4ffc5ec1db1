// Builds the real app on a real Postgres database with known secrets, for app.inject tests.
import { Writable } from 'node:stream';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../../src/api/app.ts';
import { wire, type ReconcileOptions, type Wired } from '../../../src/wiring.ts';
import type { SelfUpdateEngine } from '../../../src/adapters/self-update.ts';
import { loadSettings, type Settings } from '../../../src/config.ts';
import { createLogger, RecentLines, SecretSet } from '../../../src/logger.ts';
import { hashPassword } from '../../../src/state/users.ts';
import type { ContainerLogsPort, ContainerView, PlatformContainer, RuntimePort, VersionInfo } from '../../../src/contracts/ports.ts';
import { createTestDatabase, type TestDatabase } from '../shared/db.ts';
import type { Role } from '../../../src/db/schema.ts';

export const TEST_SECRETS = {
  JWT_SECRET: 'jwt-secret-0123456789-abcdefghijklmnopqrstuvwxyz',
  ENCRYPTION_KEY: 'encryption-key-0123456789-abcdefghijklmnopqrstu',
  SERVICE_TOKEN: 'service-token-0123456789-abcdefghijklmnopqrstuv',
  DATABASE_PASSWORD: 'database-password-0123456789',
};

export const PASSWORDS: Record<Role, string> = {
  admin: 'admin-password-1',
  operator: 'operator-password-1',
  viewer: 'viewer-password-1',
};

export interface TestApp {
  app: FastifyInstance;
  wired: Wired;
  db: TestDatabase;
  settings: Settings;
  logs: string[];
  token(role: Role): Promise<string>;
  /** Stops the app; drops the database it created unless `drop` is false (a reused one is kept unless `drop` is true). */
  close(opts?: { drop?: boolean }): Promise<void>;
}

const notInContainer: RuntimePort = {
  async version(): Promise<VersionInfo> {
    return { inContainer: false, image: null, tag: null, digest: null, imageId: null, containerId: null, note: 'not running in a container: there is no image to report' };
  },
};


/** A container of a stand-in for the engine's logs, as the observer records containers. */
const observedAs = (c: PlatformContainer): ContainerView => ({ name: c.name, service: c.service, state: c.state, health: null, image: `${c.service}:test`, digest: null, since: null });

export interface TestAppOptions {
  env?: Record<string, string>;
  runtime?: RuntimePort;
  /** Start the controllers too, as the server does; or a function that starts only some of them. */
  controllers?: boolean | ((wired: Wired) => Promise<void>);
  /** An existing database (a later "boot" of the same installer): users are not added again, and close keeps it. */
  db?: TestDatabase;
  /** Replaces the self-update engine adapter (for chart-level tests of the controller). */
  selfUpdateEngine?: SelfUpdateEngine;
  /** Platform container logs; default: the real engine adapter, as the server wires it; null: none (the log routes answer 503). */
  logs?: ContainerLogsPort | null;
  /**
   * The platform's containers the observer sees, when `logs` stands in for the engine: the log
   * routes check names against them (default: the engine's containers of PLATFORM_PROJECT).
   */
  platformContainers?: () => PlatformContainer[];
  /** The logger's level (default `trace`: tests see every line). */
  logLevel?: string;
  /** Start the observer (the writer of observed state the read endpoints answer from) even without the controllers; default true. */
  observer?: boolean;
  /** The runtime's retries and watchdog, and the database the controllers see (faults injected into it). */
  reconcile?: ReconcileOptions;
}

/**
 * Each role's password, hashed once per test process and stored in every fresh database: a hash at
 * today's scrypt cost takes a few hundred milliseconds.
 */
const roleHashes = new Map<Role, Promise<string>>();
const hashOf = (role: Role): Promise<string> => {
  let h = roleHashes.get(role);
  if (!h) roleHashes.set(role, (h = hashPassword(PASSWORDS[role])));
  return h;
};

export async function startTestApp(opts: TestAppOptions = {}): Promise<TestApp> {
  const fresh = !opts.db;
  const db = opts.db ?? (await createTestDatabase());
  const dataDir = mkdtempSync(path.join(tmpdir(), 'installer-test-'));
  const settings = loadSettings(
    { NODE_ENV: 'test', DATA_DIR: dataDir, DATABASE_URL: db.url, LOG_LEVEL: 'info', ...TEST_SECRETS, ...opts.env },
    { readFile: (file) => readFileSync(file, 'utf8') },
  );
  const logs: string[] = [];
  const destination = new Writable({
    write(chunk, _enc, cb) {
      logs.push(String(chunk));
      cb();
    },
  });
  const secretSet = new SecretSet(Object.values(TEST_SECRETS));
  const recentLogs = new RecentLines();
  const logger = createLogger({ level: opts.logLevel ?? 'trace', secrets: secretSet, destination, recent: recentLogs });
  if (fresh) {
    for (const role of ['admin', 'operator', 'viewer'] as const) {
      await db.database.db.insertInto('users').values({ username: role, password_hash: await hashOf(role), role }).execute();
    }
  }
  const secrets = {
    jwtSecret: TEST_SECRETS.JWT_SECRET,
    encryptionKey: TEST_SECRETS.ENCRYPTION_KEY,
    serviceToken: TEST_SECRETS.SERVICE_TOKEN,
    databasePassword: TEST_SECRETS.DATABASE_PASSWORD,
    serviceTokenFile: path.join(dataDir, 'secrets', 'service-token'),
  };
  const wired = wire(
    { settings, secrets, logger, database: db.database, secretSet, recentLogs },
    {
      runtime: opts.runtime ?? notInContainer,
      ...(opts.platformContainers ? { platformContainers: async () => opts.platformContainers!().map(observedAs) } : {}),
      ...(opts.selfUpdateEngine ? { selfUpdateEngine: opts.selfUpdateEngine } : {}),
      ...(opts.reconcile ? { reconcile: opts.reconcile } : {}),
    },
  );
  const { logs: realLogs, ...deps } = wired.deps;
  const logsPort = opts.logs === undefined ? realLogs : opts.logs;
  const app = await buildApp({ ...deps, ...(logsPort ? { logs: logsPort } : {}) });
  await app.ready();
  if (typeof opts.controllers === 'function') await opts.controllers(wired);
  else if (opts.controllers) await wired.start();
  if (opts.controllers !== true && opts.observer !== false) await wired.observer.start();
  const tokens = new Map<Role, string>();
  return {
    app,
    wired,
    db,
    settings,
    logs,
    async token(role) {
      const cached = tokens.get(role);
      if (cached) return cached;
      // Each role signs in from its own address so that rate-limit tests do not starve it.
      const remoteAddress = `127.0.1.${['admin', 'operator', 'viewer'].indexOf(role) + 1}`;
      const res = await app.inject({ method: 'POST', url: '/api/auth/login', remoteAddress, payload: { username: role, password: PASSWORDS[role] } });
      if (res.statusCode !== 200) throw new Error(`login as ${role} failed: ${res.body}`);
      const t = (res.json() as { token: string }).token;
      tokens.set(role, t);
      return t;
    },
    async close(o = {}) {
      await wired.stop();
      await app.close();
      if (o.drop ?? fresh) await db.drop();
    },
  };
}

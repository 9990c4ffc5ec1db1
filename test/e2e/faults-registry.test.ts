// The self-update check against a registry that is unreachable, silent, or answers garbage. The
// remote digest is resolved through the real engine's distribution endpoint, whose own registry
// timeouts are minutes long; the adapter bounds the call at REGISTRY_TIMEOUT_MS, so the check
// answers 200 within that bound with updateAvailable false, remoteDigest null and `error` naming
// the registry problem (docs/adr/0012-dependency-faults.md). Figures: prefix `faults-registry:`.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { runEntry, type Running } from '../helpers/shared/process.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { createUser } from '../../src/state/users.ts';
import { login, timed } from '../helpers/e2e/http-api.ts';
import {
  badJsonRegistry, closedRegistry, errorStatusRegistry, garbageRegistry, silentRegistry, type FakeRegistry,
} from '../helpers/e2e/fake-registries.ts';
import { REGISTRY_TIMEOUT_MS } from '../../src/adapters/self-update.ts';

/** The check's own work besides the registry (runtime, compose files, database) fits in this. */
const MARGIN_MS = 2_000;

/**
 * One database per backend: observed state is an installer's own, and each backend observes its own
 * registry. Each case stops its backend and drops its database when it ends: a backend holds up to
 * a dozen connections, and five left running with another file's beside them filled the machine
 * Postgres's 100 ("sorry, too many clients already").
 */
const dbs: TestDatabase[] = [];
const procs: Running[] = [];
const registries: FakeRegistry[] = [];

async function release(): Promise<void> {
  for (const p of procs.splice(0)) await p.stop('SIGKILL');
  for (const r of registries.splice(0)) await r.close();
  for (const d of dbs.splice(0)) await d.drop();
}
afterEach(release);
afterAll(release);

async function backend(registry: string): Promise<string> {
  const db = await createTestDatabase();
  dbs.push(db);
  await createUser(db.database.db, { username: 'viewer', password: 'viewer-password-1', role: 'viewer' });
  const proc = runEntry('src/main.ts', {
    DATABASE_URL: db.url,
    DATA_DIR: mkdtempSync(path.join(tmpdir(), 'faults-registry-data-')),
    PORT: '0',
    HOST: '127.0.0.1',
    INSTALLER_REGISTRY: registry,
    INSTALLER_CHANNEL: 'dev',
    INSTALLER_WORK_DIR: mkdtempSync(path.join(tmpdir(), 'faults-registry-work-')),
    LOG_LEVEL: 'info',
  });
  procs.push(proc);
  return proc.url;
}

interface Check {
  updateAvailable: boolean;
  currentDigest: string | null;
  remoteDigest: string | null;
  error?: string;
}

const cases: [string, () => Promise<FakeRegistry>, RegExp][] = [
  ['closed port', closedRegistry, /connection refused/i],
  ['accepts, never answers', silentRegistry, new RegExp(`the registry did not answer within ${REGISTRY_TIMEOUT_MS / 1000} s`)],
  ['HTTP 500, not JSON', errorStatusRegistry, /500|Internal Server Error|unexpected/i],
  ['HTTP 200, not a registry answer', badJsonRegistry, /unmarshalling|invalid character/i],
  ['garbage bytes', garbageRegistry, /malformed HTTP [a-z ]+ \(the answer is not HTTP\)$/],
];

describe('self-update check with a faulty registry', () => {
  it.each(cases)('%s: answers 200 within the bound with error set', async (kind, make, reason) => {
    const registry = await make();
    registries.push(registry);
    const base = await backend(registry.address);
    const token = await login(base, 'viewer', 'viewer-password-1');
    const r = await timed(`${base}/api/system/self-update-check`, { headers: { authorization: `Bearer ${token}` }, timeoutMs: 120_000 });
    const check = r.body as Check;
    console.log(`faults-registry: ${JSON.stringify({ kind, checkMs: r.ms, status: r.status, connections: registry.connections(), error: check.error })}`);
    expect(r.status).toBe(200);
    expect(r.ms).toBeLessThanOrEqual(REGISTRY_TIMEOUT_MS + MARGIN_MS);
    expect(check).toMatchObject({ updateAvailable: false, remoteDigest: null });
    const registryError = (check.error ?? '').split('; ').find((e) => e.startsWith('registry unreachable: '));
    expect(registryError).toBeDefined();
    expect(registryError).toContain(`cannot resolve ${registry.address}/installer:dev-latest in the registry: `);
    expect(registryError).toMatch(reason);
    expect(registryError).toMatch(/^[\x20-\x7e]+$/); // readable, whatever the registry sent
    if (kind !== 'closed port') expect(registry.connections()).toBeGreaterThan(0);
    if (kind === 'accepts, never answers') expect(r.ms).toBeGreaterThanOrEqual(REGISTRY_TIMEOUT_MS - 500);
  });
});

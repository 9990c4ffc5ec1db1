// GET /api/system/self-update/preflight (docs/adr/0054-preflight-report.md): what an update to the
// channel's newest build would do, for a viewer and the service token alike. The real observer runs
// here on a real Postgres, the engine facts are the machine engine's; the registry, the images'
// declarations and the backups volume are in memory.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postSelfUpdate, REPO, SERVICE_CALLER, startSelfUpdateApp, type SelfUpdateApp } from '../helpers/api/self-update.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { executedMigrations } from '../../src/db/migrate.ts';
import { quarantineDigest } from '../../src/state/update-policy.ts';
import type { ReportCheck } from '../../src/contracts/preflight-report.ts';

interface Report {
  channel: string | null;
  current: { digest: string | null; version: string | null };
  target: { digest: string | null; version: string | null };
  signature: { policy: string; result: string | null };
  composeDiff: string | null;
  migrations: { name: string; step: string }[] | null;
  engine: { version: string; apiVersion: string; compose: string | null; requiredApi: string | null } | null;
  disk: { freeBytes: number; backupEstimateBytes: number | null; basis: string } | null;
  quarantine: { outcome: string; since: string } | null;
  policy: { mode: string; decision: string | null };
  checks: ReportCheck[];
  blocked: boolean;
  observedAt: string | null;
}

let t: SelfUpdateApp;
const MiB = 1024 * 1024;

async function report(headers: Record<string, string> = SERVICE_CALLER): Promise<Report> {
  const res = await t.app.inject({ method: 'GET', url: '/api/system/self-update/preflight', headers });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as Report;
}
const level = (r: Report, id: string) => r.checks.find((c) => c.id === id)?.level;
/** The report once the observer has read the engine (its fast keys run beside the channel). */
const withEngine = () => eventually(async () => ((r) => (r.engine ? r : null))(await report()), 'the engine observed', 30_000, 200);

beforeAll(async () => {
  t = await startSelfUpdateApp({ groups: ['self-update', 'observer'] });
});
afterAll(async () => t?.close());

describe('GET /api/system/self-update/preflight', () => {
  it('before the target build is local: digests, the compose diff, and what is not known yet, each with why', async () => {
    const r = await report();
    expect(r).toMatchObject({ channel: 'dev', current: { digest: 'sha256:old', version: null }, target: { digest: 'sha256:new', version: null }, migrations: null, quarantine: null, blocked: false });
    expect(r.composeDiff).toContain('--- docker-compose.yml (installed)');
    expect(r.composeDiff).toContain('+  # published');
    expect(r.checks.map((c) => c.id)).toEqual(['target', 'signature', 'compose', 'migrations', 'engine', 'disk', 'quarantine', 'policy']);
    expect(r.checks.find((c) => c.id === 'migrations')).toEqual({ id: 'migrations', level: 'warn', sentence: "the target's migrations are not known yet: the target build is not local yet: the update check pulls it in the background" });
    expect(r.checks.find((c) => c.id === 'signature')).toMatchObject({ level: 'warn', sentence: 'the target build is not verified: no signing key is configured (SIGNATURE_PUBLIC_KEYS_FILE)' });
    expect(r.disk).toEqual({ freeBytes: 8 * 1024 * MiB, backupEstimateBytes: 2 * MiB, basis: "the database's size, there being no backup yet" });
    // A viewer reads the same report.
    const viewer = await t.app.inject({ method: 'GET', url: '/api/system/self-update/preflight', headers: { authorization: `Bearer ${await t.token('viewer')}` } });
    expect(viewer.statusCode, viewer.body).toBe(200);
  });

  it("once local, the target's versions and the migrations this database lacks, a contract step warned of", async () => {
    const applied = await executedMigrations(t.db.database.db);
    const shipped = [...applied.map((name) => ({ name, contract: false })), { name: '0098_more_columns', contract: false }, { name: '0099_drop_old_column', contract: true }];
    t.engine.declarations.set('img-old', { imageId: 'img-old', labels: { 'org.opencontainers.image.version': '0.1.0+aaaa' }, migrations: applied.map((name) => ({ name, contract: false })) });
    t.engine.declarations.set(`${REPO}@sha256:new`, { imageId: 'img-new', labels: { 'org.opencontainers.image.version': '0.2.0+bbbb', 'io.installer.engine-api-min': '1.41' }, migrations: shipped });
    const r = await withEngine();
    expect(r.current.version).toBe('0.1.0+aaaa');
    expect(r.target.version).toBe('0.2.0+bbbb');
    expect(r.migrations).toEqual([{ name: '0098_more_columns', step: 'expand' }, { name: '0099_drop_old_column', step: 'contract' }]);
    expect(r.checks.find((c) => c.id === 'migrations')).toMatchObject({ level: 'warn', sentence: expect.stringContaining('0099_drop_old_column a contract step') });
    expect(r.engine!.requiredApi).toBe('1.41');
    expect(level(r, 'engine')).toBe('pass');
    expect(r.checks.find((c) => c.id === 'target')!.sentence).toBe('an update from 0.1.0+aaaa (sha256:old…) to 0.2.0+bbbb (sha256:new…)');
    expect(r.blocked).toBe(false);
  });

  it('blocks on an engine below what the target declares and on a backup that does not fit; warns of a quarantine', async () => {
    const target = t.engine.declarations.get(`${REPO}@sha256:new`)!;
    t.engine.declarations.set(`${REPO}@sha256:new`, { ...target, imageId: 'img-new-2', labels: { ...target.labels, 'io.installer.engine-api-min': '9.99' } });
    t.engine.room = { free: 1 * MiB, estimate: { bytes: 3 * MiB, basis: "the last backup's 2.4 MiB times 1.25" } };
    await quarantineDigest(t.db.database.db, { digest: 'sha256:new', outcome: 'rolled-back', detail: 'the new backend never became healthy', requestId: '00000000-0000-4000-8000-000000000001' });
    const r = await withEngine();
    expect(r.blocked).toBe(true);
    expect(r.checks.find((c) => c.id === 'engine')).toMatchObject({ level: 'block', sentence: expect.stringMatching(/^the engine is .+ \(API 1\.\d+\), below the API 9\.99 the target needs: upgrade the engine first/) });
    expect(r.checks.find((c) => c.id === 'disk')).toEqual({ id: 'disk', level: 'block', sentence: "the pre-switch backup needs about 3.0 MiB (the last backup's 2.4 MiB times 1.25) and 1.0 MiB is free: free space or lower SELF_UPDATE_BACKUPS_KEEP" });
    expect(r.quarantine).toMatchObject({ outcome: 'rolled-back' });
    expect(level(r, 'quarantine')).toBe('warn');
    // A start the report blocks is refused with 409 naming each block, before anything changes.
    const before = t.engine.calls.length;
    const start = await postSelfUpdate(t);
    expect(start.statusCode, start.body).toBe(409);
    expect(start.json().message).toMatch(/^self-update not started: checking: the preflight report blocks it: engine: the engine is .+, below the API 9\.99 the target needs: .+; disk: the pre-switch backup needs about 3\.0 MiB .+; nothing was changed$/);
    for (const step of ['backupDatabase', 'pullByDigest', 'tag', 'writeStaged', 'spawnHelper']) expect(t.engine.calls.slice(before), step).not.toContain(step);
    // A backups volume that cannot be read is a warning naming why, never a failed report.
    t.engine.room = new Error('the installer-postgres container is not running');
    expect((await report()).checks.find((c) => c.id === 'disk')).toEqual({ id: 'disk', level: 'warn', sentence: 'the free space for the pre-switch backup is not known: the installer-postgres container is not running' });
  });
});

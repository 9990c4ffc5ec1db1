// The self-update endpoints and controller on a real Postgres, with the engine and host in memory:
// the check, every answer of the start (started, newest, 400, 409, 503), the helper's exact shape,
// the audit row, "nothing changed" after any preflight failure, and one start out of 50 concurrent
// calls. The outcome reconciled on boot: self-update-outcome.test.ts.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { checkSelfUpdate, FakeEngine, FakeRuntime, LATEST_MIGRATION, postSelfUpdate, REPO, selfUpdateAudit, startSelfUpdateApp, type SelfUpdateApp } from '../helpers/api/self-update.ts';
import { createJob, finishJob } from '../../src/state/jobs.ts';
import { currentMigration } from '../../src/db/migrate.ts';
import { listSelfUpdates } from '../../src/state/self-update.ts';
import { INSTANCE_HEADER } from '../../src/contracts/instance.ts';
import { NOT_VERIFIED } from '../../src/contracts/signatures.ts';
import { sha256Of } from '../../src/adapters/compose-source.ts';

const auth = (token: string) => ({ authorization: `Bearer ${token}` });
const post = postSelfUpdate;
const check = checkSelfUpdate;
const audit = selfUpdateAudit;

describe('GET /api/system/self-update-check', () => {
  let t: SelfUpdateApp;
  beforeAll(async () => (t = await startSelfUpdateApp()));
  afterAll(async () => t?.close());

  it('reports both digests, an available update, a changed compose file and no update yet', async () => {
    expect(await check(t)).toEqual({
      updateAvailable: true,
      currentDigest: 'sha256:old',
      remoteDigest: 'sha256:new',
      composeChanged: true,
      lastUpdate: { status: null, detail: null, at: null, targetDigest: null, jobId: null },
      // No key configured: the check says plainly that updates are not verified.
      signature: { policy: 'off', result: null, detail: NOT_VERIFIED, refused: false },
      // Which runtime the platform is on (docs/adr/0056-platform-on-a-swarm.md).
      platformRuntime: 'compose',
      observedAt: expect.any(String),
      ageMs: expect.any(Number),
    });
    expect(t.engine.calls).toContain('remoteDigest');
  });

  it('says no update and no change when the digests and files agree', async () => {
    t.engine.registry.set(`${REPO}:dev-latest`, 'sha256:old');
    t.engine.published = t.engine.local;
    const c = await check(t);
    expect(c).toMatchObject({ updateAvailable: false, remoteDigest: 'sha256:old', composeChanged: false });
    expect(c.error).toBeUndefined();
    t.engine.registry.set(`${REPO}:dev-latest`, 'sha256:new');
  });

  it('registry unreachable: updateAvailable false, remoteDigest null, error set', async () => {
    t.engine.registryDown = true;
    const c = await check(t);
    t.engine.registryDown = false;
    expect(c).toMatchObject({ updateAvailable: false, currentDigest: 'sha256:old', remoteDigest: null });
    expect(c.error).toMatch(/^registry unreachable: .*connection refused/);
  });

  it('a tag that does not exist is reported as such, not as an unreachable registry', async () => {
    t.engine.registry.delete(`${REPO}:dev-latest`);
    const c = await check(t);
    t.engine.registry.set(`${REPO}:dev-latest`, 'sha256:new');
    expect(c).toMatchObject({ updateAvailable: false, remoteDigest: null });
    expect(c.error).toMatch(/^not in the registry: tag dev-latest does not exist in repository registry\.test\/installer/);
    expect(c.error).not.toContain('unreachable');
  });

  it('asks for the published file of the channel and its newest digest', async () => {
    t.engine.publishedFor = [];
    await check(t);
    // Every check observes anew, and an observation queued by the check before may still run after
    // the reset: each ask is for the channel and its newest digest.
    expect(t.engine.publishedFor.length).toBeGreaterThan(0);
    for (const asked of t.engine.publishedFor) expect(asked).toEqual({ channel: 'dev', digest: 'sha256:new' });
  });

  it('local compose file unreadable: composeChanged null, and the error says why', async () => {
    t.engine.local = new Error('cannot read /opt/installer/docker-compose.yml: no such file');
    const c = await check(t);
    t.engine.local = 'services:\n  backend: {}\n';
    expect(c.composeChanged).toBeNull();
    expect(c.updateAvailable).toBe(true);
    expect(c.error).toContain('local compose file unreadable');
  });

  it('needs a token', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/api/system/self-update-check' });
    expect(res.statusCode).toBe(401);
  });
});

describe('POST /api/system/self-update', () => {
  let t: SelfUpdateApp;
  afterEach(async () => t?.close());

  it('starts the update once preflight passed: rollback pinned, file staged, audit row, helper of the exact shape', async () => {
    t = await startSelfUpdateApp({ env: { SELF_UPDATE_WAIT_TIMEOUT_SECONDS: '45' } });
    const res = await post(t);
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({ started: true, targetDigest: 'sha256:new' });
    expect(body.message).toContain('installer-self-updater');
    expect(body.message).toContain('one to three minutes');
    // The answer names the process being replaced, as its health answers do: the overlay's baseline.
    const health = await t.app.inject({ method: 'GET', url: '/api/health' });
    expect(res.headers[INSTANCE_HEADER]).toMatch(/^[0-9a-f-]{36}$/);
    expect(res.headers[INSTANCE_HEADER]).toBe(health.headers[INSTANCE_HEADER]);

    const e = t.engine;
    expect(e.tags.get(`${REPO}:rollback`)).toBe('img-old');
    expect(e.tags.get(`${REPO}:dev-latest`)).toBe('img-new');
    expect(e.staged).toBe(e.published);
    expect(e.calls.indexOf('pullByDigest')).toBeLessThan(e.calls.indexOf('tag:rollback'));
    expect(e.calls.indexOf('removeHelper')).toBeLessThan(e.calls.indexOf('spawnHelper'));
    // The database backup, before anything is changed, named after the build it was taken from.
    expect(e.calls.indexOf('publishedComposeFile')).toBeLessThan(e.calls.indexOf('backupDatabase'));
    expect(e.calls.indexOf('backupDatabase')).toBeLessThan(e.calls.indexOf('tag:rollback'));
    expect(e.backups).toEqual([{ file: expect.stringMatching(/^installer-\d{8}T\d{9}Z-sha256-old\.dump$/), fromDigest: 'sha256:old', keep: 5, alarmed: [] }]);
    expect((await listSelfUpdates(t.db.database.db))[0]!.backupFile).toBe(e.backups[0]!.file);
    expect(e.helpers).toHaveLength(1);
    expect(e.helpers[0]!.spec).toEqual({
      name: 'installer-self-updater',
      image: `${REPO}:dev-latest`,
      cmd: ['sh', '/usr/src/app/scripts/self-update.sh', 'installer', '/opt/installer', 'docker-compose.yml', '/var/tmp/installer/self-update/docker-compose.yml', 'rollback', 'dev-latest', 'backend'],
      binds: ['/var/run/docker.sock:/var/run/docker.sock', '/opt/installer:/opt/installer', '/var/tmp/installer:/var/tmp/installer'],
      // The digest recorded when the file was staged, which the helper checks before installing it.
      env: [`SELF_UPDATE_STAGED_SHA256=${sha256Of(e.published as string)}`, 'SELF_UPDATE_WAIT_TIMEOUT=45', 'SELF_UPDATE_INIT_TIMEOUT=900'],
      labels: expect.objectContaining({ 'io.installer.self-update.target': 'sha256:new' }),
    });
    expect((await listSelfUpdates(t.db.database.db))[0]!.stagedComposeSha256).toBe(sha256Of(e.staged!));

    const rows = await audit(t);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      kind: 'self-update', status: 'started', actor: 'platform:amy', actor_email: 'amy@example.com', actor_kind: 'platform-user', target_digest: 'sha256:new',
      schema_migration: await currentMigration(t.db.database.db),
    });
    expect(rows[0]!.schema_migration).toBe(LATEST_MIGRATION);
    expect((await check(t)).lastUpdate).toMatchObject({ status: 'started', targetDigest: 'sha256:new' });

    // A second update while this one is in flight is refused.
    const again = await post(t);
    expect(again.statusCode).toBe(409);
    expect(again.json().message).toMatch(/already in flight/);
  });

  it('answers started=false and spawns nothing when already newest', async () => {
    const engine = new FakeEngine();
    engine.registry.set(`${REPO}:dev-latest`, 'sha256:old');
    t = await startSelfUpdateApp({ engine });
    const before = engine.state();
    const res = await post(t, auth(await t.token('viewer')));
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ started: false, targetDigest: 'sha256:old' });
    expect(engine.state()).toEqual(before);
    expect(engine.calls).not.toContain('spawnHelper');
    expect(await audit(t)).toHaveLength(0);
    expect((await check(t)).lastUpdate.status).toBeNull();
  });

  it('400 when the target digest cannot be resolved, and nothing changed', async () => {
    const engine = new FakeEngine();
    engine.registryDown = true;
    t = await startSelfUpdateApp({ engine });
    const before = engine.state();
    const res = await post(t);
    expect(res.statusCode).toBe(400);
    expect(res.json().message).toMatch(/cannot be resolved.*connection refused.*nothing was changed/);
    expect(engine.state()).toEqual(before);
    expect(await audit(t)).toHaveLength(0);
    // Not in flight any more: the next request is taken.
    engine.registryDown = false;
    expect((await post(t)).statusCode).toBe(200);
  });

  it('preflight reads the published file for the channel out of the pulled target image', async () => {
    t = await startSelfUpdateApp();
    const res = await post(t);
    expect(res.statusCode, res.body).toBe(200);
    expect(t.engine.publishedFor).toEqual([{ channel: 'dev', imageId: 'img-new' }]);
    expect(t.engine.calls.indexOf('pullByDigest')).toBeLessThan(t.engine.calls.indexOf('publishedComposeFile'));
  });

  it('400 when the channel is unknown (no INSTALLER_CHANNEL, a tag without prefix)', async () => {
    const runtime = new FakeRuntime();
    runtime.info = { ...runtime.info, image: `${REPO}:latest`, tag: 'latest' };
    t = await startSelfUpdateApp({ runtime, env: { INSTALLER_CHANNEL: '' } });
    const res = await post(t);
    expect(res.statusCode).toBe(400);
    expect(res.json().message).toContain('latest-latest');
  });

  for (const failing of ['ownCompose', 'publishedComposeFile', 'pullByDigest', 'backupDatabase', 'tag:rollback', 'writeStaged', 'tag:dev-latest', 'removeHelper', 'spawnHelper']) {
    it(`a preflight failure at ${failing} aborts with 503 and nothing changed`, async () => {
      const engine = new FakeEngine();
      engine.failing.add(failing);
      t = await startSelfUpdateApp({ engine });
      const before = engine.state();
      const res = await post(t);
      expect(res.statusCode, res.body).toBe(503);
      expect(res.json().message).toMatch(/^self-update aborted in preflight: .*nothing was changed$/);
      expect(engine.state()).toEqual(before);
      // An audit row written before the failure is finished as failed; none stays `started`.
      for (const r of await audit(t)) expect(r).toMatchObject({ status: 'failed', detail: expect.stringContaining('aborted before the helper ran') });
      expect((await check(t)).lastUpdate.status).toBeNull();
    });
  }

  it('a failed database backup aborts with 503 naming the backup, before the rollback tag or the staged file are touched', async () => {
    const engine = new FakeEngine();
    engine.failing.add('backupDatabase');
    t = await startSelfUpdateApp({ engine, env: { SELF_UPDATE_BACKUPS_KEEP: '3' } });
    const before = engine.state();
    const res = await post(t);
    expect(res.statusCode, res.body).toBe(503);
    expect(res.json().message).toBe('self-update aborted in preflight: backingUp: the database backup failed: backupDatabase failed (injected); nothing was changed');
    expect(engine.state()).toEqual(before);
    expect(engine.calls).not.toContain('tag:rollback');
    expect(engine.calls).not.toContain('writeStaged');
    expect(await audit(t)).toHaveLength(0);
    const [r] = await listSelfUpdates(t.db.database.db);
    expect(r).toMatchObject({ phase: 'aborted', abortCode: 'preflight', backupFile: null });
    // Not in flight any more; the next one backs up (keeping SELF_UPDATE_BACKUPS_KEEP) and starts.
    engine.failing.delete('backupDatabase');
    expect((await post(t)).statusCode).toBe(200);
    expect(engine.backups).toMatchObject([{ fromDigest: 'sha256:old', keep: 3 }]);
  });

  it('aborts when the backend is not the compose project the helper would switch', async () => {
    const engine = new FakeEngine();
    engine.own = { project: 'installer-other', service: 'backend' };
    t = await startSelfUpdateApp({ engine });
    const res = await post(t);
    expect(res.statusCode).toBe(503);
    expect(res.json().message).toContain('belongs to compose project installer-other, not INSTALLER_PROJECT=installer');
  });

  it('409 when a deployment job is queued or running, decided before anything is written', async () => {
    t = await startSelfUpdateApp();
    const db = t.db.database.db;
    const jobId = await createJob(db, { kind: 'restart', params: {}, actor: { id: 'bob' } });
    const res = await post(t);
    expect(res.statusCode).toBe(409);
    expect(res.json().message).toMatch(new RegExp(`deployment job ${jobId} \\(restart\\) is queued: updating the installer now would kill it`));
    expect(await listSelfUpdates(db)).toHaveLength(0);
    await finishJob(db, jobId, { phase: 'completed', detail: null, exitCode: 0 });
    expect((await post(t)).statusCode).toBe(200);
  });

  it('a deployment job cannot be queued while the request waits for preflight', async () => {
    const engine = new FakeEngine();
    t = await startSelfUpdateApp({ engine });
    let refused: unknown = null;
    engine.onResolve = async () => {
      engine.onResolve = null;
      // The job side takes the same lock and sees the update in flight.
      refused = await createJob(t.db.database.db, { kind: 'pull', params: {}, actor: { id: 'bob' } }).then(() => null, (err: unknown) => err);
    };
    const res = await post(t);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().started).toBe(true);
    expect(refused).toMatchObject({ statusCode: 409, message: expect.stringContaining('an installer self-update is in flight') });
    // Only the update's own job (its transcript), written with the request.
    expect(await t.db.database.db.selectFrom('deployment_jobs').select('kind').execute()).toEqual([{ kind: 'self-update' }]);
  });

  it('50 concurrent calls start exactly one update', async () => {
    const engine = new FakeEngine();
    engine.pullDelayMs = 300;
    t = await startSelfUpdateApp({ engine });
    const token = await t.token('operator');
    const results = await Promise.all(Array.from({ length: 50 }, () => post(t, auth(token))));
    const codes = results.map((r) => r.statusCode);
    expect(codes.filter((c) => c === 200)).toHaveLength(1);
    expect(codes.filter((c) => c === 409)).toHaveLength(49);
    expect(results.find((r) => r.statusCode === 200)!.json().started).toBe(true);
    expect(engine.helpers).toHaveLength(1);
    expect(await listSelfUpdates(t.db.database.db)).toHaveLength(1);
  });

  it('the database refuses a second update in flight even without the API check', async () => {
    t = await startSelfUpdateApp({ controllers: false });
    const db = t.db.database.db;
    const row = (id: string) => ({ request_id: id, actor: 'x' });
    const status = (id: string) => ({ request_id: id, phase: 'preflight' as const, conditions: '[]' });
    await db.insertInto('self_update_requests').values([row('00000000-0000-4000-8000-000000000001'), row('00000000-0000-4000-8000-000000000002')]).execute();
    await db.insertInto('self_update_status').values(status('00000000-0000-4000-8000-000000000001')).execute();
    await expect(db.insertInto('self_update_status').values(status('00000000-0000-4000-8000-000000000002')).execute()).rejects.toThrow(/self_update_one_in_flight/);
  });

  it('503 and the request withdrawn when no controller claims it', async () => {
    t = await startSelfUpdateApp({ controllers: false });
    const res = await post(t);
    expect(res.statusCode).toBe(503);
    expect(res.json().message).toMatch(/no self-update controller claimed the request/);
    const [r] = await listSelfUpdates(t.db.database.db);
    expect(r!.phase).toBe('aborted');
  }, 20_000);

  it('needs a signed-in caller', async () => {
    t = await startSelfUpdateApp();
    expect((await post(t, {})).statusCode).toBe(401);
    expect((await post(t, { authorization: 'Bearer nope' })).statusCode).toBe(401);
  });
});

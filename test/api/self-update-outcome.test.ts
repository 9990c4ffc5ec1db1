// A self-update's outcome reconciled on boot, on a real Postgres with the engine and host in memory:
// what the helper's exit means (completed, rolled back, neither, undecided), the quarantine and the
// notification each outcome queues, and a second process that finds the outcome already written.
// The endpoints and preflight: self-update.test.ts.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { checkSelfUpdate, clearSelfUpdates, FakeEngine, FakeRuntime, LATEST_MIGRATION, postSelfUpdate, REPO, selfUpdateAudit, startSelfUpdateApp, type SelfUpdateApp } from '../helpers/api/self-update.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { TEST_SECRETS } from '../helpers/api/app.ts';
import { currentMigration } from '../../src/db/migrate.ts';
import { getSelfUpdate, listSelfUpdates, pendingReconciliation as pendingReconciliationOf } from '../../src/state/self-update.ts';
import { Sealer } from '../../src/state/platform-config.ts';
import { listQuarantine } from '../../src/state/update-policy.ts';

const post = postSelfUpdate;
const check = checkSelfUpdate;
const audit = selfUpdateAudit;

describe('reconciling the outcome', () => {
  const rolledBackExit = { state: 'exited' as const, exitCode: 0, status: 'rolled-back' as const, switchFailure: 'exit 1: dependency failed to start: container installer-backend is unhealthy', rollbackFailure: null };
  let db: TestDatabase;
  let first: SelfUpdateApp | undefined;
  let second: SelfUpdateApp | undefined;
  beforeAll(async () => {
    db = await createTestDatabase();
    // A webhook endpoint (its port closed: deliveries wait), so that each outcome queues its notification.
    await db.database.db.insertInto('webhook_endpoints').values({ id: crypto.randomUUID(), url: 'http://127.0.0.1:9/hook', secret_sealed: new Sealer(TEST_SECRETS.ENCRYPTION_KEY).seal('whsec_test'), created_by: 'test' }).execute();
  });
  /** The notifications queued about one update: event type → body data. */
  const notified = async (requestId: string) =>
    Object.fromEntries(
      (await db.database.db.selectFrom('notification_outbox').select(['event_type', 'body']).where('event_id', 'like', `%:${requestId}`).execute()).map((r) => [r.event_type, JSON.parse(r.body).data]),
    );
  afterEach(async () => {
    await second?.close({ drop: false });
    await first?.close({ drop: false });
    first = second = undefined;
    await clearSelfUpdates(db);
    await sql`delete from kysely_migration where name = '0099_marker'`.execute(db.database.db);
  });
  afterAll(async () => db?.drop());

  /** Starts an update on one backend and stops that backend, as the switch does. */
  async function startUpdate(): Promise<{ engine: FakeEngine; requestId: string }> {
    const engine = new FakeEngine();
    first = await startSelfUpdateApp({ db, engine });
    const res = await post(first);
    expect(res.statusCode, res.body).toBe(200);
    await first.close({ drop: false });
    first = undefined;
    const [r] = await listSelfUpdates(db.database.db);
    expect(r!.phase).toBe('helper-running');
    return { engine, requestId: r!.requestId };
  }

  /** The backend that comes up next, on `digest`. */
  async function boot(engine: FakeEngine, digest: string, imageId: string, reference: string): Promise<SelfUpdateApp> {
    const runtime = new FakeRuntime();
    runtime.info = { ...runtime.info, digest, imageId, image: reference, tag: reference.split(':').pop()! };
    second = await startSelfUpdateApp({ db, engine, runtime });
    return second;
  }

  it('a helper still running at its deadline is stopped, its output kept in the transcript, then removed', async () => {
    const { engine, requestId } = await startUpdate();
    // The deadline counts the helper's whole bounded run: the init's 900 s, two 300 s waits, its other steps, and the grace.
    const row = (await getSelfUpdate(db.database.db, requestId))!;
    const budget = (900 + 2 * 300 + 600) * 1000 + 120_000;
    expect(Date.parse(String(row.helperDeadline)) - Date.parse(String(row.createdAt))).toBeGreaterThan(budget - 60_000);
    expect(Date.parse(String(row.helperDeadline)) - Date.now()).toBeLessThanOrEqual(budget);
    expect(engine.helpers[0]!.spec.env).toContain('SELF_UPDATE_INIT_TIMEOUT=900');
    engine.outputs.set(engine.helpers[0]!.id, ['self-update: running: VERSION=dev-latest docker compose -p installer -f docker-compose.yml up -d backend-init']);
    await sql`update self_update_status set helper_deadline = now() - interval '1 second' where request_id = ${requestId}`.execute(db.database.db);
    const t = await boot(engine, 'sha256:old', 'img-old', `${REPO}:rollback`);
    const last = await eventually(async () => ((await check(t)).lastUpdate.status !== 'started' ? (await check(t)).lastUpdate : null), 'an outcome');
    expect(last.status).toBe('rolled-back');
    expect(String(last.detail)).toContain('the helper installer-self-updater was still running at its deadline');
    expect(engine.stopped).toEqual(['helper-1']);
    // Removed only after its output went into the transcript.
    expect(engine.calls.indexOf('stopHelper')).toBeLessThan(engine.calls.indexOf('helperOutput'));
    expect(engine.calls.lastIndexOf('removeHelper')).toBeGreaterThan(engine.calls.indexOf('helperOutput'));
    expect(engine.helpers).toEqual([]);
  });

  it('completed: the new backend runs the target digest once the helper exited 0', async () => {
    const { engine, requestId } = await startUpdate();
    const t = await boot(engine, 'sha256:new', 'img-new', `${REPO}:dev-latest`);
    // Nothing is decided while the helper still runs: a new build may yet be judged unhealthy.
    await new Promise((r) => setTimeout(r, 200));
    expect((await getSelfUpdate(db.database.db, requestId))!.phase).toBe('helper-running');
    engine.helpers[0]!.finish({ state: 'exited', exitCode: 0, status: 'ok', switchFailure: null, rollbackFailure: null });
    const last = await eventually(async () => ((await check(t)).lastUpdate.status === 'completed' ? (await check(t)).lastUpdate : null), 'completed');
    expect(last).toMatchObject({ status: 'completed', targetDigest: 'sha256:new', detail: 'updated to dev-latest (sha256:new) from sha256:old' });
    expect(Date.parse(String(last.at))).toBeGreaterThan(Date.now() - 60_000);
    expect(await audit(t)).toMatchObject([{ status: 'completed', exit_code: 0 }]);
    expect((await check(t)).updateAvailable).toBe(false);
    expect((await check(t)).warning).toBeUndefined();
    // The channel tag stays on the build that stuck.
    expect(engine.tags.get(`${REPO}:dev-latest`)).toBe('img-new');
    expect(await notified(requestId)).toEqual({
      'self-update.completed': expect.objectContaining({ requestId, outcome: 'completed', targetDigest: 'sha256:new', runningDigest: 'sha256:new', helperStatus: 'ok' }),
    });
    // A build that stuck is not quarantined (docs/update-policy.md).
    expect(await listQuarantine(db.database.db)).toEqual([]);
  });

  it('rolled back: the previous digest runs again; the reason comes from the helper', async () => {
    const { engine, requestId } = await startUpdate();
    const t = await boot(engine, 'sha256:old', 'img-old', `${REPO}:rollback`);
    engine.helpers[0]!.finish(rolledBackExit);
    const last = await eventually(async () => ((await check(t)).lastUpdate.status !== 'started' ? (await check(t)).lastUpdate : null), 'an outcome');
    expect(last.status).toBe('rolled-back');
    // The image named is the one that runs again (the rollback tag), not the reference the update started from.
    expect(last.detail).toBe(
      'rolled back: the switch to dev-latest failed (exit 1: dependency failed to start: container installer-backend is unhealthy); helper exit 0; ' +
        'still on the previous image registry.test/installer:rollback (sha256:old); the local tag dev-latest points at it again',
    );
    expect(await audit(t)).toMatchObject([{ status: 'failed', exit_code: 0, detail: last.detail }]);
    // Quarantined with the outcome, in the same transaction: no policy starts it again.
    expect(await listQuarantine(db.database.db)).toMatchObject([{ digest: 'sha256:new', outcome: 'rolled-back', detail: last.detail, liftedAt: null }]);
    // Preflight had pointed the channel tag at the failed build; it names the running image again.
    expect(engine.tags.get(`${REPO}:dev-latest`)).toBe('img-old');
    // The registry still offers the failed build: available, but not as if nothing happened.
    const c = await check(t);
    expect(c).toMatchObject({ updateAvailable: true, remoteDigest: 'sha256:new' });
    expect(c.warning).toMatch(/^the last update to sha256:new did not stick and was rolled back at .* \(rolled back: the switch to dev-latest failed .*\); updating again retries the same build$/);
    expect(await notified(requestId)).toEqual({ 'self-update.rolled-back': expect.objectContaining({ outcome: 'rolled-back', detail: last.detail, helperStatus: 'rolled-back' }) });
    // The channel offers a build other than the running one: update.available, once for that digest.
    const available = await db.database.db.selectFrom('notification_outbox').select('event_id').where('event_type', '=', 'update.available').execute();
    expect(available.map((r) => r.event_id)).toEqual(['update.available:sha256:new']);
    expect(t.logs.join('')).not.toContain('"level":"error"');
  });

  it('rolled back onto a changed schema: the detail says so and it is logged at error level', async () => {
    const { engine, requestId } = await startUpdate();
    // The new build migrated the schema before it failed.
    await sql`insert into kysely_migration (name, timestamp) values ('0099_marker', now())`.execute(db.database.db);
    const t = await boot(engine, 'sha256:old', 'img-old', `${REPO}:rollback`);
    engine.helpers[0]!.finish(rolledBackExit);
    const last = await eventually(async () => ((await check(t)).lastUpdate.status !== 'started' ? (await check(t)).lastUpdate : null), 'an outcome');
    // The spec's words, then the backup preflight took and the documented restore command.
    const backup = engine.backups[0]!.file;
    const restore = `docker stop installer-backend && docker exec installer-postgres pg_restore --clean --create --if-exists -U installer -d postgres /backups/${backup} && docker start installer-backend`;
    const detail = `ROLLED BACK ONTO A CHANGED SCHEMA; the database was backed up before the update as ${backup}; to bring the old schema back: ${restore} (docs/self-update.md)`;
    expect(last).toMatchObject({ status: 'rolled-back', detail });
    const errorLines = t.logs.filter((l) => l.includes('"level":"error"'));
    expect(errorLines).toHaveLength(1);
    expect(errorLines[0]).toContain('ROLLED BACK ONTO A CHANGED SCHEMA');
    expect(errorLines[0]).toContain(`"backup":"${backup}"`);
    expect(errorLines[0]).toContain(restore);
    expect(errorLines[0]).toContain('0099_marker');
    expect(errorLines[0]).toContain(`"preUpdateMigration":"${LATEST_MIGRATION}"`);
    expect(await notified(requestId)).toEqual({
      'self-update.rolled-back': expect.objectContaining({ outcome: 'rolled-back', detail }),
      'self-update.schema-alarm': expect.objectContaining({
        alarm: 'ROLLED BACK ONTO A CHANGED SCHEMA', preUpdateMigration: LATEST_MIGRATION, schemaMigration: '0099_marker', detail, backup, restoreCommand: restore,
      }),
    });
  });

  it('neither: restarted on another image after the helper failed', async () => {
    const { engine, requestId } = await startUpdate();
    const t = await boot(engine, 'sha256:other', 'img-other', `${REPO}:dev-40`);
    engine.helpers[0]!.finish({ state: 'exited', exitCode: 1, status: 'failed', switchFailure: 'exit 1: unhealthy', rollbackFailure: 'exit 1: container installer-backend exited (3)' });
    const last = await eventually(async () => ((await check(t)).lastUpdate.status !== 'started' ? (await check(t)).lastUpdate : null), 'an outcome');
    expect(last.status).toBe('neither');
    expect(last.detail).toContain('restarted on registry.test/installer:dev-40 (sha256:other)');
    expect(last.detail).toContain('the rollback failed too');
    // The switch failed: the channel tag no longer names that build but the one started by hand.
    expect(last.detail).toMatch(/; the local tag dev-latest points at it again$/);
    expect(engine.tags.get(`${REPO}:dev-latest`)).toBe('img-other');
    expect(await notified(requestId)).toEqual({ 'self-update.failed': expect.objectContaining({ outcome: 'neither', runningDigest: 'sha256:other', helperStatus: 'failed' }) });
    // Switch and rollback both failed: the target is quarantined.
    expect(await listQuarantine(db.database.db)).toMatchObject([{ digest: 'sha256:new', outcome: 'neither' }]);
  });

  it('neither after a switch that worked (another build started since): the target is not quarantined', async () => {
    const { engine } = await startUpdate();
    const t = await boot(engine, 'sha256:other', 'img-other', `${REPO}:dev-40`);
    engine.helpers[0]!.finish({ state: 'exited', exitCode: 0, status: 'ok', switchFailure: null, rollbackFailure: null });
    const last = await eventually(async () => ((await check(t)).lastUpdate.status !== 'started' ? (await check(t)).lastUpdate : null), 'an outcome');
    expect(last.status).toBe('neither');
    expect(await listQuarantine(db.database.db, { includeLifted: true })).toEqual([]);
  });

  it('a helper that ends while its backend still runs is reconciled by that backend', async () => {
    const engine = new FakeEngine();
    first = await startSelfUpdateApp({ db, engine });
    expect((await post(first)).statusCode).toBe(200);
    engine.helpers[0]!.finish(rolledBackExit);
    const t = first;
    const last = await eventually(async () => ((await check(t)).lastUpdate.status !== 'started' ? (await check(t)).lastUpdate : null), 'an outcome');
    expect(last.status).toBe('rolled-back');
    // Not in flight any more.
    engine.helpers = [];
    expect((await post(first)).statusCode).toBe(200);
  });

  it('a restart during preflight undoes what preflight changed and aborts the request', async () => {
    const engine = new FakeEngine();
    first = await startSelfUpdateApp({ db, engine, controllers: false });
    const ddb = db.database.db;
    const id = '00000000-0000-4000-8000-0000000000aa';
    await ddb.insertInto('self_update_requests').values({ request_id: id, actor: 'amy' }).execute();
    const before = engine.state();
    // What the chart had done before the process died: pinned rollback, staged the file.
    engine.tags.set(`${REPO}:rollback`, 'img-old');
    engine.staged = 'services:\n  new: {}\n';
    const snapshot = { value: 'taggingNew', context: { changes: { rollbackTag: { before: 'img-older' }, stagedFile: { before: before.staged } }, target: { channel: 'dev', tag: 'dev-latest', digest: 'sha256:new' }, actionId: null } };
    await ddb.insertInto('self_update_status').values({ request_id: id, phase: 'preflight', conditions: '[]', snapshot: JSON.stringify(snapshot) }).execute();
    await first.close({ drop: false });
    first = undefined;
    second = await startSelfUpdateApp({ db, engine });
    const r = await getSelfUpdate(ddb, id);
    expect(r).toMatchObject({ phase: 'aborted', detail: 'interrupted: the backend restarted during preflight; nothing was changed' });
    expect(engine.state()).toEqual(before);
  });

  it('a request in preflight without an audit row whose helper exists: the database was restored from its backup; the outcome, the audit row and the quarantine are read again from the helper, no alarm', async () => {
    const engine = new FakeEngine();
    first = await startSelfUpdateApp({ db, engine, controllers: false });
    const ddb = db.database.db;
    const id = '00000000-0000-4000-8000-0000000000bb';
    await ddb.insertInto('self_update_requests').values({ request_id: id, actor: 'amy' }).execute();
    // The row as the backup taken in `backingUp` held it; the update went on to its helper since,
    // rolled back onto a changed schema, and the restore took the schema back with the row.
    const snapshot = { value: 'backingUp', context: { changes: {}, target: { channel: 'dev', tag: 'dev-latest', digest: 'sha256:new' }, actionId: null } };
    await ddb.insertInto('self_update_status').values({
      request_id: id, phase: 'preflight', conditions: '[]', snapshot: JSON.stringify(snapshot), channel: 'dev', target_tag: 'dev-latest', target_digest: 'sha256:new',
      target_image_id: 'img-new', previous_reference: `${REPO}:dev-41`, previous_digest: 'sha256:old', previous_image_id: 'img-old',
    }).execute();
    engine.addExitedHelper('helper-restored', rolledBackExit, id);
    engine.tags.set(`${REPO}:rollback`, 'img-old');
    engine.tags.set(`${REPO}:dev-latest`, 'img-old');
    await first.close({ drop: false });
    first = undefined;
    const before = engine.state();
    second = await startSelfUpdateApp({ db, engine });
    const t = second;
    const last = await eventually(async () => ((await check(t)).lastUpdate.status !== 'started' ? (await check(t)).lastUpdate : null), 'the outcome read again');
    expect(last).toMatchObject({
      status: 'rolled-back', targetDigest: 'sha256:new',
      detail: expect.stringMatching(
        /^rolled back: the switch to dev-latest failed \(exit 1: .*\); helper exit 0; still on the previous image .*; recorded again from installer-self-updater after the database was restored from the backup taken in this update's preflight$/,
      ),
    });
    const r = await getSelfUpdate(ddb, id);
    expect(r).toMatchObject({ phase: 'rolled-back', helperContainerId: 'helper-restored', preUpdateMigration: await currentMigration(ddb) });
    expect(r!.restoredAt).not.toBeNull();
    // The audit row the restore took is recorded again, once, and finished with the outcome.
    expect(await audit(t)).toMatchObject([{ kind: 'self-update', actor: 'amy', status: 'failed', target_digest: 'sha256:new', detail: expect.stringContaining('recorded again from installer-self-updater') }]);
    // Quarantined once; the same event as before the restore (its id per update), no second alarm.
    expect(await listQuarantine(ddb, { includeLifted: true })).toMatchObject([{ digest: 'sha256:new', outcome: 'rolled-back', requestId: id }]);
    expect(Object.keys(await notified(id))).toEqual(['self-update.rolled-back']);
    expect(await ddb.selectFrom('notification_outbox').select('event_id').where('event_id', 'like', `%:${id}`).execute()).toEqual([{ event_id: `self-update.rolled-back:${id}` }]);
    expect(second.logs.join('')).not.toContain('"level":"error"');
    // Nothing of the engine's was changed: no tag moved, no helper removed or started.
    expect(engine.state()).toEqual(before);
    // A second boot finds nothing to do again.
    await second.close({ drop: false });
    second = await startSelfUpdateApp({ db, engine });
    expect(await pendingReconciliationOf(ddb)).toBeUndefined();
    expect(await audit(second)).toHaveLength(1);
    expect(await listQuarantine(ddb, { includeLifted: true })).toHaveLength(1);
  });
});

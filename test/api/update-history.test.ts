// The self-update history on a real Postgres, with the engine in memory: the downtime measured from
// the old backend's last answer to the new backend's first readiness and stored by the outcome
// reconciliation, null with its reason when an end is missing, the same figure in /metrics, paging
// by cursor, and bad input refused with a 400 that names the problem.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { clearSelfUpdates, FakeEngine, FakeRuntime, REPO, startSelfUpdateApp, type SelfUpdateApp } from '../helpers/api/self-update.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { TEST_SECRETS } from '../helpers/api/app.ts';
import { listSelfUpdates, requestSelfUpdate, updateSelfUpdate } from '../../src/state/self-update.ts';
import { NO_LAST_ANSWER, recordFirstReady, recordLastAnswer } from '../../src/state/update-history.ts';
import type { UpdateHistoryEntry as Entry } from '../../src/contracts/update-history.ts';
import { sample } from '../helpers/shared/prometheus.ts';

const service = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'amy', 'x-actor-email': 'amy@example.com' };
const HISTORY = '/api/system/self-update/history';

async function history(t: SelfUpdateApp, query = ''): Promise<Entry[]> {
  const res = await t.app.inject({ method: 'GET', url: `${HISTORY}${query}`, headers: service });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as Entry[];
}

async function scrape(t: SelfUpdateApp): Promise<string> {
  const res = await t.app.inject({ method: 'GET', url: '/metrics', headers: service });
  expect(res.statusCode, res.body).toBe(200);
  return res.body;
}

describe('the downtime of an update, measured by the installer', () => {
  let db: TestDatabase;
  let first: SelfUpdateApp | undefined;
  let second: SelfUpdateApp | undefined;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterEach(async () => {
    await second?.close({ drop: false });
    await first?.close({ drop: false });
    first = second = undefined;
    await clearSelfUpdates(db);
  });
  afterAll(async () => db?.drop());

  /**
   * Starts an update on one backend, then stops it as the switch does. `graceful`: it records its
   * last answer as the server does on SIGTERM; otherwise it is killed and records nothing.
   */
  async function startUpdate(graceful: boolean): Promise<{ engine: FakeEngine; requestId: string; lastAnswerAt: Date | null }> {
    const engine = new FakeEngine();
    first = await startSelfUpdateApp({ db, engine });
    const res = await first.app.inject({ method: 'POST', url: '/api/system/self-update', headers: service });
    expect(res.statusCode, res.body).toBe(200);
    // The old backend still answers while the helper runs the migrations.
    expect((await first.app.inject({ method: 'GET', url: '/api/health' })).statusCode).toBe(200);
    const answered = first.app.lastAnswer.at;
    expect(answered).not.toBeNull();
    // As the server stops: it answers anyone until its listeners close.
    const stoppedAcceptingAt = new Date();
    await first.close({ drop: false });
    const lastAnswerAt = first.app.lastAnswer.servedUntil(stoppedAcceptingAt);
    expect(lastAnswerAt.getTime()).toBeGreaterThanOrEqual(answered!.getTime());
    first = undefined;
    if (graceful) expect(await recordLastAnswer(db.database.db, lastAnswerAt)).toBe(true);
    const [r] = await listSelfUpdates(db.database.db);
    expect(r!.phase).toBe('helper-running');
    return { engine, requestId: r!.requestId, lastAnswerAt: graceful ? lastAnswerAt : null };
  }

  /** The backend that comes up next, on `digest`; it records its readiness as the server does once it listens. */
  async function boot(engine: FakeEngine, digest: string, imageId: string, reference: string): Promise<{ t: SelfUpdateApp; readyAt: Date }> {
    const runtime = new FakeRuntime();
    runtime.info = { ...runtime.info, digest, imageId, image: reference, tag: reference.split(':').pop()! };
    second = await startSelfUpdateApp({ db, engine, runtime });
    const readyAt = new Date();
    expect(await recordFirstReady(db.database.db, readyAt)).toBe(true);
    // Only the first readiness counts.
    expect(await recordFirstReady(db.database.db, new Date(readyAt.getTime() + 5_000))).toBe(false);
    return { t: second, readyAt };
  }

  it('a completed update: downtime = first readiness − last answer, the same in the history and in /metrics', async () => {
    const { engine, requestId, lastAnswerAt } = await startUpdate(true);
    // A gap the test can tell from zero.
    await new Promise((r) => setTimeout(r, 150));
    const { t, readyAt } = await boot(engine, 'sha256:new', 'img-new', `${REPO}:dev-latest`);
    // In flight: no figure yet, and it says why.
    const inFlight = (await history(t))[0]!;
    expect(inFlight).toMatchObject({ requestId, outcome: 'helper-running', downtimeMs: null, downtimeNote: 'the update is still in flight' });
    expect(sample(await scrape(t), 'installer_self_update_downtime_seconds')).toBeUndefined();

    engine.helpers[0]!.finish({ state: 'exited', exitCode: 0, status: 'ok', switchFailure: null, rollbackFailure: null });
    const entry = await eventually(async () => (await history(t)).find((e) => e.outcome === 'completed'), 'the completed update in the history');
    const expected = readyAt.getTime() - lastAnswerAt!.getTime();
    expect(expected).toBeGreaterThanOrEqual(150);
    expect(entry).toMatchObject({
      requestId,
      actor: { id: 'platform:amy', email: 'amy@example.com' },
      from: { reference: `${REPO}:dev-41`, digest: 'sha256:old' },
      to: { tag: 'dev-latest', digest: 'sha256:new' },
      outcome: 'completed',
      downtimeMs: expected,
      downtimeNote: null,
      lastAnswerAt: lastAnswerAt!.toISOString(),
      firstReadyAt: readyAt.toISOString(),
    });
    expect(Date.parse(entry.finishedAt!)).toBeGreaterThanOrEqual(Date.parse(entry.startedAt));

    const text = await scrape(t);
    expect(sample(text, 'installer_self_update_downtime_seconds', { request_id: requestId })).toBeCloseTo(expected / 1000, 6);
    expect(sample(text, 'installer_self_updates_total', { outcome: 'completed' })).toBe(1);
    expect(sample(text, 'installer_self_updates_total', { outcome: 'rolled-back' })).toBeUndefined();
  });

  it('an old backend killed without a graceful stop: downtime null with the reason, never a made-up number', async () => {
    const { engine, requestId } = await startUpdate(false);
    const { t } = await boot(engine, 'sha256:old', 'img-old', `${REPO}:rollback`);
    engine.helpers[0]!.finish({ state: 'exited', exitCode: 0, status: 'rolled-back', switchFailure: 'exit 1: container installer-backend is unhealthy', rollbackFailure: null });
    const entry = await eventually(async () => (await history(t)).find((e) => e.outcome === 'rolled-back'), 'the rolled-back update in the history');
    expect(entry).toMatchObject({ requestId, outcome: 'rolled-back', downtimeMs: null, downtimeNote: NO_LAST_ANSWER, lastAnswerAt: null });
    expect(entry.firstReadyAt).not.toBeNull();
    const text = await scrape(t);
    expect(sample(text, 'installer_self_updates_total', { outcome: 'rolled-back' })).toBe(1);
    // No completed update: no downtime figure at all, rather than a zero.
    expect(sample(text, 'installer_self_update_downtime_seconds')).toBeUndefined();
  });
});

describe('GET /api/system/self-update/history', () => {
  let t: SelfUpdateApp;
  const ids: string[] = [];
  beforeAll(async () => {
    t = await startSelfUpdateApp({ controllers: false });
    const db = t.db.database.db;
    // Five updates that ran their helper, one a minute apart, and one aborted in preflight (not history).
    const base = Date.parse('2026-11-01T10:00:00Z');
    for (let i = 0; i < 6; i++) {
      const id = await requestSelfUpdate(db, { id: `user-${i}`, email: `user-${i}@example.com` });
      const spawned = i !== 3;
      await updateSelfUpdate(db, id, spawned
        ? { phase: 'completed', actionId: String(1000 + i), previousDigest: `sha256:from-${i}`, targetDigest: `sha256:to-${i}`, targetTag: 'dev-latest', finished: true }
        : { phase: 'aborted', abortCode: 'preflight', detail: 'no space', finished: true });
      await db.updateTable('self_update_status').set({ created_at: new Date(base + i * 60_000), downtime_ms: spawned ? 1000 + i : null }).where('request_id', '=', id).execute();
      await db.updateTable('self_update_requests').set({ created_at: new Date(base + i * 60_000) }).where('request_id', '=', id).execute();
      if (spawned) ids.unshift(id);
    }
  });
  afterAll(async () => t?.close());

  it('pages newest first through a Link header until it is absent; an aborted preflight is not in it', async () => {
    const seen: Entry[] = [];
    let url: string | null = `${HISTORY}?limit=2`;
    let pages = 0;
    while (url) {
      const res = await t.app.inject({ method: 'GET', url, headers: service });
      expect(res.statusCode, res.body).toBe(200);
      const page = res.json() as Entry[];
      expect(page.length).toBeLessThanOrEqual(2);
      seen.push(...page);
      pages++;
      const link = res.headers.link as string | undefined;
      url = link ? /^<([^>]+)>; rel="next"$/.exec(link)![1]! : null;
    }
    expect(pages).toBe(3);
    expect(seen.map((e) => e.requestId)).toEqual(ids);
    expect(seen.map((e) => e.downtimeMs)).toEqual([1005, 1004, 1002, 1001, 1000]);
    expect(seen[0]).toMatchObject({ actor: { id: 'user-5', email: 'user-5@example.com' }, from: { digest: 'sha256:from-5' }, to: { digest: 'sha256:to-5', tag: 'dev-latest' }, startedAt: '2026-11-01T10:05:00.000Z' });
    // The default page holds them all, with no next link.
    const all = await t.app.inject({ method: 'GET', url: HISTORY, headers: service });
    expect((all.json() as Entry[]).map((e) => e.requestId)).toEqual(ids);
    expect(all.headers.link).toBeUndefined();
  });

  it.each([
    ['?limit=0', /limit.*at least 1/],
    ['?limit=201', /limit.*at most 200/],
    ['?limit=abc', /limit.*must be an integer/],
    ['?limit=1e2', /limit.*must be an integer/],
    ['?before=not-a-uuid', /before.*requestId of an update/],
    ['?before=00000000-0000-4000-8000-000000000000', /before: no self-update in the history has requestId 00000000-0000-4000-8000-000000000000/],
  ])('%s → 400 naming the problem', async (query, message) => {
    const res = await t.app.inject({ method: 'GET', url: `${HISTORY}${query}`, headers: service });
    expect(res.statusCode, res.body).toBe(400);
    expect((res.json() as { message: string }).message).toMatch(message);
  });

  it('a cursor naming an aborted preflight is refused: it is not in the history', async () => {
    const [aborted] = await t.db.database.db.selectFrom('self_update_status').select('request_id').where('phase', '=', 'aborted').execute();
    const res = await t.app.inject({ method: 'GET', url: `${HISTORY}?before=${aborted!.request_id}`, headers: service });
    expect(res.statusCode).toBe(400);
  });

  it('needs a signed-in caller; any role reads it, as the self-update check', async () => {
    expect((await t.app.inject({ method: 'GET', url: HISTORY })).statusCode).toBe(401);
    const res = await t.app.inject({ method: 'GET', url: HISTORY, headers: { authorization: `Bearer ${await t.token('viewer')}` } });
    expect(res.statusCode).toBe(200);
  });
});

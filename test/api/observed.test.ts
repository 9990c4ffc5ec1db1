// Observed state on a real Postgres (docs/adr/0023-observed-state.md): the repository's refresh
// protocol, and the read endpoints answering from the rows with their age. The observer here is a
// stand-in in the test process that serves refresh requests the way the real one does (LISTEN on
// the channel, begin, write), so every step of stale → request → served → answer is visible.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { createJob, finishJob } from '../../src/state/jobs.ts';
import {
  beginObservation,
  OBSERVED_CHANNEL,
  readFresh,
  readObserved,
  requestRefresh,
  updateAvailableCondition,
  writeObserved,
  type ObservedData,
  type ObservedKey,
} from '../../src/state/observed.ts';

const at = () => new Date().toISOString();
const VERSION: ObservedData['installer'] = { inContainer: true, image: 'registry.test/installer:dev-1', tag: 'dev-1', digest: 'sha256:one', imageId: 'img-1', containerId: 'c-1' };
const platformData = (names: string[]): ObservedData['platform'] => ({
  project: 'platform',
  containers: names.map((n) => ({ name: `platform-${n}-1`, service: n, state: 'running', health: null, image: `${n}:1`, digest: null, since: null })),
  services: names,
});

/** A stand-in observer: serves each refresh request of the keys it knows with what `world` says now. */
class FakeObserver {
  served = 0;
  private unlisten: (() => Promise<void>) | undefined;
  constructor(
    private readonly t: TestApp,
    public world: { installer: ObservedData['installer']; platform: ObservedData['platform']; channel?: ObservedData['channel'] },
    private readonly delayMs = 0,
  ) {}
  async start(): Promise<void> {
    this.unlisten = await this.t.db.database.listen(OBSERVED_CHANNEL, (key) => void this.observe(key as ObservedKey));
  }
  async observe(key: ObservedKey): Promise<void> {
    if (key !== 'installer' && key !== 'platform' && key !== 'channel') return;
    const db = this.t.db.database.db;
    const begun = await beginObservation(db, key);
    await new Promise((r) => setTimeout(r, this.delayMs));
    const conditions = [{ type: 'EngineReachable' as const, status: 'True' as const, reason: 'EngineAnswered', message: 'the engine answered', observedAt: at() }];
    if (key === 'installer') await writeObserved(db, key, { data: this.world.installer, conditions, ...begun });
    else if (key === 'channel') await writeObserved(db, key, { data: this.world.channel!, conditions: [updateAvailableCondition(this.world.channel!, new Date().toISOString())], ...begun });
    else await writeObserved(db, key, { data: this.world.platform, conditions, ...begun });
    this.served++;
  }
  async stop(): Promise<void> {
    await this.unlisten?.();
  }
}

let t: TestApp;
let observer: FakeObserver;
const get = async (url: string) => {
  const res = await t.app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${await t.token('admin')}` } });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as Record<string, unknown>;
};
const age = (key: ObservedKey, seconds: number) =>
  sql`update observed_state set observed_at = now() - make_interval(secs => ${seconds}) where key = ${key}`.execute(t.db.database.db);

beforeAll(async () => {
  // No real observer: the stand-in is the only writer of observed rows.
  t = await startTestApp({ observer: false, env: { OBSERVED_MAX_AGE_SECONDS: '30' } });
  observer = new FakeObserver(t, { installer: VERSION, platform: platformData(['api', 'web']) });
  await observer.start();
});
afterAll(async () => {
  await observer?.stop();
  await t?.close();
});

describe('the observed-state repository', () => {
  it('a refresh request bumps the generation; the observation that began after it serves it', async () => {
    const db = t.db.database.db;
    const wanted = await requestRefresh(db, 'installer');
    await expect.poll(async () => (await readObserved(db, 'installer'))?.observedGeneration).toBeGreaterThanOrEqual(wanted);
    const row = (await readObserved(db, 'installer'))!;
    expect(row.data).toEqual(VERSION);
    expect(row.conditions[0]).toMatchObject({ type: 'EngineReachable', status: 'True' });
    expect(row.ageMs).toBeGreaterThanOrEqual(0);
    expect(row.ageMs).toBeLessThan(5_000);
  });

  it('a fresh row is answered as it is: no request is written', async () => {
    const db = t.db.database.db;
    const before = (await readObserved(db, 'installer'))!;
    const served = observer.served;
    const row = await readFresh(db, 'installer', { maxAgeMs: 60_000, waitMs: 1_000 });
    expect(row!.requestedGeneration).toBe(before.requestedGeneration);
    expect(observer.served).toBe(served);
  });

  it('a stale row is refreshed and waited for', async () => {
    const db = t.db.database.db;
    await age('installer', 120);
    observer.world.installer = { ...VERSION, digest: 'sha256:two' };
    const row = await readFresh(db, 'installer', { maxAgeMs: 30_000, waitMs: 5_000 });
    expect(row!.data!.digest).toBe('sha256:two');
    expect(row!.observedGeneration).toBe(row!.requestedGeneration);
    expect(row!.ageMs).toBeLessThan(5_000);
  });

  it('without an observer the wait is bounded and the stale row comes back with its age', async () => {
    const db = t.db.database.db;
    await observer.stop();
    try {
      await age('installer', 120);
      const started = Date.now();
      const row = await readFresh(db, 'installer', { maxAgeMs: 30_000, waitMs: 500 });
      expect(Date.now() - started).toBeGreaterThanOrEqual(500);
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(row!.observedGeneration).toBeLessThan(row!.requestedGeneration);
      expect(row!.ageMs).toBeGreaterThanOrEqual(120_000);
    } finally {
      await observer.start();
    }
  });
});

describe('the read endpoints answer from observed rows', () => {
  it('GET /api/version: the observed image with its age; stale rows are refreshed first', async () => {
    observer.world.installer = { ...VERSION, digest: 'sha256:three' };
    await age('installer', 120);
    const v = await get('/api/version');
    expect(v).toMatchObject({ inContainer: true, image: VERSION.image, tag: 'dev-1', digest: 'sha256:three', imageId: 'img-1', containerId: 'c-1' });
    expect(typeof v.observedAt).toBe('string');
    expect(v.ageMs as number).toBeLessThan(5_000);
    // Fresh now: the next read writes no request.
    const gen = (await readObserved(t.db.database.db, 'installer'))!.requestedGeneration;
    await get('/api/version');
    expect((await readObserved(t.db.database.db, 'installer'))!.requestedGeneration).toBe(gen);
  });

  it('GET /api/deployment/status: a row observed before the latest job ended is stale', async () => {
    const db = t.db.database.db;
    observer.world.platform = platformData(['api', 'web']);
    const first = await get('/api/deployment/status');
    expect((first.containers as { service: string }[]).map((c) => c.service)).toEqual(['api', 'web']);
    expect(typeof first.observedAt).toBe('string');
    // A job ends after that observation (its result: a new service); the row is young but stale.
    observer.world.platform = platformData(['api', 'web', 'worker']);
    const jobId = await createJob(db, { kind: 'restart', params: {}, actor: { id: 'bob' } });
    await finishJob(db, jobId, { phase: 'completed', detail: null, exitCode: 0 });
    const after = await get('/api/deployment/status');
    expect((after.containers as { service: string }[]).map((c) => c.service)).toEqual(['api', 'web', 'worker']);
    expect(Date.parse(after.observedAt as string)).toBeGreaterThan(Date.parse(first.observedAt as string));
  });

  it('POST /api/deployment/jobs validates services against the observed list, refreshed when stale', async () => {
    const auth = { authorization: `Bearer ${await t.token('operator')}` };
    observer.world.platform = platformData(['api', 'web', 'queue']);
    await age('platform', 120);
    const ok = await t.app.inject({ method: 'POST', url: '/api/deployment/jobs', headers: auth, payload: { action: 'restart', services: ['queue'] } });
    expect(ok.statusCode, ok.body).toBe(202);
    const bad = await t.app.inject({ method: 'POST', url: '/api/deployment/jobs', headers: auth, payload: { action: 'restart', services: ['nope'] } });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().message).toContain('unknown service: nope (the platform has: api, web, queue)');
  });

  it('GET /api/system/self-update-check: a channel row observed on another build than the running one is read again', async () => {
    const db = t.db.database.db;
    const channel = (current: string): ObservedData['channel'] => ({ channel: 'dev', currentDigest: current, remoteDigest: 'sha256:new', composeChanged: current !== 'sha256:new', errors: [] });
    // Before the update: the old build observed the channel.
    observer.world.installer = { ...VERSION, digest: 'sha256:old' };
    observer.world.channel = channel('sha256:old');
    await age('installer', 120);
    const before = await get('/api/system/self-update-check');
    expect(before).toMatchObject({ updateAvailable: true, currentDigest: 'sha256:old', remoteDigest: 'sha256:new', composeChanged: true });
    // The new build runs; the channel row (young: its bound is minutes) still names the old one.
    observer.world.installer = { ...VERSION, digest: 'sha256:new' };
    observer.world.channel = channel('sha256:new');
    await age('installer', 120);
    const gen = (await readObserved(db, 'channel'))!.requestedGeneration;
    const after = await get('/api/system/self-update-check');
    expect(after).toMatchObject({ updateAvailable: false, currentDigest: 'sha256:new', remoteDigest: 'sha256:new', composeChanged: false });
    expect((await readObserved(db, 'channel'))!.requestedGeneration).toBe(gen + 1);
  });

  it('GET /api/system/self-update-check: a channel row observed before the last update ended is read again (a rollback keeps the build)', async () => {
    const db = t.db.database.db;
    const channel = (remote: string): ObservedData['channel'] => ({ channel: 'dev', currentDigest: 'sha256:new', remoteDigest: remote, composeChanged: false, errors: [] });
    observer.world.channel = channel('sha256:new');
    expect(await get('/api/system/self-update-check')).toMatchObject({ updateAvailable: false, remoteDigest: 'sha256:new' });
    // A build is published, updated to, and rolled back: the same build runs, the row is young.
    observer.world.channel = channel('sha256:crashes');
    const requestId = '00000000-0000-4000-8000-0000000000aa';
    await db.insertInto('self_update_requests').values({ request_id: requestId, actor: 'admin', actor_email: null }).execute();
    await db.insertInto('self_update_status').values({
      request_id: requestId, phase: 'rolled-back', conditions: '[]', action_id: '1', target_digest: 'sha256:crashes', detail: 'rolled back', finished_at: new Date(),
    }).execute();
    const gen = (await readObserved(db, 'channel'))!.requestedGeneration;
    const after = await get('/api/system/self-update-check');
    expect(after).toMatchObject({ updateAvailable: true, currentDigest: 'sha256:new', remoteDigest: 'sha256:crashes', lastUpdate: { status: 'rolled-back' } });
    expect((await readObserved(db, 'channel'))!.requestedGeneration).toBe(gen + 1);
  });
});

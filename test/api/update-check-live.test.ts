// The update check is live (docs/adr/0049-live-update-check.md): every call answers from an
// observation of the channel that began after it, whatever the age of the last one, so a build
// pushed a moment ago is offered and a registry that went away is reported on the first check
// after it. Checks arriving together share observations. The real observer runs here, on a real
// Postgres, with the registry and compose files in memory; the setting keeps its default (the
// observer's own reads of the channel every 300 s).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO, startSelfUpdateApp, type SelfUpdateApp, type SelfUpdateCheck as Check } from '../helpers/api/self-update.ts';
import { TEST_SECRETS } from '../helpers/api/app.ts';
import { sql } from 'kysely';
import { OBSERVED_WRITTEN_CHANNEL, ObservedWrites, observeNow, readObserved, requestRefresh } from '../../src/state/observed.ts';
import { createTestDatabase } from '../helpers/shared/db.ts';

const service = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'amy' };

let t: SelfUpdateApp;
async function check(): Promise<Check> {
  const res = await t.app.inject({ method: 'GET', url: '/api/system/self-update-check', headers: service });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as Check;
}
const resolutions = () => t.engine.calls.filter((c) => c === 'remoteDigest').length;

beforeAll(async () => {
  t = await startSelfUpdateApp({ env: { OBSERVED_CHANNEL_MAX_AGE_SECONDS: '300' } });
});
afterAll(async () => t?.close());

describe('GET /api/system/self-update-check is live', () => {
  it('a build pushed a moment ago is offered at the next check, and the one after it at the check after', async () => {
    expect(await check()).toMatchObject({ updateAvailable: true, remoteDigest: 'sha256:new' });
    t.engine.registry.set(`${REPO}:dev-latest`, 'sha256:newer');
    const started = new Date();
    const c = await check();
    expect(c).toMatchObject({ updateAvailable: true, currentDigest: 'sha256:old', remoteDigest: 'sha256:newer' });
    // The observation began after the call did (database and test clocks are the same host's).
    expect(Date.parse(c.observedAt!)).toBeGreaterThanOrEqual(started.getTime() - 1_000);
    t.engine.registry.set(`${REPO}:dev-latest`, 'sha256:old');
    expect(await check()).toMatchObject({ updateAvailable: false, remoteDigest: 'sha256:old' });
    t.engine.registry.set(`${REPO}:dev-latest`, 'sha256:new');
  });

  it('the registry gone: the first check after it says updateAvailable false, remoteDigest null, error set; back: the build again', async () => {
    expect(await check()).toMatchObject({ updateAvailable: true, remoteDigest: 'sha256:new' });
    t.engine.registryDown = true;
    try {
      const c = await check();
      expect(c).toMatchObject({ updateAvailable: false, currentDigest: 'sha256:old', remoteDigest: null });
      expect(c.error).toMatch(/^registry unreachable: .*connection refused/);
    } finally {
      t.engine.registryDown = false;
    }
    expect(await check()).toMatchObject({ updateAvailable: true, remoteDigest: 'sha256:new' });
  });

  it('the tag gone, then the local compose file unreadable: each on the first check after it', async () => {
    t.engine.registry.delete(`${REPO}:dev-latest`);
    const missing = await check();
    t.engine.registry.set(`${REPO}:dev-latest`, 'sha256:new');
    expect(missing).toMatchObject({ updateAvailable: false, remoteDigest: null });
    expect(missing.error).toMatch(/^not in the registry: tag dev-latest does not exist/);

    t.engine.local = new Error('cannot read /opt/installer/docker-compose.yml: permission denied');
    const unreadable = await check();
    t.engine.local = 'services:\n  backend: {}\n';
    expect(unreadable).toMatchObject({ updateAvailable: true, composeChanged: null });
    expect(unreadable.error).toContain('local compose file unreadable: cannot read /opt/installer/docker-compose.yml: permission denied');
  });

  it('checks arriving together share observations: 20 at once resolve the digest at most twice', async () => {
    await check();
    // A slow registry keeps the first observation open while the others arrive.
    t.engine.onResolve = () => new Promise((r) => setTimeout(r, 300));
    const before = resolutions();
    try {
      const answers = await Promise.all(Array.from({ length: 20 }, () => check()));
      for (const a of answers) expect(a).toMatchObject({ updateAvailable: true, remoteDigest: 'sha256:new' });
    } finally {
      t.engine.onResolve = null;
    }
    // The observation running when a check arrives does not serve it (it may have asked the
    // registry before the build was pushed); the next one serves every check that came meanwhile.
    const made = resolutions() - before;
    expect(made).toBeGreaterThanOrEqual(1);
    expect(made).toBeLessThanOrEqual(2);
  });
});

describe('observeNow', () => {
  it('with no observer: answers when the wait runs out, not fresh, with the older row', async () => {
    const db = await createTestDatabase();
    try {
      const d = db.database.db;
      const waited = Date.now();
      const none = await observeNow(d, 'channel', 300);
      expect(Date.now() - waited).toBeGreaterThanOrEqual(300);
      expect(none.fresh).toBe(false);
      // A request stays unserved: the generation asked for is above the one observed.
      const row = await readObserved(d, 'channel');
      expect(row!.requestedGeneration).toBeGreaterThan(row!.observedGeneration);
      expect(await requestRefresh(d, 'channel')).toBe(row!.requestedGeneration + 1);
    } finally {
      await db.drop();
    }
  });

  it('ObservedWrites: a waiting reader is woken by the write of its key, not by another key\'s, nor misses one heard while it read', async () => {
    const db = await createTestDatabase();
    const writes = new ObservedWrites((channel, onNotify) => db.database.listen(channel, onNotify));
    try {
      const pause = await writes.pause();
      let woken = false;
      const waiting = pause('channel', 60_000).then(() => (woken = true));
      await sql`select pg_notify(${OBSERVED_WRITTEN_CHANNEL}, 'platform')`.execute(db.database.db);
      await new Promise((r) => setTimeout(r, 300));
      expect(woken).toBe(false);
      await sql`select pg_notify(${OBSERVED_WRITTEN_CHANNEL}, 'channel')`.execute(db.database.db);
      await waiting; // within the test's timeout, far below the 60 s pause
      expect(woken).toBe(true);
      // A write heard after the reader's mark (while it read the row) ends its next pause at once.
      const mark = writes.heardOf('channel');
      await sql`select pg_notify(${OBSERVED_WRITTEN_CHANNEL}, 'channel')`.execute(db.database.db);
      await expect.poll(() => writes.heardOf('channel')).toBe(mark + 1);
      await pause('channel', 60_000, mark); // within the test's timeout, far below the 60 s pause
    } finally {
      await writes.close();
      await db.drop();
    }
  });
});

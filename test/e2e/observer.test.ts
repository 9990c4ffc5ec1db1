// The observer against the real engine (docs/adr/0023-observed-state.md): it records a change of
// the platform's containers from the engine's event stream, long before its interval would, and
// only a change: an exec in a container (each healthcheck) is not one. Every self-update check
// observes the channel anew (docs/adr/0049-live-update-check.md): N calls read the local compose
// file N times through one kept reader container, which the backend removes when it stops.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { docker, startPlatform, type PlatformProject } from '../helpers/e2e/rig.ts';
import { ROOT } from '../helpers/shared/process.ts';
import { readObserved } from '../../src/state/observed.ts';
import type { RuntimePort } from '../../src/contracts/ports.ts';
import { KEPT_READER_ROLE, READER_ROLE } from '../../src/adapters/container-files.ts';

const CALLS = 20;
const headers = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'amy' };
let p: PlatformProject;
let t: TestApp | undefined;
let workDir = '';
/** The image the installer here "runs" as, and so the image of its compose readers. */
let imageId = '';

/** Readers (`role`) of this test's image the engine created between two instants (epoch seconds). */
async function readersCreated(since: string, until: string, role: string): Promise<number> {
  // Other files' installers (the stack's) read their compose files with readers of their own image.
  const out = await docker(['events', '--since', since, '--until', until, '--filter', 'type=container', '--filter', 'event=create', '--filter', `label=io.installer.role=${role}`, '--filter', `image=${imageId}`, '--format', '{{.ID}}']);
  return out.split('\n').filter(Boolean).length;
}

/** The kept readers of this test's work dir that exist now. */
async function keptReaders(): Promise<string[]> {
  const ids = (await docker(['ps', '-a', '-q', '--filter', `label=io.installer.role=${KEPT_READER_ROLE}`])).split('\n').filter(Boolean);
  if (!ids.length) return [];
  const seen = JSON.parse(await docker(['inspect', ...ids])) as { Id: string; HostConfig: { Binds: string[] | null } }[];
  return seen.filter((c) => (c.HostConfig.Binds ?? []).some((b) => b.startsWith(`${workDir}:`))).map((c) => c.Id);
}
const epoch = () => (Date.now() / 1000).toFixed(3);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  p = await startPlatform();
  // The installer "runs in a container" of the platform's own image, so that its local compose file
  // is read as in production: through a created container of that image with the work dir mounted.
  const [first] = await p.containers();
  imageId = (JSON.parse(await docker(['inspect', first!.id]))[0] as { Image: string }).Image;
  workDir = mkdtempSync(path.join(tmpdir(), 'observer-work-'));
  writeFileSync(path.join(workDir, 'docker-compose.dev.yml'), readFileSync(path.join(ROOT, 'deploy/docker-compose.dev.yml'), 'utf8'));
  const runtime: RuntimePort = {
    version: async () => ({ inContainer: true, image: '127.0.0.1:5999/installer:dev-1', tag: 'dev-1', digest: 'sha256:running', imageId, containerId: null }),
  };
  t = await startTestApp({
    runtime,
    // Every controller, the observer with them, as the server starts them; the intervals stay the defaults.
    controllers: true,
    env: {
      PLATFORM_DIR: p.dir,
      PLATFORM_PROJECT: p.project,
      INSTALLER_REGISTRY: '127.0.0.1:5999',
      INSTALLER_CHANNEL: 'dev',
      INSTALLER_WORK_DIR: workDir,
      INSTALLER_COMPOSE_FILE: 'docker-compose.dev.yml',
      STAGING_ROOT: path.join(workDir, 'staging'),
    },
  });
}, 300_000);
afterAll(async () => {
  await t?.close();
  await p?.remove();
});

describe('the observer on the real engine', () => {
  it('records the platform containers, and a change of them from the engine events within seconds', async () => {
    const db = t!.db.database.db;
    await expect.poll(async () => (await readObserved(db, 'platform'))?.data?.containers.length ?? 0, { timeout: 20_000 }).toBe((await p.containers()).length);
    const row = (await readObserved(db, 'platform'))!;
    expect(row.conditions.find((c) => c.type === 'EngineReachable')).toMatchObject({ status: 'True' });
    expect(row.data!.services).toEqual(expect.arrayContaining((await p.containers()).map((c) => c.service)));
    const target = (await p.containers())[0]!;
    const started = Date.now();
    await docker(['stop', '-t', '1', target.id]);
    // The interval is 30 s: within 10 s, only the event stream can have told the observer.
    await expect
      .poll(async () => (await readObserved(db, 'platform'))?.data?.containers.find((c) => c.name === target.name)?.state, { timeout: 10_000, interval: 100 })
      .toBe('exited');
    console.log(`observer: container stop seen in the platform row after ${Date.now() - started} ms`);
    const status = await t!.app.inject({ method: 'GET', url: '/api/deployment/status', headers });
    expect(status.statusCode).toBe(200);
    expect(status.json().containers.find((c: { name: string }) => c.name === target.name).state).toBe('exited');
    await docker(['start', target.id]);
  });

  it('reads again for a state change, not for an exec in a container (every healthcheck is one)', async () => {
    const db = t!.db.database.db;
    const observedAt = async (key: 'platform' | 'platformEnv') => (await readObserved(db, key))?.observedAt?.getTime() ?? null;
    await expect.poll(() => observedAt('platformEnv'), { timeout: 20_000 }).not.toBeNull();
    const target = (await p.containers()).find((c) => c.state === 'running')!;
    // What the previous test set off is over: the platform's row holds still for 2 s.
    let settled = await observedAt('platform');
    for (let last = null as number | null; settled !== last; ) {
      last = settled;
      await sleep(2_000);
      settled = await observedAt('platform');
    }
    const before = { platform: settled, env: await observedAt('platformEnv') };
    for (let i = 0; i < 3; i++) await docker(['exec', target.id, 'true']);
    await sleep(1_500);
    // The 30 s interval re-reads every key, the platform's environment with it; an event re-reads the platform alone.
    const tick = (await observedAt('platformEnv')) !== before.env;
    if (!tick) expect(await observedAt('platform'), 'the platform was read again for an exec').toBe(before.platform);
    // The same container restarted: the platform is read again within seconds.
    await docker(['restart', '-t', '1', target.id]);
    await expect.poll(() => observedAt('platform'), { timeout: 10_000, interval: 100 }).toBeGreaterThan(before.platform!);
  });

  it(`self-update-check: each of ${CALLS} calls observes the channel anew, through one kept reader of the work dir, removed at stop`, async () => {
    const check = async () => {
      const res = await t!.app.inject({ method: 'GET', url: '/api/system/self-update-check', headers });
      expect(res.statusCode, res.body).toBe(200);
      return res.json() as { composeChanged: boolean | null; error?: string; observedAt: string | null; ageMs: number | null };
    };
    // A reader a killed backend of another build left for this work dir: the first read removes it.
    const leftover = (await docker(['create', '--label', `io.installer.role=${KEPT_READER_ROLE}`, '-v', `${workDir}:${workDir}:ro`, '--network', 'none', 'installer-rig/busybox:latest', 'true'])).trim();
    const before = epoch();
    let last = 0;
    for (let i = 0; i < CALLS; i++) {
      const c = await check();
      // A new observation each time (docs/adr/0049-live-update-check.md), the local file read in each.
      expect(Date.parse(c.observedAt!)).toBeGreaterThan(last);
      last = Date.parse(c.observedAt!);
      expect(c.error ?? '').not.toContain('local compose file unreadable');
    }
    await sleep(1_000);
    const after = epoch();
    // One reader for every read of the work dir; no one-off reader for it.
    expect(await readersCreated(before, after, KEPT_READER_ROLE)).toBe(1);
    expect(await readersCreated(before, after, READER_ROLE)).toBe(0);
    expect(await keptReaders()).toHaveLength(1);
    expect(await keptReaders()).not.toContain(leftover);
    await t!.close();
    t = undefined;
    expect(await keptReaders()).toEqual([]);
  });
});

// The update pill, its dialog and the restart overlay in real headless Chromium (spec "Interface
// behavior during an update", "Limits"). The page runs on Playwright's fake clock, so the
// production timing (check every 30 min, health every 3 s, ~20 s without a gap, give up after
// 10 min) is driven exactly; GET /api/health and the self-update endpoints are answered by a
// controllable stand-in where a test needs a restart the rig cannot stage, and by the real backend
// in the last tests.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import type { Browser, Page, Route } from 'playwright-core';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { startPlatform, type PlatformProject } from '../helpers/e2e/rig.ts';
import { ensureUiBuilt, launchChromium, newPage, pageClock, shoot, useToken, type PageClock } from '../helpers/e2e/ui.ts';
import { finishJob } from '../../src/state/jobs.ts';
import { INSTANCE_HEADER } from '../../src/contracts/instance.ts';
import { NOT_VERIFIED } from '../../src/contracts/signatures.ts';

const CURRENT = `sha256:${'a1'.repeat(32)}`;
const REMOTE = `sha256:${'b2'.repeat(32)}`;
let T0 = 0; // the page's clock starts at the real time (whole second), so ages such as `12 s ago` read right
const MIN = 60_000;

let p: PlatformProject;
let t: TestApp;
let base: string;
let browser: Browser;
const poll = <T>(fn: () => T | Promise<T>, timeout = 15_000) => expect.poll(fn, { timeout, interval: 50 });

beforeAll(async () => {
  ensureUiBuilt();
  p = await startPlatform();
  t = await startTestApp({ controllers: true, env: { PLATFORM_DIR: p.dir, PLATFORM_PROJECT: p.project } });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
  await p?.remove();
});

interface Stand {
  checks: number;
  /** The page's clock: every move waits for the page's requests to be answered, before and after. */
  clock: PageClock;
  health: { at: number }[];
  healthUp: boolean; // what GET /api/health does now
  /** The process GET /api/health names as the one answering (`x-installer-instance`); none when null. */
  instance: string | null;
  check: Record<string, unknown>;
  /** What GET /api/system/self-update-check does now: answer, or refuse the connection. */
  checkUp: boolean;
  report: Record<string, unknown>; // GET /api/system/self-update/preflight's answer (ui-preflight-report tests what the dialog makes of it)
  starts: number;
  documents: number;
}

/** A page on the fake clock whose self-update endpoints and health answer as the test says. */
async function standIn(page: Page, opts: { realStart?: boolean } = {}): Promise<Stand> {
  const s: Stand = {
    checks: 0,
    clock: pageClock(page),
    health: [],
    healthUp: true,
    instance: null,
    check: {
      updateAvailable: true, currentDigest: CURRENT, remoteDigest: REMOTE, composeChanged: false, lastUpdate: { status: null, detail: null, at: null, targetDigest: null },
      signature: { policy: 'off', result: null, detail: NOT_VERIFIED, refused: false },
    },
    checkUp: true,
    report: { current: { digest: CURRENT, version: null }, target: { digest: REMOTE, version: null }, composeDiff: null, migrations: null, checks: [], blocked: false },
    starts: 0,
    documents: 0,
  };
  page.on('request', (r) => {
    if (r.resourceType() === 'document') s.documents++;
  });
  await page.route('**/api/system/self-update-check', async (route: Route) => {
    s.checks++;
    if (s.checkUp) await route.fulfill({ json: s.check });
    else await route.abort('connectionrefused');
  });
  await page.route('**/api/system/self-update/preflight', (route: Route) => route.fulfill({ json: s.report }));
  if (!opts.realStart) {
    await page.route('**/api/system/self-update', async (route: Route) => {
      if (route.request().method() !== 'POST') return route.fallback();
      s.starts++;
      // The process that accepts the update names itself, as its health answers do.
      await route.fulfill({
        json: { started: true, targetDigest: REMOTE, message: `Preflight passed; installer-self-updater is switching the installer to prod-latest (${REMOTE}).` },
        headers: s.instance ? { [INSTANCE_HEADER]: s.instance } : {},
      });
    });
  }
  await page.route('**/api/health', async (route: Route) => {
    s.health.push({ at: await page.evaluate(() => Date.now()).catch(() => -1) });
    if (s.healthUp) await route.fulfill({ json: { status: 'ok', db: 'up' }, headers: s.instance ? { [INSTANCE_HEADER]: s.instance } : {} });
    else await route.abort('connectionrefused');
  });
  T0 = Math.floor(Date.now() / 1000) * 1000;
  await page.clock.install({ time: T0 });
  return s;
}

async function openApp(page: Page, s: Stand, path = '/') {
  await page.goto(`${base}${path}`);
  await page.getByTestId('user').waitFor();
  await poll(() => s.checks).toBe(1);
}

/** Confirms the update in the dialog with the clock paused: from here on, time moves only when the test says. */
async function startUpdate(page: Page, s: Stand): Promise<number> {
  await s.clock.pauseAt(T0 + MIN);
  await page.getByTestId('update-pill').click();
  await page.getByTestId('update-dialog').getByRole('button', { name: 'Update now' }).click();
  await page.getByTestId('update-overlay').waitFor();
  expect(s.starts).toBe(1);
  return page.evaluate(() => Date.now());
}

describe('update pill', () => {
  it('checks on load and every 30 minutes, shows both digests, and opens the confirmation dialog', async () => {
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('viewer'));
      const s = await standIn(page);
      s.check = { ...s.check, updateAvailable: false };
      await openApp(page, s);
      expect(await page.getByTestId('update-pill').count()).toBe(0);
      // The next check is due 30 minutes after load, not before.
      s.check = { ...s.check, updateAvailable: true };
      await s.clock.pauseAt(T0 + MIN);
      await s.clock.runFor(28 * MIN);
      expect(s.checks).toBe(1);
      expect(await page.getByTestId('update-pill').count()).toBe(0);
      await s.clock.runFor(2 * MIN);
      await poll(() => s.checks).toBe(2);
      const pill = page.getByTestId('update-pill');
      await poll(() => pill.textContent()).toContain('Manager update available');
      expect(await pill.getAttribute('title')).toBe(`Current: ${CURRENT}\nRemote: ${REMOTE}`);
      await s.clock.runFor(30 * MIN);
      await poll(() => s.checks).toBe(3);
      await page.clock.resume();
      await pill.hover();
      await poll(() => page.locator('#update-pill-tip').isVisible()).toBe(true);
      expect(await page.locator('#update-pill-tip').textContent()).toBe(`Current: ${CURRENT}Remote: ${REMOTE}`);
      await shoot(page, 'update-pill', { doc: true });

      await pill.click();
      const dialog = page.getByTestId('update-dialog');
      const text = (await dialog.textContent()) ?? '';
      expect(text).toContain('The installer restarts.');
      expect(text).toContain('The platform stack is not touched');
      expect(text).toContain('about one to three minutes without a connection');
      expect(await dialog.getByTestId('update-dialog-signature').textContent()).toBe('Updates are not verified: no signing key is configured (SIGNATURE_PUBLIC_KEYS_FILE).');
      await shoot(page, 'update-dialog', { doc: true });
      await dialog.getByRole('button', { name: 'Cancel' }).click();
      expect(await dialog.count()).toBe(0);
    } finally {
      await context.close();
    }
  });

  it("the dialog says what the new build's signature is: verified by a key, not verified under warn, refused under require", async () => {
    const cases = [
      [{ policy: 'require', result: 'verified', detail: 'the build sha256:b2b2b2b2b2b2… is signed by cosign.pub (0123456789abcdef)', keyId: 'cosign.pub (0123456789abcdef)', refused: false }, 'muted', 'The build sha256:b2b2b2b2b2b2… is signed by cosign.pub (0123456789abcdef).'],
      [{ policy: 'warn', result: 'no-signature', detail: 'the build sha256:b2b2b2b2b2b2… has no signature', refused: false }, 'notice warn', 'This build is not verified: the build sha256:b2b2b2b2b2b2… has no signature. The update goes on (SIGNATURE_POLICY=warn).'],
      [{ policy: 'require', result: 'unknown-key', detail: 'the build sha256:b2b2b2b2b2b2… is signed, but by no trusted key', refused: true }, 'notice bad', 'This build is not verified, and the installer refuses it: the build sha256:b2b2b2b2b2b2… is signed, but by no trusted key.'],
    ] as const;
    for (const [signature, cls, text] of cases) {
      const { context, page } = await newPage(browser);
      try {
        await useToken(context, await t.token('viewer'));
        const s = await standIn(page);
        s.check = { ...s.check, signature };
        await openApp(page, s);
        await page.getByTestId('update-pill').click();
        const line = page.getByTestId('update-dialog').getByTestId('update-dialog-signature');
        expect(await line.textContent()).toBe(text);
        expect(await line.getAttribute('class')).toBe(cls);
      } finally {
        await context.close();
      }
    }
  });

  it('a check that fails on load is tried again every 5 s until it answers, then every 30 minutes', async () => {
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('viewer'));
      const s = await standIn(page);
      s.checkUp = false;
      await openApp(page, s);
      await poll(() => page.getByTestId('update-check').textContent()).toContain('the check failed');
      expect(await page.getByTestId('last-update').textContent()).toContain('never updated');
      // Pausing jumps the clock past the retries due meanwhile; the check they send may still be in
      // flight. Once every check is answered, the one retry due is 5 s after the pause.
      await s.clock.pauseAt(T0 + MIN);
      const before = s.checks;
      await s.clock.runFor(4_999);
      expect(s.checks).toBe(before);
      await s.clock.runFor(1);
      await poll(() => s.checks).toBe(before + 1);
      await s.clock.settled();
      s.checkUp = true;
      s.check = { ...s.check, lastUpdate: { status: 'rolled-back', detail: 'the new build never became healthy', at: new Date(T0).toISOString(), targetDigest: REMOTE } };
      await s.clock.runFor(5_000);
      await poll(() => s.checks).toBe(before + 2);
      await poll(() => page.getByTestId('last-update').textContent()).toContain('rolled-back');
      await s.clock.settled();
      // Answered: the next check is the scheduled one, not another 5 s retry.
      await s.clock.runFor(10 * MIN);
      expect(s.checks).toBe(before + 2);
    } finally {
      await context.close();
    }
  });
});

describe('restart overlay', () => {
  it('polls /api/health every 3 s and reloads once health comes back after a real gap', async () => {
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('operator'));
      const s = await standIn(page);
      await openApp(page, s);
      const started = await startUpdate(page, s);
      expect(s.health).toHaveLength(0);
      // Nothing before the first interval is over …
      await s.clock.runFor(2_999);
      expect(s.health).toHaveLength(0);
      // … then one request per 3 s, at 3 s, 6 s, …: the old backend still answers at first.
      await s.clock.runFor(1);
      await poll(() => s.health.length).toBe(1);
      await s.clock.runFor(2_999);
      expect(s.health).toHaveLength(1);
      await s.clock.runFor(1);
      await poll(() => s.health.length).toBe(2);
      // Health fails: the backend is restarting. No reload while it is down.
      s.healthUp = false;
      await s.clock.runFor(3_000);
      await poll(() => s.health.length).toBe(3);
      await poll(() => page.getByTestId('overlay-last').textContent()).toBe('no answer: the installer is restarting');
      await s.clock.runFor(3_000);
      await poll(() => s.health.length).toBe(4);
      expect(s.health.map((h) => h.at - started)).toEqual([3_000, 6_000, 9_000, 12_000]);
      expect(s.documents).toBe(1);
      expect(await page.getByTestId('overlay-polls').textContent()).toBe('4 (2 without an answer)');
      await shoot(page, 'update-overlay', { doc: true });
      // Back: the page reloads at the first healthy answer after the gap.
      s.healthUp = true;
      s.check = { ...s.check, updateAvailable: false, currentDigest: REMOTE, lastUpdate: { status: 'completed', detail: `updated to prod-latest (${REMOTE}) from ${CURRENT}`, at: new Date(T0 + 2 * MIN).toISOString(), targetDigest: REMOTE } };
      await s.clock.runFor(3_000);
      await poll(() => s.documents).toBe(2);
      expect(s.health).toHaveLength(5);
      await page.clock.resume();
      // The reloaded page: no pill, and the outcome of the update.
      await page.getByTestId('user').waitFor();
      await poll(() => page.getByTestId('last-update').textContent()).toContain('completed');
      expect(await page.getByTestId('last-update').textContent()).toContain(`updated to prod-latest (${REMOTE})`);
      expect(await page.getByTestId('update-pill').count()).toBe(0);
      expect(await page.getByTestId('update-overlay').count()).toBe(0);
    } finally {
      await context.close();
    }
  });

  /**
   * A viewer confirms the update while the stand-in answers as `instance` (the start and health
   * alike); `then` drives the clock from the confirmation, given its time.
   */
  async function confirmedAs(instance: string, then: (page: Page, s: Stand, started: number) => Promise<void>) {
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('viewer'));
      const s = await standIn(page);
      s.instance = instance;
      await openApp(page, s);
      await then(page, s, await startUpdate(page, s));
      await page.clock.resume();
    } finally {
      await context.close();
    }
  }

  it('a switch between two polls shows as another process answering: it reloads at that answer', async () => {
    await confirmedAs('old-backend', async (page, s, started) => {
      await s.clock.runFor(3_000);
      await poll(() => s.health.length).toBe(1);
      await s.clock.runFor(3_000);
      await poll(() => s.health.length).toBe(2);
      expect(s.documents).toBe(1);
      // The old backend went and the new one came between two polls: no failed answer, another process.
      s.instance = 'new-backend';
      await s.clock.runFor(3_000);
      await poll(() => s.documents).toBe(2);
      expect(s.health.map((h) => h.at - started)).toEqual([3_000, 6_000, 9_000]);
    });
  });

  it('a switch done before the first poll shows as another process than the one that accepted the update: it reloads at that first answer', async () => {
    await confirmedAs('old-backend', async (page, s, started) => {
      // The whole switch fell within the first poll interval: the first answer is already the new process.
      s.instance = 'new-backend';
      await s.clock.runFor(3_000);
      await poll(() => s.documents).toBe(2);
      expect(s.health.map((h) => h.at - started)).toEqual([3_000]);
    });
  });

  it('without a gap it waits about 20 s before reloading', async () => {
    // The same process answers every time: nothing was replaced.
    await confirmedAs('the-only-backend', async (page, s, started) => {
      for (let i = 1; i <= 6; i++) {
        await s.clock.runFor(3_000);
        await poll(() => s.health.length).toBe(i);
      }
      // 18 s of healthy answers: still waiting (a restart may fall between two polls).
      expect(s.documents).toBe(1);
      expect(await page.getByTestId('update-overlay').getAttribute('data-phase')).toBe('waiting');
      await s.clock.runFor(3_000);
      await poll(() => s.documents).toBe(2);
      expect(s.health.map((h) => h.at - started)).toEqual([3_000, 6_000, 9_000, 12_000, 15_000, 18_000, 21_000]);
    });
  });

  it('gives up after 10 minutes with what to do next', async () => {
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('viewer'));
      const s = await standIn(page);
      await openApp(page, s);
      await startUpdate(page, s);
      s.healthUp = false;
      // A minute of failing polls, at the usual cadence.
      for (let i = 1; i <= 20; i++) {
        await s.clock.runFor(3_000);
        await poll(() => s.health.length).toBe(i);
      }
      await s.clock.runFor(10 * MIN - 60_000 - 1_000);
      expect(await page.getByTestId('overlay-gave-up').count()).toBe(0);
      expect(await page.getByTestId('update-overlay').getAttribute('data-phase')).toBe('waiting');
      await s.clock.runFor(1_000);
      const gaveUp = page.getByTestId('overlay-gave-up');
      await poll(() => gaveUp.count()).toBe(1);
      const text = (await gaveUp.textContent()) ?? '';
      expect(text).toContain('has not come back within 10 minutes');
      expect(text).toContain('docker logs installer-backend');
      expect(text).toContain('docker logs installer-self-updater');
      expect(text).toContain('<work-dir>/.self-update-status');
      expect(text).toContain('docker compose pull && docker compose up -d');
      // It stops polling and does not reload by itself.
      const n = s.health.length;
      await s.clock.runFor(5 * MIN);
      expect(s.health.length).toBe(n);
      expect(s.documents).toBe(1);
      await page.clock.resume();
      await shoot(page, 'update-gave-up', { doc: true });
    } finally {
      await context.close();
    }
  });
});

describe('against the real self-update endpoints', () => {
  it('reports the real check, and shows the 409 of a real start while a deployment job runs', async () => {
    const db = t.db.database.db;
    const jobId = randomUUID();
    await db.insertInto('deployment_jobs').values({ job_id: jobId, kind: 'restart', params: '{}', actor: 'operator', actor_email: null, cancel_requested_by: null, cancel_requested_at: null }).execute();
    await db
      .insertInto('deployment_job_status')
      .values({
        job_id: jobId, phase: 'running', conditions: '[]', snapshot: null, chart_version: null, claimed_by: 'ui-test', started_at: new Date(), finished_at: null,
        exit_code: null, detail: null, last_output_at: null, hung_deadline: null, runner_pid: null,
      })
      .execute();
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('operator'));
      // The real check: this test backend runs outside a container, so it knows no digest and offers no update.
      await page.goto(`${base}/`);
      await poll(() => page.getByTestId('update-check').textContent()).toContain('current digest unknown');
      expect(await page.getByTestId('update-pill').count()).toBe(0);
      expect(await page.getByTestId('last-update').textContent()).toBe('never updated');
      // Offer the update (the stand-in check), and let the real POST answer.
      await page.route('**/api/system/self-update-check', (route) =>
        route.fulfill({ json: { updateAvailable: true, currentDigest: CURRENT, remoteDigest: REMOTE, composeChanged: null, lastUpdate: { status: null, detail: null, at: null, targetDigest: null } } }),
      );
      await page.reload();
      await page.getByTestId('update-pill').click();
      const dialog = page.getByTestId('update-dialog');
      await dialog.getByRole('button', { name: 'Update now' }).click();
      await poll(() => dialog.getByRole('alert').textContent()).toContain(`Not started: deployment job ${jobId} (restart) is running`);
      expect(await page.getByTestId('update-overlay').count()).toBe(0);
      expect(await db.selectFrom('self_update_requests').selectAll().execute()).toHaveLength(0);
    } finally {
      await context.close();
      await finishJob(db, jobId, { phase: 'failed', detail: 'ended by the UI test', exitCode: null });
    }
  });
});

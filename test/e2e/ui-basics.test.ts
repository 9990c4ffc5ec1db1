// The operator UI's basics in real headless Chromium against the real backend: every page checked
// by axe-core (no serious or critical violation) in the light and the dark scheme, at desktop width
// and at a phone's 390 px without page-level horizontal scroll; a title per page and focus on its
// heading after a navigation; dialogs as native modal <dialog>s that keep focus and give it back;
// polling that rests while the tab is hidden and refreshes when it is shown again.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { startTestApp, PASSWORDS, type TestApp } from '../helpers/api/app.ts';
import { ensureUiBuilt, expectAccessible, expectNoSideScroll, launchChromium, newPage, pageClock, shoot, signIn, useToken, type PageGlobals } from '../helpers/e2e/ui.ts';
import { createJob, finishJob } from '../../src/state/jobs.ts';
import { recordFinished, recordStarted } from '../../src/state/actions.ts';

let t: TestApp;
let base: string;
let browser: Browser;
let jobId: string;
const poll = <T>(fn: () => T | Promise<T>, timeout = 15_000) => expect.poll(fn, { timeout, interval: 100 });

const PHONE = { width: 390, height: 844 };
const SCHEMES = ['light', 'dark'] as const;
/** The screenshots docs/ui.md shows (page-size-scheme); all are saved as test artifacts. */
const DOC_SHOTS = new Set(['status-phone-light', 'status-phone-dark', 'job-phone-dark', 'audit-desktop-dark', 'users-desktop-dark', 'dialog-phone-dark']);

interface PageDef {
  name: string;
  path: () => string;
  h1: string | RegExp;
  title: string | RegExp;
}

/** Every page of the app, as an admin sees it (sign-in is visited signed out). */
const PAGES: PageDef[] = [
  { name: 'status', path: () => '/', h1: 'Platform status', title: 'Platform status · Installer' },
  { name: 'job', path: () => `/jobs/${jobId}`, h1: /^Job restart/, title: /^Job [0-9a-f]{8} · Installer$/ },
  { name: 'logs', path: () => '/logs', h1: 'Container logs', title: 'Container logs · Installer' },
  { name: 'audit', path: () => '/audit', h1: 'Audit trail', title: 'Audit trail · Installer' },
  { name: 'machines', path: () => '/machines', h1: 'Machine state', title: 'Machine state · Installer' },
  { name: 'migrate', path: () => '/migrate', h1: 'Host migration', title: 'Host migration · Installer' },
  { name: 'password', path: () => '/password', h1: 'Change password', title: 'Change password · Installer' },
  { name: 'users', path: () => '/users', h1: 'Users', title: 'Users · Installer' },
];

beforeAll(async () => {
  ensureUiBuilt();
  t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_MINUTE: '1000', PLATFORM_URL: 'https://platform.example.test' } });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  browser = await launchChromium();

  // A finished restart with output, a failed pull, and their audit rows: pages with content.
  const db = t.db.database.db;
  const actor = { id: 'operator', email: 'operator@example.test' };
  jobId = await createJob(db, { kind: 'restart', params: { services: ['web'] }, actor });
  const restart = await recordStarted(db, { kind: 'restart', actor, jobId });
  for (const [type, payload] of [
    ['phase', { phase: 'started', kind: 'restart', services: ['web'] }],
    ['phase', { phase: 'compose', command: 'docker compose restart web' }],
    ['output', { stream: 'stdout', line: ' Container platform-web-1  Restarting' }],
    ['output', { stream: 'stderr', line: ' Container platform-web-1  Started' }],
    ['warning', { message: 'web has no health check' }],
    ['finished', { outcome: 'completed', state: 'done', exitCode: 0, detail: null }],
  ] as const) {
    await t.wired.events.append(jobId, type, payload);
  }
  await finishJob(db, jobId, { phase: 'completed', detail: null, exitCode: 0 });
  await recordFinished(db, restart.id, { status: 'completed', exitCode: 0 });
  const pullId = await createJob(db, { kind: 'pull', params: {}, actor });
  await finishJob(db, pullId, { phase: 'failed', detail: 'registry.example.test: connection refused', exitCode: 1 });
  const pull = await recordStarted(db, { kind: 'pull', actor, jobId: pullId });
  await recordFinished(db, pull.id, { status: 'failed', exitCode: 1, detail: 'registry.example.test: connection refused' });
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
});

/** Opens `path` with a full load and waits until its heading shows and nothing says Loading…. */
async function open(page: Page, def: PageDef): Promise<void> {
  await page.goto(`${base}${def.path()}`);
  await page.getByRole('heading', { level: 1, name: def.h1 }).waitFor();
  await poll(() => page.locator('main').getByText('Loading…').count()).toBe(0);
  if (def.name === 'job') await page.getByTestId('job-finished').waitFor();
  if (def.name === 'machines') await page.getByTestId('chart-job').waitFor();
}

describe('UI basics', () => {
  for (const scheme of SCHEMES) {
    for (const size of ['desktop', 'phone'] as const) {
      it(`every page has no serious or critical accessibility violation (${scheme}, ${size})${size === 'phone' ? ' and no horizontal scroll at 390 px' : ''}`, async () => {
        const { context, page } = await newPage(browser, { colorScheme: scheme, bypassCSP: true, ...(size === 'phone' ? { viewport: PHONE } : {}) });
        const shot = (name: string) => shoot(page, `basics-${name}-${size}-${scheme}`, { doc: DOC_SHOTS.has(`${name}-${size}-${scheme}`) });
        try {
          await page.goto(`${base}/login`);
          await page.getByRole('button', { name: 'Sign in' }).waitFor();
          expect(await page.title()).toBe('Sign in · Installer');
          expect(await page.evaluate(() => {
            const { document, getComputedStyle } = globalThis as unknown as PageGlobals;
            return getComputedStyle(document.documentElement).colorScheme;
          })).toBe('light dark');
          await expectAccessible(page, `sign-in (${scheme}, ${size})`);
          if (size === 'phone') await expectNoSideScroll(page, 'sign-in', PHONE.width);
          await shot('sign-in');

          await signIn(page, base, 'admin');
          for (const def of PAGES) {
            await open(page, def);
            // The title follows the page in an effect after its render: it can trail the heading.
            await poll(() => page.title()).toMatch(def.title instanceof RegExp ? def.title : new RegExp(`^${def.title}$`));
            await expectAccessible(page, `${def.name} (${scheme}, ${size})`);
            if (size === 'phone') await expectNoSideScroll(page, def.name, PHONE.width);
            await shot(def.name);
          }

          // A dialog open: the reset-password one on the Users page (a field, a disabled button).
          await page.locator('tr[data-user="viewer"]').getByRole('button', { name: 'Reset password…' }).click();
          await page.getByTestId('reset-password').waitFor();
          await expectAccessible(page, `reset-password dialog (${scheme}, ${size})`);
          if (size === 'phone') await expectNoSideScroll(page, 'reset-password dialog', PHONE.width);
          await shot('dialog');
        } finally {
          await context.close();
        }
      }, 180_000);
    }
  }

  it('gives each page its title and, after a navigation, focus on its heading and an announcement', async () => {
    const { context, page } = await newPage(browser);
    try {
      await signIn(page, base, 'admin');
      await poll(() => page.title()).toBe('Platform status · Installer');
      const focused = () =>
        page.evaluate(() => {
          const el = (globalThis as unknown as PageGlobals).document.activeElement;
          return { tag: el?.tagName ?? null, text: el?.textContent ?? null, tabindex: el?.getAttribute('tabindex') ?? null };
        });
      const nav = page.getByRole('navigation', { name: 'Main' });
      for (const [link, h1] of [
        ['Audit trail', 'Audit trail'],
        ['Logs', 'Container logs'],
        ['Machine state', 'Machine state'],
        ['Host migration', 'Host migration'],
        ['Users', 'Users'],
        ['Status', 'Platform status'],
      ] as const) {
        await nav.getByRole('link', { name: link, exact: true }).click();
        await poll(() => page.title()).toBe(`${h1} · Installer`);
        await poll(focused).toEqual({ tag: 'H1', text: h1, tabindex: '-1' });
        expect(await page.locator('#announcer').textContent()).toBe(h1);
      }
      // A job link from the status page, then the browser's Back button.
      await page.getByTestId('jobs').getByRole('link').last().click();
      await poll(() => page.title()).toMatch(/^Job [0-9a-f]{8} · Installer$/);
      await poll(focused).toMatchObject({ tag: 'H1', tabindex: '-1' });
      await page.goBack();
      await poll(() => page.title()).toBe('Platform status · Installer');
      await poll(focused).toEqual({ tag: 'H1', text: 'Platform status', tabindex: '-1' });
      await page.getByRole('link', { name: 'Password' }).click();
      await poll(() => page.title()).toBe('Change password · Installer');
      await page.goto(`${base}/nowhere`);
      await poll(() => page.title()).toBe('Not found · Installer');
      // Signing out lands on sign-in, titled so, and the server refuses the token from then on.
      const token = await page.evaluate(() => (globalThis as unknown as { sessionStorage: { getItem(k: string): string | null } }).sessionStorage.getItem('installer.token'));
      await page.getByRole('button', { name: 'Sign out' }).click();
      await poll(() => page.title()).toBe('Sign in · Installer');
      await poll(focused).toEqual({ tag: 'H1', text: 'Sign in', tabindex: '-1' });
      const after = await fetch(`${base}/api/auth/me`, { headers: { authorization: `Bearer ${token}` } });
      expect(after.status).toBe(401);
      expect(((await after.json()) as { message: string }).message).toBe('this token was signed out: sign in again');
    } finally {
      await context.close();
    }
  }, 120_000);

  it('opens every dialog as a native modal <dialog>: focus stays inside, Escape closes, focus returns to the opener', async () => {
    const { context, page } = await newPage(browser);
    try {
      // A newer installer build, so that the header offers the update (its dialog is checked last).
      await page.route('**/api/system/self-update-check', (route) =>
        route.fulfill({
          json: { updateAvailable: true, currentDigest: `sha256:${'a1'.repeat(32)}`, remoteDigest: `sha256:${'b2'.repeat(32)}`, composeChanged: false, lastUpdate: { status: null, detail: null, at: null, targetDigest: null } },
        }),
      );
      await signIn(page, base, 'admin', '/users');
      await page.locator('tr[data-user]').first().waitFor();

      const state = () =>
        page.evaluate(() => {
          const { document } = globalThis as unknown as PageGlobals;
          const d = document.querySelector('dialog');
          const el = document.activeElement;
          return {
            dialogs: document.querySelectorAll('dialog').length,
            modal: d ? d.matches(':modal') : false,
            focusInside: !!d && !!el && d.contains(el),
            focused: el ? `${el.tagName}:${(el.textContent ?? '').trim() || (el.getAttribute('name') ?? '')}` : null,
          };
        });
      /** Tabs (and shift-tabs) around the open dialog: focus never leaves it. */
      const tabAround = async () => {
        for (let i = 0; i < 6; i++) {
          await page.keyboard.press('Tab');
          expect((await state()).focusInside, `after ${i + 1} Tab`).toBe(true);
        }
        for (let i = 0; i < 6; i++) {
          await page.keyboard.press('Shift+Tab');
          expect((await state()).focusInside, `after ${i + 1} Shift+Tab`).toBe(true);
        }
      };

      // Users: reset password (focus starts in its field) and remove.
      const reset = page.locator('tr[data-user="viewer"]').getByRole('button', { name: 'Reset password…' });
      await reset.click();
      await poll(state).toEqual({ dialogs: 1, modal: true, focusInside: true, focused: 'INPUT:resetPassword' });
      expect(await page.getByTestId('reset-password').evaluate((d) => d.tagName)).toBe('DIALOG');
      await tabAround();
      await page.keyboard.press('Escape');
      await poll(state).toMatchObject({ dialogs: 0, focused: 'BUTTON:Reset password…' });
      expect(await reset.evaluate((b) => b === (globalThis as unknown as PageGlobals).document.activeElement)).toBe(true);

      const remove = page.locator('tr[data-user="viewer"]').getByRole('button', { name: 'Remove…' });
      await remove.focus();
      await page.keyboard.press('Enter');
      await poll(state).toEqual({ dialogs: 1, modal: true, focusInside: true, focused: 'BUTTON:Remove' });
      await tabAround();
      // Cancel by its button also gives focus back.
      await page.getByTestId('remove-user').getByRole('button', { name: 'Cancel' }).click();
      await poll(state).toMatchObject({ dialogs: 0 });
      expect(await remove.evaluate((b) => b === (globalThis as unknown as PageGlobals).document.activeElement)).toBe(true);

      // Status: a destructive action's confirmation.
      await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Status' }).click();
      const restart = page.getByTestId('actions').getByRole('button', { name: 'Restart', exact: true });
      await restart.click();
      await poll(state).toEqual({ dialogs: 1, modal: true, focusInside: true, focused: 'BUTTON:Restart' });
      await page.keyboard.press('Escape');
      await poll(state).toMatchObject({ dialogs: 0 });
      expect(await restart.evaluate((b) => b === (globalThis as unknown as PageGlobals).document.activeElement)).toBe(true);

      // Host migration: the typed confirmation (focus starts in the field).
      await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Host migration' }).click();
      await page.getByTestId('vm-user-form').getByLabel('VM user').fill('ubuntu');
      await page.getByTestId('vm-user-form').getByRole('button', { name: 'Save' }).click();
      await page.getByTestId('vm-user-saved').waitFor();
      const run = page.getByTestId('run-migration');
      await poll(() => run.isEnabled()).toBe(true);
      await run.click();
      await poll(state).toMatchObject({ dialogs: 1, modal: true, focusInside: true, focused: 'INPUT:' });
      await tabAround();
      await page.keyboard.press('Escape');
      await poll(state).toMatchObject({ dialogs: 0 });
      expect(await run.evaluate((b) => b === (globalThis as unknown as PageGlobals).document.activeElement)).toBe(true);

      // The installer update's confirmation, opened from the header's pill.
      const pill = page.getByTestId('update-pill');
      await pill.click();
      await poll(state).toEqual({ dialogs: 1, modal: true, focusInside: true, focused: 'BUTTON:Update now' });
      expect(await page.getByTestId('update-dialog').evaluate((d) => d.tagName)).toBe('DIALOG');
      await tabAround();
      await page.keyboard.press('Escape');
      await poll(state).toMatchObject({ dialogs: 0 });
      expect(await pill.evaluate((b) => b === (globalThis as unknown as PageGlobals).document.activeElement)).toBe(true);
    } finally {
      await context.close();
    }
  }, 120_000);

  it('polls nothing while the tab is hidden and refreshes at once when it is shown', async () => {
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('admin'));
      // The tab's visibility, as the test says (a headless page is always visible otherwise).
      await context.addInitScript(() => {
        const w = globalThis as unknown as {
          __hidden: boolean;
          __setHidden: (h: boolean) => void;
          Document: { prototype: object };
          document: { dispatchEvent(e: Event): boolean };
        };
        w.__hidden = false;
        Object.defineProperty(w.Document.prototype, 'visibilityState', { configurable: true, get: () => (w.__hidden ? 'hidden' : 'visible') });
        Object.defineProperty(w.Document.prototype, 'hidden', { configurable: true, get: () => w.__hidden });
        w.__setHidden = (h) => {
          w.__hidden = h;
          w.document.dispatchEvent(new Event('visibilitychange'));
        };
      });
      const counts = new Map<string, number>();
      page.on('request', (r) => {
        const p = new URL(r.url()).pathname;
        counts.set(p, (counts.get(p) ?? 0) + 1);
      });
      const n = (p: string) => counts.get(p) ?? 0;
      // The page schedules its next poll only once an answer is in: its time moves only when no
      // request is outstanding.
      const clock = pageClock(page);
      await page.route('**/api/system/self-update-check', (route) =>
        route.fulfill({ json: { updateAvailable: false, currentDigest: null, remoteDigest: null, composeChanged: false, lastUpdate: { status: null, detail: null, at: null, targetDigest: null } } }),
      );
      const setHidden = (h: boolean) => page.evaluate((v) => (globalThis as unknown as { __setHidden: (h: boolean) => void }).__setHidden(v), h);
      // The page's time is paused and moves only with clock.runFor(), however slow the machine is: a
      // page whose time flowed could poll again before the counts below are read.
      const t0 = Date.now();
      await page.clock.install({ time: t0 });
      await clock.pauseAt(t0 + 1_000);
      await page.goto(`${base}/`);
      const heading = page.getByRole('heading', { name: 'Platform status' });
      for (let i = 0; i < 100 && !(await heading.isVisible()); i++) await clock.runFor(10);
      await heading.waitFor();
      const STATUS = '/api/deployment/status';
      const JOBS = '/api/deployment/jobs';
      const CHECK = '/api/system/self-update-check';
      // Effects run on animation frames and timers: let the paused page take its first steps
      // (well under the 5 s of a poll), then the first request of each must have gone out.
      for (let i = 0; i < 100 && [n(STATUS), n(JOBS), n(CHECK)].join() !== '1,1,1'; i++) await clock.runFor(20);
      await poll(() => [n(STATUS), n(JOBS), n(CHECK)]).toEqual([1, 1, 1]);

      // Visible: every 5 s.
      await clock.runFor(5_000);
      await poll(() => [n(STATUS), n(JOBS)]).toEqual([2, 2]);

      // Hidden: nothing for a long while, not even the 30-minute update check.
      await setHidden(true);
      await clock.runFor(31 * 60_000);
      await new Promise((r) => setTimeout(r, 500));
      expect([n(STATUS), n(JOBS), n(CHECK)]).toEqual([2, 2, 1]);

      // Shown again: everything refreshes at once, then the rhythm resumes.
      await setHidden(false);
      await poll(() => [n(STATUS), n(JOBS), n(CHECK)]).toEqual([3, 3, 2]);
      await clock.runFor(5_000);
      await poll(() => [n(STATUS), n(JOBS)]).toEqual([4, 4]);

      // Hidden between two polls: the pending one is dropped, and it comes when the tab is shown.
      await clock.runFor(2_000);
      await setHidden(true);
      await clock.runFor(10_000);
      await new Promise((r) => setTimeout(r, 500));
      expect([n(STATUS), n(JOBS)]).toEqual([4, 4]);
      await setHidden(false);
      await poll(() => [n(STATUS), n(JOBS)]).toEqual([5, 5]);

      // The machine state page polls on the same terms.
      await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Machine state' }).click();
      for (let i = 0; i < 100 && n('/api/machines') === 0; i++) await clock.runFor(20);
      await poll(() => n('/api/machines')).toBe(1);
      await setHidden(true);
      await clock.runFor(20_000);
      await new Promise((r) => setTimeout(r, 500));
      expect(n('/api/machines')).toBe(1);
      await setHidden(false);
      await poll(() => n('/api/machines')).toBe(2);
    } finally {
      await context.close();
    }
  }, 120_000);

  it('names the sign-in throttle\'s rule once, and lets a browser that signed in before through', async () => {
    // This browser signs in as the operator (it keeps a device cookie for that name), then out.
    const known = await newPage(browser);
    const fresh = await newPage(browser);
    try {
      await signIn(known.page, base, 'operator');
      await known.page.getByRole('button', { name: 'Sign out' }).click();
      await poll(() => known.page.title()).toBe('Sign in · Installer');
      // Strangers fail at the name up to its limit (LOGIN_FAILURES_PER_USER_PER_MINUTE, 10).
      for (let i = 0; i < 10; i++) {
        const res = await t.app.inject({ method: 'POST', url: '/api/auth/login', remoteAddress: `10.77.0.${i + 1}`, payload: { username: 'operator', password: `guess-${i}` } });
        expect(res.statusCode).toBe(401);
      }
      // A browser that never signed in as the operator is held back, and told why once.
      await fresh.page.goto(`${base}/login`);
      await fresh.page.getByLabel('User name').fill('operator');
      await fresh.page.getByLabel('Password').fill(PASSWORDS.operator);
      await fresh.page.getByRole('button', { name: 'Sign in' }).click();
      const alert = fresh.page.getByTestId('login-error');
      await poll(() => alert.textContent()).toMatch(
        /^Too many failed sign-ins for this user name from new devices \(at most 10 a minute; a browser that signed in as this user before is not held back\): try again in \d+ s\.$/,
      );
      expect((await alert.textContent())!.toLowerCase()).not.toContain('too many attempts');
      // The browser that signed in before gets in.
      await signIn(known.page, base, 'operator');
      expect(await known.page.getByTestId('user').textContent()).toContain('operator');
    } finally {
      await known.context.close();
      await fresh.context.close();
    }
  }, 120_000);
});

// The update policy on the Status page in real headless Chromium against the real backend (the log
// streams are off): everyone sees the policy and the quarantined builds; an admin sets the mode,
// days and hours, and a refused change says why. The observer runs, as in every install: without
// it each page load holds the browser's connections to the host on observed reads that wait for an
// observation no one makes (10 s each, the update check 30 s), and on a loaded machine the policy
// card's own reads may queue behind them past the test's wait (a rehearsal timed out there).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { ensureUiBuilt, expectAccessible, expectNoSideScroll, launchChromium, newPage, shoot, signIn } from '../helpers/e2e/ui.ts';
import { getUpdatePolicy, putUpdatePolicy, quarantineDigest } from '../../src/state/update-policy.ts';

let t: TestApp;
let base: string;
let browser: Browser;
const poll = <T>(fn: () => T | Promise<T>, timeout = 15_000) => expect.poll(fn, { timeout, interval: 100 });
const DIGEST = `sha256:${'ab'.repeat(32)}`;

beforeAll(async () => {
  ensureUiBuilt();
  t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_MINUTE: '100' }, logs: null });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
});

describe('the update policy in the UI', () => {
  it('an admin sets automatic updates in a UTC window; a viewer sees it and the quarantine, without the form', async () => {
    const admin = await newPage(browser);
    const viewer = await newPage(browser);
    try {
      await signIn(admin.page, base, 'admin', '/');
      const card = admin.page.getByTestId('update-policy');
      await poll(() => card.getByTestId('policy-mode').textContent()).toBe('manual');
      expect(await card.getByTestId('quarantine-empty').isVisible()).toBe(true);

      // Automatic without a day: said in the form, and refused by the API with its reason.
      const form = card.getByTestId('policy-form');
      await form.getByLabel('Automatic: update inside the maintenance window').check();
      await poll(() => form.getByText('Automatic updates need at least one day.').isVisible()).toBe(true);
      await form.getByRole('button', { name: 'Save policy' }).click();
      await poll(() => form.getByRole('alert').first().textContent()).toContain('mode auto needs a maintenance window with at least one day');
      expect((await getUpdatePolicy(t.db.database.db)).mode).toBe('manual');

      await form.getByLabel('sat').check();
      await form.getByLabel('sun').check();
      await form.getByLabel('From').selectOption('22');
      await form.getByLabel('Until').selectOption('3');
      await form.getByRole('button', { name: 'Save policy' }).click();
      await poll(() => card.getByTestId('policy-mode').textContent()).toBe('auto');
      expect(await card.getByTestId('policy-window').textContent()).toBe('sun, sat 22:00–03:00 (next day) UTC');
      expect(await getUpdatePolicy(t.db.database.db)).toMatchObject({ mode: 'auto', window: { days: ['sun', 'sat'], startHour: 22, endHour: 3 }, updatedBy: 'admin' });
      await poll(() => form.getByTestId('policy-saved').isVisible()).toBe(true);
      await shoot(admin.page, 'update-policy-admin', { fullPage: true });

      // A build rolled back: listed for everyone; a viewer cannot change the policy.
      await quarantineDigest(t.db.database.db, { digest: DIGEST, outcome: 'rolled-back', detail: 'rolled back: the switch failed', requestId: '00000000-0000-4000-8000-000000000001' });
      await signIn(viewer.page, base, 'viewer', '/');
      const seen = viewer.page.getByTestId('update-policy');
      await poll(() => seen.getByTestId('policy-mode').textContent()).toBe('auto');
      await poll(() => seen.getByTestId('quarantine').textContent()).toContain('rolled-back');
      expect(await seen.getByTestId('policy-form').count()).toBe(0);
      expect(await seen.getByText('An admin (or the platform\'s control plane) changes the policy.').isVisible()).toBe(true);
      await shoot(viewer.page, 'update-policy', { fullPage: true });
    } finally {
      await admin.context.close();
      await viewer.context.close();
    }
  });

  it('the machine state page draws the policy chart with its last decision highlighted', async () => {
    await putUpdatePolicy(t.db.database.db, { mode: 'auto', window: { days: ['sun', 'sat'], startHour: 22, endHour: 3 } }, { id: 'admin' });
    await t.wired.controllers.reconcilePolicy();
    const { context, page } = await newPage(browser);
    try {
      await signIn(page, base, 'viewer', '/machines');
      const chart = page.getByTestId('chart-updatePolicy');
      await chart.waitFor();
      // Auto, but the channel was never observed here: no new build to start.
      await poll(() => chart.locator('g.state.current').getAttribute('data-state-id')).toBe('updatePolicy.upToDate');
      await chart.scrollIntoViewIfNeeded();
      await shoot(page, 'machines-update-policy');
    } finally {
      await context.close();
    }
  });

  it('the card and its form have no serious accessibility violation and fit a phone, light and dark', async () => {
    for (const colorScheme of ['light', 'dark'] as const) {
      const { context, page } = await newPage(browser, { colorScheme, bypassCSP: true, viewport: { width: 390, height: 844 } });
      try {
        await signIn(page, base, 'admin', '/');
        await page.getByTestId('policy-form').waitFor();
        await poll(() => page.getByTestId('quarantine').count()).toBe(1);
        await expectAccessible(page, `status (${colorScheme}, phone)`);
        await expectNoSideScroll(page, `status (${colorScheme}, phone)`, 390);
      } finally {
        await context.close();
      }
    }
  });
});

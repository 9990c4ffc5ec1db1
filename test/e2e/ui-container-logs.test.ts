// Platform container logs in the operator UI, in real headless Chromium against the real backend on
// the rig: a test platform of compose services printing lines, read by the engine's log adapter.
// Live lines per service, and for admins a time window and its download; a viewer follows live
// logs but is offered neither.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import type { Browser } from 'playwright-core';
import type { TestApp } from '../helpers/api/app.ts';
import type { PlatformProject } from '../helpers/e2e/rig.ts';
import { newPage, shoot, useToken } from '../helpers/e2e/ui.ts';
import { startUiOnPlatform, type UiOnPlatform } from '../helpers/e2e/ui-platform.ts';

let p: PlatformProject;
let t: TestApp;
let base: string;
let browser: Browser;
let ui: UiOnPlatform | undefined;
/** Retries until the value matches: pages load and streams arrive in their own time. */
const poll = <T>(fn: () => T | Promise<T>, timeout = 15_000) => expect.poll(fn, { timeout, interval: 100 });

beforeAll(async () => {
  ui = await startUiOnPlatform();
  ({ p, t, base, browser } = ui);
});
afterAll(async () => ui?.close());

describe('container logs in the UI', () => {
  it('container logs: live lines per service, and for admins a window and a download', async () => {
    const { context, page } = await newPage(browser, { acceptDownloads: true });
    try {
      await useToken(context, await t.token('admin'));
      await page.goto(`${base}/logs`);
      const live = page.getByTestId('live-logs');
      await live.getByLabel('Service').selectOption('worker');
      // A short tail, so that the lines that come next add rows: the viewer renders only the rows in sight.
      await live.getByLabel('Last lines').fill('3');
      await live.getByRole('button', { name: 'Follow' }).click();
      await poll(() => page.getByTestId('live-state').textContent()).toBe('live');
      await poll(async () => (await page.getByTestId('live-lines').textContent()) ?? '', 30_000).toMatch(/worker: line \d+/);
      const firstCount = await page.getByTestId('live-lines').locator('.line').count();
      // New lines keep coming (the worker prints one a second).
      await poll(() => page.getByTestId('live-lines').locator('.line').count(), 15_000).toBeGreaterThan(firstCount);
      const containers = await page.getByTestId('live-lines').locator('.ctr').allTextContents();
      expect(new Set(containers)).toEqual(new Set([`${p.project}-worker-1`]));
      await shoot(page, 'logs', { doc: true });
      await live.getByRole('button', { name: 'Stop' }).click();
      await poll(() => page.getByTestId('live-state').textContent()).toBe('stopped');

      const win = page.getByTestId('window-logs');
      await win.getByLabel('Container').selectOption(`${p.project}-web-1`);
      await win.getByLabel('To (UTC)').fill(new Date(Date.now() + 1000).toISOString().slice(0, 19));
      await win.getByRole('button', { name: 'Show' }).click();
      await poll(() => page.getByTestId('window-state').textContent(), 30_000).toBe('complete');
      // The first line of a long window is out of sight (and not rendered) until filtered for.
      await win.getByLabel('Filter').fill('serving on');
      await poll(() => page.getByTestId('window-lines').textContent()).toContain('web: serving on :8080');

      const [download] = await Promise.all([page.waitForEvent('download'), win.getByTestId('download-logs').click()]);
      expect(download.suggestedFilename()).toMatch(/^logs-\d{4}-\d\d-\d\dT.*\.txt$/);
      const body = readFileSync((await download.path())!, 'utf8');
      expect(body).toContain(`${p.project}-web-1 | `);
      expect(body).toContain('web: serving on :8080');

      // A viewer follows live logs but is not offered windows and downloads.
      const other = await newPage(browser);
      try {
        await useToken(other.context, await t.token('viewer'));
        await other.page.goto(`${base}/logs`);
        await other.page.getByTestId('live-logs').waitFor();
        expect(await other.page.getByTestId('window-logs').count()).toBe(0);
      } finally {
        await other.context.close();
      }
    } finally {
      await context.close();
    }
  });
});

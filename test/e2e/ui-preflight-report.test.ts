// The preflight report in the update dialog (docs/adr/0054-preflight-report.md), in real headless
// Chromium against the installer in process: the real API and observer on Postgres, with the
// registry, the images' declarations and the backups volume in memory. What the report says on the
// packaged stack with real images is in ui-self-update.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { REPO, startSelfUpdateApp, type SelfUpdateApp } from '../helpers/api/self-update.ts';
import { ensureUiBuilt, expectAccessible, expectNoSideScroll, launchChromium, newPage, shoot, useToken, type PageOptions } from '../helpers/e2e/ui.ts';
import { executedMigrations } from '../../src/db/migrate.ts';

let t: SelfUpdateApp;
let base: string;
let browser: Browser;
let context: BrowserContext | undefined;
const MiB = 1024 * 1024;
const poll = <T>(fn: () => T | Promise<T>, timeout = 30_000) => expect.poll(fn, { timeout, interval: 100 });

beforeAll(async () => {
  ensureUiBuilt();
  t = await startSelfUpdateApp({ groups: ['self-update', 'observer'] });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  browser = await launchChromium();
  const applied = await executedMigrations(t.db.database.db);
  t.engine.declarations.set('img-old', { imageId: 'img-old', labels: { 'org.opencontainers.image.version': '0.1.0+aaaa' }, migrations: applied.map((name) => ({ name, contract: false })) });
  t.engine.declarations.set(`${REPO}@sha256:new`, {
    imageId: 'img-new',
    labels: { 'org.opencontainers.image.version': '0.2.0+bbbb', 'io.installer.engine-api-min': '1.41' },
    migrations: [...applied.map((name) => ({ name, contract: false })), { name: '0098_more_columns', contract: false }],
  });
});
afterEach(async () => {
  await context?.close();
  context = undefined;
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
});

/** Signs in as `role`, opens the update dialog from the pill, and waits for the report in it. */
async function openDialog(opts: PageOptions = {}): Promise<Page> {
  const opened = await newPage(browser, { ...opts, bypassCSP: true });
  context = opened.context;
  await useToken(context, await t.token('operator'));
  await opened.page.goto(`${base}/`);
  await opened.page.getByTestId('update-pill').click();
  const report = opened.page.getByTestId('update-dialog').getByTestId('preflight-report');
  await poll(() => report.getAttribute('aria-busy')).toBeNull();
  return opened.page;
}

describe('the update dialog shows the preflight report', () => {
  it('each check with its level and sentence, the migrations and the compose diff; the update can start', async () => {
    t.engine.room = { free: 512 * MiB, estimate: { bytes: 3 * MiB, basis: "the database's size, there being no backup yet" } };
    const page = await openDialog();
    const dialog = page.getByTestId('update-dialog');
    const levels = await dialog.locator('[data-testid^="preflight-"][data-level]').evaluateAll((els) => els.map((e) => [e.getAttribute('data-testid'), e.getAttribute('data-level')]));
    expect(levels.map(([id]) => id)).toEqual(['target', 'signature', 'compose', 'migrations', 'engine', 'disk', 'quarantine', 'policy'].map((id) => `preflight-${id}`));
    expect(Object.fromEntries(levels)).toMatchObject({ 'preflight-target': 'pass', 'preflight-signature': 'warn', 'preflight-migrations': 'pass', 'preflight-disk': 'pass' });
    expect(await dialog.getByTestId('preflight-target').textContent()).toBe('✓pass: Build: an update from 0.1.0+aaaa (sha256:old…) to 0.2.0+bbbb (sha256:new…)');
    expect(await dialog.getByTestId('preflight-disk').textContent()).toContain("512 MiB is free for a pre-switch backup of about 3.0 MiB (the database's size, there being no backup yet)");
    await dialog.getByTestId('preflight-migration-list').getByText('1 schema migration').click();
    expect(await dialog.getByTestId('preflight-migration-list').textContent()).toContain('0098_more_columns (expand)');
    await dialog.getByTestId('preflight-compose-diff').getByText('Compose file changes').click();
    expect(await dialog.locator('pre.diff').textContent()).toContain('+  # published');
    expect(await dialog.getByTestId('preflight-blocked').count()).toBe(0);
    // The report's signature line stands in for the check's: one line says it.
    expect(await dialog.getByTestId('update-dialog-signature').count()).toBe(0);
    expect(await dialog.getByRole('button', { name: 'Update now' }).isEnabled()).toBe(true);
    await expectAccessible(page, 'the update dialog with its preflight report');
    await shoot(page, 'update-dialog-report');
  });

  it('a report that blocks says so, and the update cannot be started from the dialog', async () => {
    t.engine.room = { free: 1 * MiB, estimate: { bytes: 3 * MiB, basis: "the last backup's 2.4 MiB times 1.25" } };
    // On a phone, dark: the report fits the screen.
    const page = await openDialog({ viewport: { width: 390, height: 844 }, colorScheme: 'dark' });
    const dialog = page.getByTestId('update-dialog');
    expect(await dialog.getByTestId('preflight-disk').getAttribute('data-level')).toBe('block');
    expect(await dialog.getByTestId('preflight-disk').textContent()).toBe(
      "✕block: Backup space: the pre-switch backup needs about 3.0 MiB (the last backup's 2.4 MiB times 1.25) and 1.0 MiB is free: free space or lower SELF_UPDATE_BACKUPS_KEEP",
    );
    expect(await dialog.getByTestId('preflight-blocked').textContent()).toBe('The update cannot start: a check above blocks it.');
    expect(await dialog.getByRole('button', { name: 'Update now' }).isDisabled()).toBe(true);
    await expectAccessible(page, 'the update dialog with a blocking report (phone, dark)');
    await expectNoSideScroll(page, 'the update dialog with a blocking report (phone)', 390);
    expect(t.engine.calls).not.toContain('backupDatabase');
  });
});

// The Status page's update history in real headless Chromium against the real backend on Postgres
// (no engine needed: the history is read from the database): each update with its actor, from and
// to digests, outcome and measured downtime, a downtime that was not measured shown as such with
// its reason, and older pages on demand. The real update is in test/e2e/ui-self-update.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { ensureUiBuilt, launchChromium, newPage, shoot, useToken } from '../helpers/e2e/ui.ts';
import { requestSelfUpdate, updateSelfUpdate } from '../../src/state/self-update.ts';
import { NO_LAST_ANSWER } from '../../src/state/update-history.ts';
import { putReconciled } from '../../src/state/conditions.ts';

let t: TestApp;
let base = '';
let browser: Browser;
let context: BrowserContext;
let page: Page;
const poll = <T>(fn: () => T | Promise<T>, timeout = 15_000) => expect.poll(fn, { timeout, interval: 100 });
const digest = (c: string) => `sha256:${c.repeat(64)}`;
const ids: string[] = [];

beforeAll(async () => {
  ensureUiBuilt();
  t = await startTestApp({ logs: null });
  const db = t.db.database.db;
  // Twelve updates a minute apart, oldest first: the last one completed in 2.918 s, the one
  // before rolled back with its old backend killed (no figure), the rest completed in 3.1xx s.
  const t0 = Date.parse('2026-11-20T02:00:00Z');
  for (let i = 0; i < 12; i++) {
    const id = await requestSelfUpdate(db, { id: `user-${i}`, email: `user-${i}@example.com` });
    const rolledBack = i === 10;
    const ms = i === 11 ? 2918 : rolledBack ? null : 3100 + i;
    await updateSelfUpdate(db, id, {
      phase: rolledBack ? 'rolled-back' : 'completed', actionId: String(100 + i), previousReference: 'registry.test/installer:dev-41',
      previousDigest: digest(String(i % 10)), targetTag: 'dev-latest', targetDigest: digest(String((i + 1) % 10)), detail: rolledBack ? 'rolled back: the switch failed' : 'updated', finished: true,
    });
    await db
      .updateTable('self_update_status')
      .set({ created_at: new Date(t0 + i * 60_000), finished_at: new Date(t0 + i * 60_000 + 40_000), downtime_ms: ms, downtime_note: ms === null ? NO_LAST_ANSWER : null })
      .where('request_id', '=', id)
      .execute();
    ids.unshift(id);
  }
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  browser = await launchChromium();
  ({ context, page } = await newPage(browser));
  await useToken(context, await t.token('viewer'));
}, 120_000);

afterAll(async () => {
  await context?.close();
  await browser?.close();
  await t?.close();
});

describe('the update history on the Status page', () => {
  it('shows the newest updates with actor, digests, outcome and the measured downtime', async () => {
    await page.goto(`${base}/`);
    const table = page.getByTestId('update-history-table');
    await table.waitFor();
    const rows = table.locator('tbody tr');
    await poll(() => rows.count()).toBe(10);
    const newest = table.locator(`tr[data-request-id="${ids[0]}"]`);
    expect(await newest.getByTestId('downtime').textContent()).toBe('2.92 s');
    expect(await newest.getByTestId('downtime').getAttribute('title')).toContain('2918 ms');
    const text = (await newest.textContent())!;
    expect(text).toContain('user-11@example.com');
    expect(text).toContain(`sha256:${'1'.repeat(12)}…`);
    expect(text).toContain(`sha256:${'2'.repeat(12)}…`);
    expect(text).toContain('2026-11-20 02:11:00 UTC');
    expect(await newest.locator('.badge').textContent()).toBe('completed');

    const rolledBack = table.locator(`tr[data-request-id="${ids[1]}"]`);
    expect(await rolledBack.locator('.badge').textContent()).toBe('rolled-back');
    expect(await rolledBack.getByTestId('downtime').textContent()).toBe('not measured');
    expect(await rolledBack.getByTestId('downtime').getAttribute('title')).toBe(NO_LAST_ANSWER);
    await shoot(page, 'update-history');
  });

  it('loads older updates on demand, each once, and then offers no more', async () => {
    const table = page.getByTestId('update-history-table');
    const more = page.getByTestId('update-history').getByRole('button', { name: 'Older updates' });
    await more.click();
    await poll(() => table.locator('tbody tr').count()).toBe(12);
    expect(await table.locator('tbody tr').evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-request-id')))).toEqual(ids);
    expect(await more.count()).toBe(0);
    expect(await table.locator(`tr[data-request-id="${ids[11]}"]`).getByTestId('downtime').textContent()).toBe('3.10 s');
  });

  it("shows each update's conditions: none, or the runtime's Reconciled once an attempt failed", async () => {
    await putReconciled(t.db.database.db, 'self_update_status', ids[2]!, {
      type: 'Reconciled', status: 'True', reason: 'Recovered', message: 'self-update: reconciled after 2 failed attempts', observedAt: '2026-11-20T02:09:30.000Z',
    });
    await page.goto(`${base}/`);
    const table = page.getByTestId('update-history-table');
    const retried = table.locator(`tr[data-request-id="${ids[2]}"]`).getByTestId('update-conditions');
    await poll(() => retried.locator('[data-condition="Reconciled"]').getAttribute('data-status')).toBe('True');
    expect(await retried.textContent()).toBe('Reconciled=True Recovered: self-update: reconciled after 2 failed attempts');
    expect(await table.locator(`tr[data-request-id="${ids[0]}"]`).getByTestId('update-conditions').textContent()).toBe('none');
  });
});

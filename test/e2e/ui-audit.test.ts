// The audit page in real headless Chromium against the real backend: an auditor filters by actor,
// kind, status and time; walks past the page size with "Load older" while rows are added, losing
// and repeating nothing; exports the filtered selection as CSV with the bearer token; and sees
// who vouched for each actor (its kind), in the rows and in the header.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { sql } from 'kysely';
import type { Browser, Page } from 'playwright-core';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { ensureUiBuilt, launchChromium, newPage, shoot, useToken } from '../helpers/e2e/ui.ts';
import { recordStarted } from '../../src/state/actions.ts';
import { POLICY_ACTOR } from '../../src/auth/actor.ts';

let t: TestApp;
let base: string;
let browser: Browser;
const poll = <T>(fn: () => T | Promise<T>, timeout = 15_000) => expect.poll(fn, { timeout, interval: 100 });

beforeAll(async () => {
  ensureUiBuilt();
  t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_MINUTE: '100' } });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  browser = await launchChromium();
  // 620 rows over the past days, by three actors, of three kinds and three statuses; one an hour.
  await sql`insert into deployment_actions (kind, status, actor, detail, exit_code, created_at)
    select (array['restart', 'stop', 'pull'])[g % 3 + 1], (array['started', 'completed', 'failed'])[g % 3 + 1], (array['alice', 'bob', 'carol'])[g % 3 + 1],
           'row ' || g, case when g % 3 = 2 then 1 else null end, timestamptz '2025-03-01T00:00:00Z' - g * interval '1 hour'
    from generate_series(1, 620) g`.execute(t.db.database.db);
  await sql`update deployment_actions set detail = '=cmd|"/c calc"!A1' where detail = 'row 8'`.execute(t.db.database.db);
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
});

/** The rows the page shows: id, time, actor, kind, status. */
const shown = (page: Page) =>
  page
    .getByTestId('audit')
    .locator('tbody tr')
    .evaluateAll((trs) => trs.map((tr) => [tr.getAttribute('data-id') ?? '', ...[...tr.querySelectorAll('td')].slice(0, 4).map((td) => td.textContent ?? '')]));

async function apiIds(query: string): Promise<string[]> {
  const token = await t.token('viewer');
  const ids: string[] = [];
  let url: string | null = `/api/deployment/actions?limit=500&${query}`;
  while (url) {
    const res: Response = await fetch(`${base}${url}`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
    ids.push(...((await res.json()) as { id: string }[]).map((r) => r.id));
    url = /<([^>]+)>; rel="next"/.exec(res.headers.get('link') ?? '')?.[1] ?? null;
  }
  return ids;
}

describe('audit page', () => {
  it('filters by actor, kind, status and time', async () => {
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('viewer'));
      await page.goto(`${base}/audit`);
      await poll(async () => (await shown(page)).length).toBe(50);

      const form = page.getByTestId('audit-filters');
      await form.getByLabel('Actor').fill('carol');
      await form.getByLabel('Kind').selectOption('pull');
      await form.getByLabel('Status').selectOption('failed');
      await form.getByRole('button', { name: 'Apply' }).click();
      const expected = await apiIds('actor=carol&kind=pull&status=failed');
      expect(expected.length).toBeGreaterThan(50);
      await poll(async () => (await shown(page)).map((r) => r[0])).toEqual(expected.slice(0, 50));
      const rows = await shown(page);
      expect(rows.every((r) => r[2] === 'carol' && r[3] === 'pull' && r[4] === 'failed')).toBe(true);

      // A time window, both ends inclusive: carol's failed pulls are rows 2, 5, 8, … (row g is g hours
      // before 2025-03-01); rows 29 to 50 fall between 2025-02-26T22:00Z (row 50) and 2025-02-27T19:00Z (row 29).
      await form.getByLabel('From (UTC)').fill('2025-02-26T22:00:00');
      await form.getByLabel('To (UTC)').fill('2025-02-27T19:00:00');
      await form.getByRole('button', { name: 'Apply' }).click();
      const hours = [29, 32, 35, 38, 41, 44, 47, 50];
      await poll(async () => (await shown(page)).map((r) => r[1])).toEqual(
        hours.map((g) => new Date(Date.parse('2025-03-01T00:00:00Z') - g * 3600_000).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC')),
      );
      expect(await page.getByTestId('audit-count').textContent()).toBe('8 rows shown, the oldest included');
      expect(await page.getByTestId('load-older').count()).toBe(0);
      await shoot(page, 'audit-filters', { doc: true });

      // A bad window is the API's 400, shown as such.
      await form.getByLabel('From (UTC)').fill('2025-02-27T20:00:00');
      await form.getByRole('button', { name: 'Apply' }).click();
      await poll(() => page.getByRole('alert').first().textContent()).toContain('since: must not be later than until');

      // Nothing matches: said so.
      await form.getByRole('button', { name: 'Clear' }).click();
      await poll(async () => (await shown(page)).length).toBe(50);
      await form.getByLabel('Actor').fill('nobody');
      await form.getByRole('button', { name: 'Apply' }).click();
      await page.getByText('No row matches these filters.').waitFor();
    } finally {
      await context.close();
    }
  });

  it('loads older pages through the cursor, losing and repeating nothing while rows are added', async () => {
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('viewer'));
      await page.goto(`${base}/audit`);
      await page.getByLabel('Rows per page').selectOption('200');
      const before = await apiIds('');
      await poll(async () => (await shown(page)).map((r) => r[0])).toEqual(before.slice(0, 200));

      const added: string[] = [];
      for (let i = 0; i < 4; i++) {
        // Rows written between pages, as a job of this backend would.
        added.push(String((await recordStarted(t.db.database.db, { kind: 'stop', actor: { id: 'between' }, detail: `between ${i}` })).id));
        await page.getByTestId('load-older').click();
        await poll(async () => (await shown(page)).length).toBeGreaterThanOrEqual(Math.min(before.length, 200 * (i + 2)));
        if (before.length <= 200 * (i + 2)) break;
      }
      await poll(() => page.getByTestId('load-older').count()).toBe(0);
      const ids = (await shown(page)).map((r) => r[0]);
      expect(new Set(ids).size).toBe(ids.length);
      // Every row that existed is listed once, in order; rows added meanwhile show at the top once the first page refreshes.
      expect(ids.filter((id) => !added.includes(id))).toEqual(before);
      expect(await page.getByTestId('audit-count').textContent()).toBe(`${ids.length} rows shown, the oldest included`);
      await page.getByRole('button', { name: 'Refresh' }).click();
      await poll(async () => (await shown(page)).map((r) => r[0]).slice(0, added.length)).toEqual([...added].reverse());
      expect((await shown(page)).length).toBe(before.length + added.length);
    } finally {
      await context.close();
    }
  });

  it('exports the filtered selection as CSV, every row, with formulas disarmed', async () => {
    const { context, page } = await newPage(browser, { acceptDownloads: true });
    try {
      await useToken(context, await t.token('viewer'));
      await page.goto(`${base}/audit`);
      const form = page.getByTestId('audit-filters');
      await form.getByLabel('Kind').selectOption('pull');
      await form.getByRole('button', { name: 'Apply' }).click();
      const expected = await apiIds('kind=pull');
      await poll(async () => (await shown(page)).map((r) => r[0])).toEqual(expected.slice(0, 50));

      const [download] = await Promise.all([page.waitForEvent('download'), page.getByTestId('export-csv').click()]);
      expect(download.suggestedFilename()).toMatch(/^audit-trail-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ\.csv$/);
      const text = readFileSync((await download.path())!, 'utf8');
      const lines = text.split('\r\n');
      expect(lines[0]).toBe('id,createdAt,finishedAt,actor,actorEmail,kind,status,exitCode,detail,jobId,targetDigest,schemaMigration,actorKind');
      expect(lines.at(-1)).toBe(''); // every record ends with CRLF
      const records = lines.slice(1, -1);
      expect(records.map((l) => l.split(',')[0])).toEqual(expected); // all of them, more than a page
      expect(records.every((l) => l.split(',')[5] === 'pull')).toBe(true);
      // Row 8 (a pull) carries a formula: exported as text, quoted for its quotes.
      expect(records.find((l) => l.includes('calc'))).toMatch(/,"'=cmd\|""\/c calc""!A1",/);
      await poll(() => page.getByTestId('csv-done').textContent()).toMatch(/^Exported audit-trail-.*\.csv \(\d+ bytes\)\.$/);
    } finally {
      await context.close();
    }
  });

  it('shows who vouched for each actor, filters by it, and names the signed-in kind in the header', async () => {
    const db = t.db.database.db;
    await recordStarted(db, { kind: 'restart', actor: { id: 'admin', kind: 'user' }, detail: 'kinds: local' });
    await recordStarted(db, { kind: 'restart', actor: { id: 'platform:admin', kind: 'platform-user' }, detail: 'kinds: forwarded' });
    await recordStarted(db, { kind: 'restart', actor: { id: 'platform-control-plane', kind: 'control-plane' }, detail: 'kinds: control plane' });
    await recordStarted(db, { kind: 'self-update', actor: POLICY_ACTOR, detail: 'kinds: policy' });
    const { context, page } = await newPage(browser);
    try {
      await useToken(context, await t.token('viewer'));
      await page.goto(`${base}/audit`);
      await poll(() => page.getByTestId('user-kind').textContent()).toBe('local user');
      const actorCell = (detail: string) => page.locator('tbody tr', { hasText: detail }).locator('td').nth(1);
      await poll(() => actorCell('kinds: forwarded').textContent()).toBe('platform:adminvia control plane');
      expect(await actorCell('kinds: local').textContent()).toBe('adminlocal user');
      expect(await actorCell('kinds: control plane').textContent()).toBe('platform-control-planecontrol plane');
      expect(await actorCell('kinds: policy').textContent()).toBe('update-policysystem');
      // Rows from before kinds were kept show the actor alone.
      expect(await page.locator('tbody tr', { hasText: 'between 0' }).locator('td').nth(1).textContent()).toBe('between');

      const form = page.getByTestId('audit-filters');
      await form.getByLabel('Origin').selectOption('platform-user');
      await form.getByRole('button', { name: 'Apply' }).click();
      await poll(async () => (await shown(page)).map((r) => r[2])).toEqual(['platform:adminvia control plane']);
      await shoot(page, 'audit-actor-kinds');
    } finally {
      await context.close();
    }
  });
});

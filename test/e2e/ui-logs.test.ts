// The logs viewer in real headless Chromium against the real backend and its SSE route, fed by an
// in-memory logs port so that each test decides exactly which lines arrive and when: follow, pause
// and resume; the text, service and stream filters; ANSI colours; markup in a line shown as text;
// wrapping; UTC and local time; and the cap on lines held.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, BrowserContext, Locator, Page } from 'playwright-core';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { PushedLogs, stamp } from '../helpers/e2e/fake-logs.ts';
import { ensureUiBuilt, launchChromium, newPage, shoot, useToken } from '../helpers/e2e/ui.ts';
import type { ContainerLogLine } from '../../src/contracts/ports.ts';

const SERVICES = ['api', 'web', 'worker'];
const logs = new PushedLogs(SERVICES.map((s) => ({ id: s, name: `app-${s}-1`, service: s, state: 'running' })));
let t: TestApp;
let base: string;
let browser: Browser;
const poll = <T>(fn: () => T | Promise<T>, timeout = 15_000) => expect.poll(fn, { timeout, interval: 100 });

beforeAll(async () => {
  ensureUiBuilt();
  t = await startTestApp({ logs, platformContainers: () => logs.containers });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
});

let n = 0;
function line(text: string, opts: { service?: string; stderr?: boolean; timestamp?: string } = {}): ContainerLogLine {
  const service = opts.service ?? 'api';
  n++;
  return { container: `app-${service}-1`, service, stream: opts.stderr ? 'stderr' : 'stdout', timestamp: opts.timestamp ?? stamp(Date.now(), n), line: text };
}

/** Opens the logs page and starts following all services from now on (no earlier lines). */
async function openLive(context: BrowserContext, page: Page): Promise<void> {
  await useToken(context, await t.token('viewer'));
  await page.goto(`${base}/logs`);
  const live = page.getByTestId('live-logs');
  await live.getByLabel('Last lines').fill('0');
  await live.getByRole('button', { name: 'Follow' }).click();
  await poll(() => page.getByTestId('live-state').textContent()).toBe('live');
  await poll(() => logs.open).toBe(1);
}

async function withPage(fn: (page: Page, context: BrowserContext) => Promise<void>, opts: { timezoneId?: string } = {}): Promise<void> {
  const { context, page } = opts.timezoneId
    ? await (async () => {
        const c = await browser.newContext({ viewport: { width: 1360, height: 900 }, timezoneId: opts.timezoneId, locale: 'en-GB' });
        const p = await c.newPage();
        p.setDefaultTimeout(20_000);
        return { context: c, page: p };
      })()
    : await newPage(browser);
  try {
    await openLive(context, page);
    await fn(page, context);
  } finally {
    await context.close();
    // The server sees the stream close: the next test starts with no feed open.
    await poll(() => logs.open).toBe(0);
  }
}

/** The computed text colour of an element. */
const colourOf = (l: Locator) => l.evaluate((el) => (globalThis as unknown as { getComputedStyle(e: unknown): { color: string } }).getComputedStyle(el).color);
const pane = (page: Page) => page.getByTestId('live-lines');
const rowTexts = (page: Page) => pane(page).locator('.line').allTextContents();
/** Pixels between the bottom of what is in sight and the end of the list. */
const fromBottom = (page: Page) => pane(page).evaluate((el) => el.scrollHeight - el.scrollTop - el.clientHeight);

describe('logs viewer', () => {
  it('follows new lines, pauses when scrolled up, and resumes with Follow', async () => {
    await withPage(async (page) => {
      logs.push(Array.from({ length: 500 }, (_, i) => line(`request ${i + 1} handled`)));
      await poll(() => page.getByTestId('live-count').textContent()).toContain('500 lines');
      await poll(async () => (await rowTexts(page)).at(-1)).toContain('request 500 handled');
      expect(await pane(page).getAttribute('data-follow')).toBe('on');
      expect(await fromBottom(page)).toBeLessThan(18);
      // Only the rows in sight (and a margin) are in the page, not all 500.
      const rendered = await pane(page).locator('.line').count();
      expect(rendered).toBeGreaterThan(10);
      expect(rendered).toBeLessThan(100);
      expect(await page.getByTestId('live-follow').count()).toBe(0);

      // Scrolling up pauses following: new lines do not move the view.
      await pane(page).hover();
      await page.mouse.wheel(0, -3000);
      await poll(() => pane(page).getAttribute('data-follow')).toBe('off');
      await page.getByTestId('live-follow').waitFor();
      const before = await pane(page).evaluate((el) => el.scrollTop);
      const firstRows = (await rowTexts(page)).slice(0, 40).join('\n');
      logs.push(Array.from({ length: 200 }, (_, i) => line(`request ${i + 501} handled`)));
      await poll(() => page.getByTestId('live-count').textContent()).toContain('700 lines');
      expect(Math.abs((await pane(page).evaluate((el) => el.scrollTop)) - before)).toBeLessThanOrEqual(1);
      expect((await rowTexts(page)).slice(0, 40).join('\n')).toBe(firstRows);
      expect((await rowTexts(page)).join('\n')).not.toContain('request 700 handled');
      expect(await fromBottom(page)).toBeGreaterThan(1000);

      // Follow jumps to the end and keeps up with new lines again.
      await page.getByTestId('live-follow').click();
      await poll(() => pane(page).getAttribute('data-follow')).toBe('on');
      await poll(async () => (await rowTexts(page)).at(-1)).toContain('request 700 handled');
      logs.push([line('request 701 handled')]);
      await poll(async () => (await rowTexts(page)).at(-1)).toContain('request 701 handled');
      expect(await fromBottom(page)).toBeLessThan(18);
      expect(await page.getByTestId('live-follow').count()).toBe(0);
    });
  });

  it('filters by text (any case), by service and by stream', async () => {
    await withPage(async (page) => {
      const batch: ContainerLogLine[] = [];
      for (let i = 1; i <= 30; i++) {
        batch.push(line(`GET /health ${i} ok`, { service: 'api' }));
        batch.push(line(`error: upstream timeout ${i}`, { service: 'web', stderr: true }));
        batch.push(line(`job ${i} done`, { service: 'worker' }));
      }
      logs.push(batch);
      const count = page.getByTestId('live-count');
      await poll(() => count.textContent()).toContain('90 lines');

      await page.getByLabel('Filter').fill('UPSTREAM');
      await poll(() => count.textContent()).toContain('30 of 90 lines');
      let rows = await rowTexts(page);
      expect(rows.length).toBe(30);
      for (const r of rows) expect(r).toContain('upstream timeout');
      // New lines that match join the filtered view; others do not.
      logs.push([line('Upstream recovered', { service: 'web' }), line('job 31 done', { service: 'worker' })]);
      await poll(() => count.textContent()).toContain('31 of 92 lines');
      await poll(async () => (await rowTexts(page)).at(-1)).toContain('Upstream recovered');
      await page.getByLabel('Filter').fill('');
      await poll(() => count.textContent()).toMatch(/^92 lines/);

      // Streams: stderr only, then stdout only.
      await page.getByLabel('stdout').uncheck();
      await poll(() => count.textContent()).toContain('30 of 92 lines');
      expect(await pane(page).locator('.line:not(.stderr)').count()).toBe(0);
      await page.getByLabel('stdout').check();
      await page.getByLabel('stderr').uncheck();
      await poll(() => count.textContent()).toContain('62 of 92 lines');
      expect(await pane(page).locator('.line.stderr').count()).toBe(0);
      await page.getByLabel('stderr').check();

      // Services: the ones seen so far, each one a checkbox.
      const services = page.getByTestId('live-services');
      await services.locator('summary').click();
      expect(await services.locator('input[type=checkbox]').count()).toBe(3);
      await services.getByLabel('api').uncheck();
      await services.getByLabel('worker').uncheck();
      await poll(() => count.textContent()).toContain('31 of 92 lines');
      expect(await services.locator('summary').textContent()).toBe('Services: 1 of 3');
      rows = await rowTexts(page);
      expect(new Set(await pane(page).locator('.ctr').allTextContents())).toEqual(new Set(['app-web-1']));
      await shoot(page, 'logs-filtered', { doc: true });
      await services.getByRole('button', { name: 'Show all' }).click();
      await poll(() => count.textContent()).toMatch(/^92 lines/);
    });
  });

  it('renders ANSI colours as classed spans and shows markup in a line as text, never running it', async () => {
    await withPage(async (page) => {
      const hostile = [
        '<script>window.__xss = 1</script>',
        '<img src=x onerror="window.__xss = 2">',
        '\x1b[31m<img src=y onerror="window.__xss = 3">\x1b[0m &lt;b&gt;',
      ];
      logs.push([
        line('\x1b[31mred\x1b[0m plain \x1b[1;32mbold green\x1b[0m \x1b[38;5;208mpalette\x1b[0m \x1b[38;2;10;200;30mtruecolor\x1b[0m \x1b[44mon blue\x1b[0m'),
        ...hostile.map((h) => line(h, { stderr: true })),
      ]);
      await poll(() => page.getByTestId('live-count').textContent()).toContain('4 lines');
      const colourful = pane(page).locator('.line').first().locator('.msg');
      expect(await colourful.textContent()).toBe('red plain bold green palette truecolor on blue');
      expect(await colourful.locator('span.ansi-red-fg').textContent()).toBe('red');
      expect(await colourful.locator('span.ansi-green-fg.ansi-bold').textContent()).toBe('bold green');
      expect(await colourful.locator('span.ansi-blue-bg').textContent()).toBe('on blue');
      expect(await colourOf(colourful.locator('span', { hasText: 'palette' }))).toBe('rgb(255, 135, 0)');
      expect(await colourOf(colourful.locator('span', { hasText: 'truecolor' }))).toBe('rgb(10, 200, 30)');
      expect(await colourOf(colourful.locator('span.ansi-red-fg'))).toBe('rgb(255, 107, 96)');
      expect(await colourOf(colourful.locator('span', { hasText: 'plain' }))).toBe('rgb(215, 222, 230)');

      const msgs = await pane(page).locator('.line .msg').allTextContents();
      expect(msgs.slice(1)).toEqual([hostile[0], hostile[1], '<img src=y onerror="window.__xss = 3"> &lt;b&gt;']);
      expect(await pane(page).locator('script, img, b').count()).toBe(0);
      await new Promise((r) => setTimeout(r, 300));
      expect(await page.evaluate('window.__xss')).toBeUndefined();
    });
  });

  it('wraps long lines on request and keeps them on one scrollable row otherwise', async () => {
    await withPage(async (page) => {
      const long = `begin ${'0123456789'.repeat(300)} end`;
      logs.push([line('short one'), line(long), line('short two'), ...Array.from({ length: 30 }, (_, i) => line(`after ${i + 1}`))]);
      await poll(() => page.getByTestId('live-count').textContent()).toContain('33 lines');
      const row = pane(page).locator('.line', { hasText: 'begin' });
      const wrap = page.getByLabel('Wrap lines');
      if (await wrap.isChecked()) await wrap.uncheck();
      expect(await row.evaluate((el) => el.getBoundingClientRect().height)).toBe(18);
      expect(await pane(page).evaluate((el) => el.scrollWidth > el.clientWidth + 1000)).toBe(true);

      await wrap.check();
      await poll(() => row.evaluate((el) => el.getBoundingClientRect().height)).toBeGreaterThan(18 * 10);
      expect(await pane(page).evaluate((el) => el.scrollWidth <= el.clientWidth)).toBe(true);
      // The whole line is there, and the rows after it sit below it, not over it.
      expect(await row.locator('.msg').textContent()).toBe(long);
      const after = pane(page).locator('.line', { hasText: 'short two' });
      const [rowBox, afterBox] = [await row.boundingBox(), await after.boundingBox()];
      expect(afterBox!.y).toBeGreaterThanOrEqual(rowBox!.y + rowBox!.height - 1);
      // Still following: the last line is in sight, at the very bottom (measured heights, no gap).
      expect(await fromBottom(page)).toBeLessThan(18);
      const lastRow = pane(page).locator('.line', { hasText: 'after 30' });
      const bottomGap = async () => {
        const [a, p] = [await lastRow.boundingBox(), await pane(page).boundingBox()];
        return Math.round(p!.y + p!.height - (a!.y + a!.height));
      };
      await poll(bottomGap).toBe(0);
      await shoot(page, 'logs-wrapped');
      await wrap.uncheck();
      await poll(() => row.evaluate((el) => el.getBoundingClientRect().height)).toBe(18);
    });
  });

  it('shows times in UTC or in the browser time zone', async () => {
    await withPage(
      async (page) => {
        logs.push([line('stamped', { timestamp: '2024-05-01T10:00:00.123456789Z' })]);
        const ts = pane(page).locator('.line .ts').first();
        const utc = page.getByLabel('UTC', { exact: true });
        if (!(await utc.isChecked())) await utc.check();
        await poll(() => ts.textContent()).toBe('10:00:00.123');
        expect(await ts.getAttribute('title')).toBe('2024-05-01T10:00:00.123456789Z');
        expect(await page.getByTestId('live-count').textContent()).toContain('times UTC');
        await utc.uncheck();
        await poll(() => ts.textContent()).toBe('15:30:00.123');
        expect(await page.getByTestId('live-count').textContent()).toContain('times UTC+05:30');
        // The choice is remembered for the next visit.
        await page.reload();
        expect(await page.getByLabel('UTC', { exact: true }).isChecked()).toBe(false);
        await page.getByLabel('UTC', { exact: true }).check();
      },
      { timezoneId: 'Asia/Kolkata' },
    );
  });

  it('holds 100,000 lines and says how many older ones it dropped', async () => {
    await withPage(async (page) => {
      for (let b = 0; b < 21; b++) logs.push(Array.from({ length: 5_000 }, (_, i) => line(`bulk ${b * 5_000 + i + 1}`, { service: SERVICES[i % 3]! })));
      const count = page.getByTestId('live-count');
      await poll(() => count.textContent(), 60_000).toMatch(/^100,000 lines/);
      await poll(() => page.getByTestId('live-dropped').textContent()).toContain('5,000 older lines were dropped');
      await poll(async () => (await rowTexts(page)).at(-1)).toContain('bulk 105000');
      // The oldest line still held is line 5,001.
      await pane(page).evaluate((el) => (el.scrollTop = 0));
      await poll(async () => (await rowTexts(page))[0]).toContain('bulk 5001');
      expect(await pane(page).locator('.line').count()).toBeLessThan(100);
    });
  });
});

// The API document's viewer in real headless Chromium under its Content-Security-Policy: it
// renders from its own files with no violation, and a script injected into its page does not run.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { launchChromium, newPage } from '../helpers/e2e/ui.ts';

/** What the page scripts below use, typed here: this project compiles without the DOM library. */
interface Page {
  injected?: boolean;
  reportViolation(v: string): void;
  document: {
    addEventListener(type: 'securitypolicyviolation', fn: (e: { violatedDirective: string; blockedURI: string }) => void): void;
    createElement(tag: string): { textContent: string | null; src: string; setAttribute(name: string, value: string): void };
    body: { append(node: unknown): void };
  };
}

let t: TestApp;
let base: string;
let browser: Browser;
beforeAll(async () => {
  t = await startTestApp({ env: { API_DOCS: 'on' } });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await t?.close();
});

describe('the API document in a browser', () => {
  it('renders under its CSP with no violation, and runs no injected inline script', async () => {
    const { context, page } = await newPage(browser);
    const violations: string[] = [];
    await context.exposeFunction('reportViolation', (v: string) => violations.push(v));
    await context.addInitScript(() => {
      const g = globalThis as unknown as Page;
      g.document.addEventListener('securitypolicyviolation', (e) => g.reportViolation(`${e.violatedDirective} ${e.blockedURI}`));
    });
    const outside: string[] = [];
    page.on('request', (r) => {
      if (!r.url().startsWith(base) && !r.url().startsWith('data:')) outside.push(r.url());
    });
    await page.goto(`${base}/api/docs/`);
    await page.locator('.swagger-ui .info .title').filter({ hasText: 'Installer API' }).waitFor();
    await page.locator('.opblock-summary-path', { hasText: '/api/deployment/jobs' }).first().waitFor();
    expect(violations).toEqual([]);
    expect(outside).toEqual([]);

    // What an injected script would try: an inline <script> and an inline handler.
    const ran = await page.evaluate(async () => {
      const g = globalThis as unknown as Page;
      const s = g.document.createElement('script');
      s.textContent = 'window.injected = true';
      g.document.body.append(s);
      const img = g.document.createElement('img');
      img.setAttribute('onerror', 'window.injected = true');
      img.src = 'data:,not-an-image';
      g.document.body.append(img);
      await new Promise((r) => setTimeout(r, 300));
      return g.injected === true;
    });
    expect(ran).toBe(false);
    await expect.poll(() => violations.length).toBeGreaterThanOrEqual(2);
    expect(violations.every((v) => /^script-src/.test(v))).toBe(true);
    await context.close();
  }, 60_000);
});

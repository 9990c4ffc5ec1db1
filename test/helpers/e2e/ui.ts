// Browser tests of the operator UI: Debian's Chromium driven by playwright-core (never a
// downloaded browser), against the real backend listening on 127.0.0.1.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { copyFileSync, existsSync, mkdirSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { expect } from 'vitest';
import { NODE, ROOT } from '../shared/process.ts';
import { PASSWORDS } from '../api/app.ts';
import { eventually } from '../shared/eventually.ts';
import type { Role } from '../../../src/db/schema.ts';

export const CHROMIUM = '/usr/bin/chromium';
export const UI_DIR = path.join(ROOT, 'src/ui');
export const UI_DIST = path.join(UI_DIR, 'dist');
export const ARTIFACTS = path.join(ROOT, '.artifacts/ui');
export const DOC_SHOTS = path.join(ROOT, 'docs/ui');

function newest(dir: string): number {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name === 'dist' || e.name === 'node_modules') continue;
    const p = path.join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}

/** Builds the UI with Vite when dist is missing or older than its sources (`npm test` builds it first). */
export function ensureUiBuilt(): void {
  const index = path.join(UI_DIST, 'index.html');
  if (existsSync(index) && statSync(index).mtimeMs >= newest(UI_DIR)) return;
  const r = spawnSync(NODE, [path.join(ROOT, 'node_modules/vite/bin/vite.js'), 'build', UI_DIR], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
  if (r.status !== 0) throw new Error(`vite build failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
}

/** `extraArgs`: more Chromium switches, e.g. `--ignore-certificate-errors-spki-list=<pin>` to trust one certificate. */
export async function launchChromium(extraArgs: string[] = []): Promise<Browser> {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: scripts/rig/setup.sh installs Debian's chromium`);
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // playwright-core gives every launch a fresh temporary profile.
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', ...extraArgs],
  });
}

export interface PageOptions {
  acceptDownloads?: boolean;
  /** Default 1360×900; a phone is 390×844. */
  viewport?: { width: number; height: number };
  /** What `prefers-color-scheme` answers (default light). */
  colorScheme?: 'light' | 'dark';
  /** Lets a test inject scripts (axe-core) past the page's Content-Security-Policy. */
  bypassCSP?: boolean;
}

export async function newPage(browser: Browser, opts: PageOptions = {}): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({
    viewport: opts.viewport ?? { width: 1360, height: 900 },
    colorScheme: opts.colorScheme ?? 'light',
    bypassCSP: opts.bypassCSP ?? false,
    acceptDownloads: opts.acceptDownloads ?? false,
    timezoneId: 'UTC',
    locale: 'en-GB',
  });
  const page = await context.newPage();
  page.setDefaultTimeout(20_000);
  return { context, page };
}

/** Signs in through the sign-in form and waits for the app. */
export async function signIn(page: Page, base: string, role: Role, next = '/'): Promise<void> {
  await page.goto(`${base}/login?next=${encodeURIComponent(next)}`);
  await page.getByLabel('User name').fill(role);
  await page.getByLabel('Password').fill(PASSWORDS[role]);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByTestId('user').waitFor();
}

/** Puts a token where the app keeps it, before any page script runs (skips the form). */
export async function useToken(context: BrowserContext, token: string): Promise<void> {
  await context.addInitScript((t) => sessionStorage.setItem('installer.token', t), token);
}

/** The page's fake clock (playwright's `page.clock`), moved only while none of the page's requests is outstanding. */
export interface PageClock {
  /** Requests the page has sent and not yet had answered (or failed). */
  inFlight(): number;
  /** Waits until every request the page sent is answered, then gives the page a moment to take the answers in. */
  settled(): Promise<void>;
  /** `page.clock.runFor`, between two waits for the page to settle: before, and after what the move set off. */
  runFor(ms: number): Promise<void>;
  /** `page.clock.pauseAt` (a jump of the clock), between the same two waits. */
  pauseAt(time: number): Promise<void>;
}

/**
 * One way for a test on the fake clock to move the page's time. The page schedules its next poll
 * only once an answer is in, so time that jumps while a request is in flight could fire a timer the
 * answer has not set yet, or count a request the move has not sent yet: every move waits for the
 * page to settle before it, and after it for the requests it set off to be answered.
 * Call before the page loads, so that every request is counted.
 */
export function pageClock(page: Page, opts: { settleMs?: number; timeoutMs?: number } = {}): PageClock {
  const settleMs = opts.settleMs ?? 300;
  const timeoutMs = opts.timeoutMs ?? 15_000;
  let inFlight = 0;
  // Requests seen to start or end; a settle that saw none since the last one has nothing to wait for.
  let seen = 0;
  let seenWhenSettled = -1;
  page.on('request', () => void (inFlight++, seen++));
  page.on('requestfinished', () => void (inFlight--, seen++));
  page.on('requestfailed', () => void (inFlight--, seen++));
  const pause = () => new Promise((r) => setTimeout(r, settleMs));
  const settled = async () => {
    if (inFlight === 0 && seen === seenWhenSettled) return;
    await eventually(() => inFlight === 0, 'every request of the page answered', timeoutMs, 20);
    const mark = seen;
    await pause();
    seenWhenSettled = mark;
  };
  const move = async (how: () => Promise<void>) => {
    await settled();
    await how();
    // What the move set off reaches the test as requests a moment later.
    await pause();
    seenWhenSettled = -1;
    await settled();
  };
  return {
    inFlight: () => inFlight,
    settled,
    runFor: (ms) => move(() => page.clock.runFor(ms)),
    pauseAt: (time) => move(() => page.clock.pauseAt(time)),
  };
}

/**
 * Saves a screenshot as a test artifact (.artifacts/ui/, ignored by git). The screens the
 * documentation shows (docs/ui.md) are also copied to docs/ui/ when UI_DOC_SCREENSHOTS=1, so that an
 * ordinary test run leaves the work tree clean: `UI_DOC_SCREENSHOTS=1 npx vitest run test/e2e/ui`.
 */
export async function shoot(page: Page, name: string, opts: { doc?: boolean; fullPage?: boolean } = {}): Promise<string> {
  mkdirSync(ARTIFACTS, { recursive: true });
  const file = path.join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path: file, fullPage: opts.fullPage ?? false, animations: 'disabled', caret: 'hide' });
  if (opts.doc && process.env.UI_DOC_SCREENSHOTS === '1') {
    mkdirSync(DOC_SHOTS, { recursive: true });
    copyFileSync(file, path.join(DOC_SHOTS, `${name}.png`));
  }
  return file;
}

/**
 * The browser globals that `page.evaluate` callbacks use, typed here because the tests compile
 * without the DOM library: `const { document } = globalThis as unknown as PageGlobals`.
 */
export interface PageElement {
  tagName: string;
  textContent: string | null;
  parentElement: PageElement | null;
  getAttribute(name: string): string | null;
  getBoundingClientRect(): { left: number; right: number; top: number; bottom: number };
  contains(other: PageElement | null): boolean;
  matches(selector: string): boolean;
  closest(selector: string): PageElement | null;
}
export interface PageGlobals {
  document: {
    activeElement: PageElement | null;
    documentElement: PageElement;
    scrollingElement: { scrollWidth: number; clientWidth: number } | null;
    querySelector(selector: string): PageElement | null;
    querySelectorAll(selector: string): Iterable<PageElement> & { length: number };
  };
  getComputedStyle(el: PageElement): { colorScheme: string };
}

/** axe-core's browser bundle, injected into the page under test. */
export const AXE_SCRIPT = createRequire(import.meta.url).resolve('axe-core');

export interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  helpUrl: string;
  nodes: { target: string; html: string; summary: string }[];
}

/**
 * Runs axe-core on the page as it is now and returns its violations of impact serious or critical
 * (`impacts` to choose others). The page's context needs `bypassCSP` (the script is added inline).
 */
export async function axeViolations(page: Page, impacts: string[] = ['serious', 'critical']): Promise<AxeViolation[]> {
  if (!(await page.evaluate(() => 'axe' in globalThis))) await page.addScriptTag({ path: AXE_SCRIPT });
  const all = await page.evaluate(async () => {
    interface AxeResult {
      violations: { id: string; impact?: string | null; help: string; helpUrl: string; nodes: { target: unknown[]; html: string; failureSummary?: string }[] }[];
    }
    const { axe, document } = globalThis as unknown as PageGlobals & { axe: { run(ctx: unknown, o: object): Promise<AxeResult> } };
    const r = await axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({
      id: v.id,
      impact: v.impact ?? null,
      help: v.help,
      helpUrl: v.helpUrl,
      nodes: v.nodes.map((n) => ({ target: n.target.map(String).join(' '), html: n.html.slice(0, 300), summary: n.failureSummary ?? '' })),
    }));
  });
  return all.filter((v) => v.impact !== null && impacts.includes(v.impact));
}

/** Violations as a readable failure message: rule, impact, help, and each offending element. */
export function describeViolations(where: string, violations: AxeViolation[]): string {
  if (violations.length === 0) return `${where}: no violations`;
  const lines = [`${where}: ${violations.length} accessibility violation(s)`];
  for (const v of violations) {
    lines.push(`- [${v.impact}] ${v.id}: ${v.help} (${v.helpUrl})`);
    for (const n of v.nodes.slice(0, 8)) lines.push(`    ${n.target}\n      ${n.html}\n      ${n.summary.replace(/\n/g, '\n      ')}`);
    if (v.nodes.length > 8) lines.push(`    … and ${v.nodes.length - 8} more`);
  }
  return lines.join('\n');
}

/** No serious or critical axe violation on the page; the failure names `where` and each violation. */
export async function expectAccessible(page: Page, where: string): Promise<void> {
  const violations = await axeViolations(page);
  expect(violations, describeViolations(where, violations)).toEqual([]);
}

/** The document is no wider than `width`: no page-level horizontal scroll (the failure names what reaches past it). */
export async function expectNoSideScroll(page: Page, where: string, width: number): Promise<void> {
  const { scroll, client, wide } = await page.evaluate(() => {
    const { document } = globalThis as unknown as PageGlobals;
    const root = document.scrollingElement!;
    // The outermost elements that reach past the right edge, to name the culprit.
    const wide = [...document.querySelectorAll('body *')]
      .filter((el) => el.getBoundingClientRect().right > root.clientWidth + 0.5 && !el.parentElement?.closest('.table-scroll, .chart-scroll, .output'))
      .slice(0, 5)
      .map((el) => `${el.tagName.toLowerCase()}.${el.getAttribute('class') ?? ''} (right ${Math.round(el.getBoundingClientRect().right)})`);
    return { scroll: root.scrollWidth, client: root.clientWidth, wide };
  });
  expect(scroll, `${where}: the page is ${scroll}px wide in a ${client}px viewport: ${wide.join(', ')}`).toBeLessThanOrEqual(width);
}

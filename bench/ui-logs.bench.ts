// The logs page in Chromium under a heavy live stream: 100,000 lines appended at 2,000 lines a second
// through the real backend and its SSE route (GET /api/deployment/logs), fed by an in-memory logs port
// instead of the Docker engine, so that the figures are the viewer's and not the engine's. Reported:
// frame times (requestAnimationFrame deltas) while the lines arrive, how long after the last line was
// sent it was on screen, and the page's JS heap at the end (Performance.getMetrics), before and after
// a garbage collection.
import { performance } from 'node:perf_hooks';
import type { Bench, Figure } from './run.ts';
import { startTestApp } from '../test/helpers/api/app.ts';
import { PushedLogs, stamp } from '../test/helpers/e2e/fake-logs.ts';
import { ensureUiBuilt, launchChromium, newPage, useToken } from '../test/helpers/e2e/ui.ts';
import type { ContainerLogLine } from '../src/contracts/ports.ts';

const TOTAL = 100_000;
const RATE = 2_000; // lines a second
const TICK_MS = 50;
const MB = 1024 * 1024;
const SERVICES = ['api', 'web', 'worker', 'db'];
const WORDS = ['GET', '/api/items', '200', 'took', 'ms', 'user=42', 'cache', 'miss', 'retrying', 'upstream', 'connection', 'reset', 'queue', 'depth'];

/** Line `i`: varied lengths, every fifth with ANSI colours, every seventh on stderr. */
function line(i: number, t0: number): ContainerLogLine {
  const service = SERVICES[i % SERVICES.length]!;
  const words: string[] = [];
  for (let w = 0; w < 6 + ((i * 7919) % 23); w++) words.push(WORDS[(i + w * 31) % WORDS.length]!);
  const text = i % 5 === 0 ? `\x1b[32mINFO\x1b[0m \x1b[1m#${i}\x1b[0m ${words.join(' ')}` : `#${i} ${words.join(' ')}`;
  return {
    container: `bench-${service}-1`,
    service,
    stream: i % 7 === 0 ? 'stderr' : 'stdout',
    timestamp: stamp(t0 + i / 2, i),
    line: text,
  };
}

function percentile(sorted: number[], p: number): number {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

const bench: Bench = async (log) => {
  ensureUiBuilt();
  const logs = new PushedLogs(SERVICES.map((s) => ({ id: s, name: `bench-${s}-1`, service: s, state: 'running' })));
  const t = await startTestApp({ logs, platformContainers: () => logs.containers, env: { LOG_CLIENT_STALL_SECONDS: '120' }, logLevel: 'warn' });
  const browser = await launchChromium();
  try {
    const base = await t.app.listen({ host: '127.0.0.1', port: 0 });
    const { context, page } = await newPage(browser);
    await useToken(context, await t.token('viewer'));
    await page.goto(`${base}/logs`);
    const live = page.getByTestId('live-logs');
    await live.locator('input[name="tail"]').fill('0');
    await live.locator('button[type="submit"]').click();
    const until = Date.now() + 20_000;
    while (logs.open === 0) {
      if (Date.now() > until) throw new Error('the page did not open the live stream');
      await new Promise((r) => setTimeout(r, 50));
    }
    // A string, not a function: tsx's transform would add helpers the page does not have.
    await page.evaluate(`(() => {
      window.benchFrames = [];
      window.benchStop = false;
      let last = performance.now();
      const tick = (now) => {
        window.benchFrames.push(now - last);
        last = now;
        if (!window.benchStop) requestAnimationFrame(tick);
      };
      requestAnimationFrame(tick);
    })()`);

    log(`sending ${TOTAL} lines at ${RATE} lines/s …`);
    const t0 = Date.now();
    const start = performance.now();
    let sent = 0;
    while (sent < TOTAL) {
      const due = Math.min(TOTAL, Math.floor(((performance.now() - start) / 1000) * RATE));
      if (due > sent) {
        const batch: ContainerLogLine[] = [];
        for (let i = sent + 1; i <= due; i++) batch.push(line(i, t0));
        logs.push(batch);
        sent = due;
      }
      await new Promise((r) => setTimeout(r, TICK_MS));
    }
    const sendSeconds = (performance.now() - start) / 1000;
    const lastSent = performance.now();
    // The last line on screen: the viewer follows the end by default.
    await page.getByTestId('live-lines').getByText(`#${TOTAL}`, { exact: false }).first().waitFor({ timeout: 60_000 });
    const lag = performance.now() - lastSent;
    const frames = (await page.evaluate('window.benchStop = true, window.benchFrames')) as number[];
    const cdp = await context.newCDPSession(page);
    await cdp.send('Performance.enable');
    const heap = async () => {
      const { metrics } = await cdp.send('Performance.getMetrics');
      return metrics.find((m) => m.name === 'JSHeapUsedSize')!.value / MB;
    };
    const heapEnd = await heap();
    await cdp.send('HeapProfiler.collectGarbage');
    const heapGc = await heap();
    const domNodes = (await page.evaluate("document.getElementsByTagName('*').length")) as number;
    const shown = await page.getByTestId('live-count').textContent().catch(() => null);

    const sorted = frames.slice(1).sort((a, b) => a - b);
    log(`sent in ${sendSeconds.toFixed(1)} s; ${sorted.length} frames; median ${percentile(sorted, 50).toFixed(1)} ms, max ${sorted.at(-1)?.toFixed(0)} ms; ${domNodes} DOM elements${shown ? `; the page says: ${shown}` : ''}`);
    const figures: Figure[] = [
      { name: 'frame time p95 while 100,000 lines arrive at 2,000/s', value: percentile(sorted, 95), unit: 'ms', goal: '<= 50', ok: percentile(sorted, 95) <= 50 },
      { name: 'frames longer than 100 ms', value: sorted.filter((f) => f > 100).length, unit: 'frames' },
      { name: 'last line on screen after it was sent', value: lag, unit: 'ms' },
      { name: 'JS heap used at the end', value: heapEnd, unit: 'MB', goal: '<= 150', ok: heapEnd <= 150 },
      { name: 'JS heap used at the end, after a GC', value: heapGc, unit: 'MB' },
    ];
    await context.close();
    return figures;
  } finally {
    await browser.close();
    await t.close();
  }
};

export default bench;

// The operator UI on a real platform: a test platform of compose services on the engine, the app in
// process (its container logs read from the engine), listening on 127.0.0.1, and Chromium. For the
// browser tests that need real containers behind the pages.
import type { Browser } from 'playwright-core';
import { startTestApp, TEST_SECRETS, type TestApp, type TestAppOptions } from '../api/app.ts';
import { startPlatform, type PlatformProject } from './rig.ts';
import { ensureUiBuilt, launchChromium } from './ui.ts';
import { ContainerLogs } from '../../../src/adapters/container-logs/index.ts';
import { connectEngine } from '../../../src/adapters/docker-engine.ts';
import { secretScrubber } from '../../../src/logger.ts';

export interface UiOnPlatform {
  p: PlatformProject;
  t: TestApp;
  base: string;
  browser: Browser;
  close(): Promise<void>;
}

/** Starts the platform, the app (with `opts`; PLATFORM_DIR and PLATFORM_PROJECT set) and the browser. */
export async function startUiOnPlatform(opts: Pick<TestAppOptions, 'controllers'> & { env?: Record<string, string> } = {}): Promise<UiOnPlatform> {
  ensureUiBuilt();
  const p = await startPlatform();
  let t: TestApp | undefined;
  try {
    t = await startTestApp({
      ...(opts.controllers !== undefined ? { controllers: opts.controllers } : {}),
      env: { PLATFORM_DIR: p.dir, PLATFORM_PROJECT: p.project, ...opts.env },
      logs: new ContainerLogs(connectEngine('/var/run/docker.sock'), { scrub: secretScrubber(Object.values(TEST_SECRETS)) }),
    });
    const app = t;
    const base = await app.app.listen({ host: '127.0.0.1', port: 0 });
    const browser = await launchChromium();
    return {
      p, t: app, base, browser,
      async close() {
        await browser.close();
        await app.close();
        await p.remove();
      },
    };
  } catch (err) {
    // What did start is taken down: a failed start leaves nothing on the engine.
    await t?.close();
    await p.remove();
    throw err;
  }
}

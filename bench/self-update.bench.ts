// Self-update figures on the real rig (engine, registry, the installer's own compose stack):
// - downtime of a successful update as a client polling /api/health every 100 ms sees it (5 runs);
// - the helper's total time (container start to exit) of those updates;
// - from the switch to a crashing build to the rollback being healthy (helper timestamps).
import type { Bench, Figure } from './run.ts';
import { ensureRig, run } from '../test/helpers/e2e/rig.ts';
import { helperExit, Images, startInstaller, type InstallerUnderTest } from '../test/helpers/e2e/self-update-rig.ts';

const RUNS = 5;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Polls /api/health every 100 ms; the downtime is the longest stretch between two healthy answers. */
function healthPoller(baseUrl: string) {
  const ok: number[] = [];
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const t = performance.now();
      try {
        const res = await fetch(`${baseUrl}/api/health`, { signal: AbortSignal.timeout(1_000) });
        if (res.ok) ok.push(performance.now());
      } catch {
        /* down */
      }
      await new Promise((r) => setTimeout(r, Math.max(0, 100 - (performance.now() - t))));
    }
  })();
  return {
    async stop(): Promise<number> {
      stopped = true;
      await loop;
      let worst = 0;
      for (let k = 1; k < ok.length; k++) worst = Math.max(worst, ok[k]! - ok[k - 1]!);
      return worst / 1000;
    },
  };
}

async function helperTimes(): Promise<{ totalS: number; lines: { at: number; text: string }[] }> {
  const inspect = JSON.parse((await run('docker', ['inspect', 'installer-self-updater'])).stdout)[0];
  const totalS = (Date.parse(inspect.State.FinishedAt) - Date.parse(inspect.State.StartedAt)) / 1000;
  const logs = await run('docker', ['logs', '-t', 'installer-self-updater']);
  const lines = (logs.stdout + logs.stderr).split('\n').filter(Boolean).map((l) => {
    const sp = l.indexOf(' ');
    return { at: Date.parse(l.slice(0, sp)), text: l.slice(sp + 1) };
  });
  return { totalS, lines };
}

async function update(i: InstallerUnderTest, target: string, expect: 'completed' | 'rolled-back'): Promise<void> {
  const r = await i.post('/api/system/self-update');
  if (r.status !== 200 || !(r.body as { started?: boolean }).started) throw new Error(`update not started: ${r.status} ${JSON.stringify(r.body)}`);
  await helperExit();
  await i.until(`lastUpdate ${expect}`, async () => {
    const c = (await i.get('/api/system/self-update-check')).body as { lastUpdate: { status: string; targetDigest: string } };
    return c.lastUpdate.targetDigest === target && c.lastUpdate.status === expect;
  });
}

const bench: Bench = async (log) => {
  await ensureRig();
  const images = new Images();
  let i: InstallerUnderTest | undefined;
  try {
    log('building the installer image and its variants');
    await images.buildBase('bench-base');
    await images.publish('bench-base');
    for (let k = 1; k <= RUNS; k++) await images.buildVariant('good', 'bench-base', `good-${k}`);
    await images.buildVariant('crashes', 'bench-base', 'crashes');
    i = await startInstaller(images, 'bench-base');

    const downtimes: number[] = [];
    const helpers: number[] = [];
    for (let k = 1; k <= RUNS; k++) {
      const target = await images.publish(`good-${k}`);
      const poller = healthPoller(i.stack.baseUrl);
      await new Promise((r) => setTimeout(r, 500));
      await update(i, target, 'completed');
      await new Promise((r) => setTimeout(r, 500));
      const down = await poller.stop();
      const { totalS } = await helperTimes();
      downtimes.push(down);
      helpers.push(totalS);
      log(`update ${k}: downtime ${down.toFixed(2)} s, helper ${totalS.toFixed(2)} s`);
    }

    const target = await images.publish('crashes');
    await update(i, target, 'rolled-back');
    const { lines, totalS } = await helperTimes();
    const from = lines.find((l) => l.text.startsWith('self-update: running: VERSION=dev-latest'));
    const to = lines.find((l) => l.text.startsWith('self-update: status rolled-back'));
    if (!from || !to) throw new Error(`helper output lacks the switch or the rollback:\n${lines.map((l) => l.text).join('\n')}`);
    const crashToHealthy = (to.at - from.at) / 1000;
    log(`crashing build: switch to rollback healthy ${crashToHealthy.toFixed(2)} s (helper ${totalS.toFixed(2)} s)`);

    const figures: Figure[] = [
      { name: `update downtime seen by a 100 ms /api/health poller, median of ${RUNS}`, value: median(downtimes), unit: 's', goal: '<= 3 s' },
      { name: 'update downtime, worst run', value: Math.max(...downtimes), unit: 's' },
      { name: `helper total time (start to exit), median of ${RUNS}`, value: median(helpers), unit: 's' },
      { name: 'crashing build: from the switch to the rollback being healthy', value: crashToHealthy, unit: 's', goal: '<= 30 s' },
    ];
    return figures;
  } finally {
    await i?.down();
    await images.cleanup();
  }
};

export default bench;

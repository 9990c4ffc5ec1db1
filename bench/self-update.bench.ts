// Self-update figures on the real rig, on the production compose file (deploy/docker-compose.yml,
// images built by scripts/build-image.sh), each next to the physical limit measured in the same run:
// - the outage of a successful update as a client polling /api/health every 100 ms sees it, and the
//   outage of a minimal Node HTTP service (bench/minimal-service: same base image, healthcheck style,
//   init and stop signal, and a neighbour on its network as the backend has its database) switched by
//   the same `docker compose up -d --wait --wait-timeout 300`; median of 5 each, and their ratio;
//   and the minimal service again in the backend's shape (two networks, two published ports:
//   bench/minimal-service/backend-shape.yml), so the ratio's remainder is seen apart from the
//   engine's cost of that shape;
//   each switch's outage broken into the engine's steps;
// - the helper's total time (container start to exit);
// - from the switch to a crashing build to the rollback being healthy (helper timestamps);
// - the engine's events of one update, relative to the helper's start.
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { median } from './stats.ts';
import type { Bench, Figure } from './run.ts';
import { ensureRig, freePort, must, run } from '../test/helpers/e2e/rig.ts';
import { ROOT } from '../test/helpers/shared/process.ts';
import { helperExit, HELPER, Images, startInstaller, type InstallerUnderTest } from '../test/helpers/e2e/self-update-rig.ts';

const RUNS = 5;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const MINIMAL_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), 'minimal-service');

/**
 * Sends GET /api/health every 100 ms, each request on its own (one that hangs in the switch does not
 * blind the next); the outage is the longest stretch between two healthy answers.
 */
function healthPoller(baseUrl: string) {
  const ok: number[] = [];
  const inFlight = new Set<Promise<void>>();
  const probe = async () => {
    try {
      const res = await fetch(`${baseUrl}/api/health`, { signal: AbortSignal.timeout(1_000) });
      if (res.ok) ok.push(Date.now());
      await res.body?.cancel();
    } catch {
      /* down */
    }
  };
  const timer = setInterval(() => {
    const p = probe().finally(() => inFlight.delete(p));
    inFlight.add(p);
  }, 100);
  return {
    /** The outage in seconds, with the last answer before it and the first after (epoch ms). */
    async stop(): Promise<{ s: number; lastOk: number; firstOk: number }> {
      clearInterval(timer);
      await Promise.all(inFlight);
      ok.sort((a, b) => a - b);
      let worst = { s: 0, lastOk: 0, firstOk: 0 };
      for (let k = 1; k < ok.length; k++) {
        const gap = (ok[k]! - ok[k - 1]!) / 1000;
        if (gap > worst.s) worst = { s: gap, lastOk: ok[k - 1]!, firstOk: ok[k]! };
      }
      return worst;
    },
  };
}

async function helperTimes(): Promise<{ totalS: number; startedAt: number; lines: { at: number; text: string }[] }> {
  const inspect = JSON.parse((await run('docker', ['inspect', HELPER])).stdout)[0];
  const startedAt = Date.parse(inspect.State.StartedAt);
  const totalS = (Date.parse(inspect.State.FinishedAt) - startedAt) / 1000;
  const logs = await run('docker', ['logs', '-t', HELPER]);
  const lines = (logs.stdout + logs.stderr).split('\n').filter(Boolean).map((l) => {
    const sp = l.indexOf(' ');
    return { at: Date.parse(l.slice(0, sp)), text: l.slice(sp + 1) };
  });
  return { totalS, startedAt, lines };
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

/** The engine's container events between two instants, for containers whose name matches. */
async function engineEvents(sinceMs: number, untilMs: number, names: RegExp): Promise<{ at: number; what: string }[]> {
  const out = await must('docker', ['events', '--since', (sinceMs / 1000).toFixed(3), '--until', (untilMs / 1000).toFixed(3), '--filter', 'type=container', '--format', '{{json .}}']);
  const skip = /^(exec_create|exec_start|exec_die|attach|resize|top)/;
  return out
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { timeNano: number; Action: string; Actor: { Attributes: { name: string } } })
    .filter((e) => names.test(e.Actor.Attributes.name) && !skip.test(e.Action))
    .map((e) => ({ at: e.timeNano / 1e6, what: `${e.Actor.Attributes.name} ${e.Action}` }));
}

/**
 * Where one switch's outage went, from the engine's events of the switched container: its last answer
 * to the old container's `die`, to the old one removed, to the new one started, to its first answer.
 */
function switchSteps(container: string, events: { at: number; what: string }[], down: { lastOk: number; firstOk: number }): string {
  const at = (action: string, after: number) => events.find((e) => e.what === `${container} ${action}` && e.at >= after)?.at;
  const kill = at('kill', down.lastOk - 5_000);
  const die = kill === undefined ? undefined : at('die', kill);
  const destroy = die === undefined ? undefined : at('destroy', die);
  const start = destroy === undefined ? undefined : at('start', destroy);
  if (kill === undefined || die === undefined || destroy === undefined || start === undefined) return 'the engine events of the switch are incomplete';
  const s = (from: number, to: number) => `${((to - from) / 1000).toFixed(2)} s`;
  return `last answer → die ${s(down.lastOk, die)}, → removed ${s(die, destroy)}, → new started ${s(destroy, start)}, → first answer ${s(start, down.firstOk)} (kill → last answer ${s(kill, down.lastOk)})`;
}

/** How the minimal service is laid out: on its own, or in the backend's shape (bench/minimal-service/backend-shape.yml). */
type Shape = 'plain' | 'backend-shape';

/** The minimal service's images, v0 and one per switch, built once for both shapes, and how to remove them. */
async function minimalImages(): Promise<{ remove(): Promise<void> }> {
  const tags = ['v0', ...Array.from({ length: RUNS }, (_, k) => `v${k + 1}`)];
  const remove = async () => void (await run('docker', ['rmi', '-f', ...tags.map((t) => `installer-bench/minimal:${t}`)]));
  // Its build context: the service, and the installer's own healthcheck script.
  const context = mkdtempSync(path.join(tmpdir(), 'bench-minimal-'));
  for (const f of ['Dockerfile', 'server.mjs']) copyFileSync(path.join(MINIMAL_DIR, f), path.join(context, f));
  copyFileSync(path.join(ROOT, 'scripts/healthcheck.sh'), path.join(context, 'healthcheck.sh'));
  try {
    for (const tag of tags) {
      await must('docker', ['build', '-q', '--build-arg', `VARIANT=${tag}-${Date.now()}`, '-t', `installer-bench/minimal:${tag}`, context], { env: { DOCKER_BUILDKIT: '0' }, timeoutMs: 5 * 60_000 });
    }
  } catch (err) {
    // A build that failed leaves none of the images built before it.
    await remove();
    throw err;
  } finally {
    rmSync(context, { recursive: true, force: true });
  }
  return { remove };
}

/** The minimal service in one shape, five switches with the helper's compose command; its outage for each. */
async function minimalOutages(log: (m: string) => void, shape: Shape): Promise<number[]> {
  const files = ['docker-compose.yml', ...(shape === 'backend-shape' ? ['backend-shape.yml'] : [])].flatMap((f) => ['-f', path.join(MINIMAL_DIR, f)]);
  const ports = { PORT: String(await freePort()), PUBLIC_PORT: String(await freePort()) };
  const compose = (version: string, args: string[]) => must('docker', ['compose', '-p', 'bench-minimal', ...files, ...args], { env: { VERSION: version, ...ports }, timeoutMs: 5 * 60_000 });
  const outages: number[] = [];
  try {
    await compose('v0', ['up', '-d', 'peer']);
    await compose('v0', ['up', '-d', '--wait', '--wait-timeout', '300', 'web']);
    for (let k = 1; k <= RUNS; k++) {
      const poller = healthPoller(`http://127.0.0.1:${ports.PORT}`);
      await sleep(500);
      const switchedAt = Date.now();
      await compose(`v${k}`, ['up', '-d', '--wait', '--wait-timeout', '300', 'web']);
      await sleep(500);
      const down = await poller.stop();
      outages.push(down.s);
      const events = await engineEvents(switchedAt - 1_000, Date.now(), /^bench-minimal-web$/);
      log(`minimal service${shape === 'backend-shape' ? " in the backend's shape" : ''} switch ${k}: outage ${down.s.toFixed(2)} s; ${switchSteps('bench-minimal-web', events, down)}`);
    }
  } finally {
    await run('docker', ['compose', '-p', 'bench-minimal', ...files, 'down', '--remove-orphans'], { env: { VERSION: 'v0', ...ports } });
  }
  return outages;
}

const bench: Bench = async (log) => {
  await ensureRig();
  const minimalBuild = await minimalImages();
  let minimal: number[], shaped: number[];
  try {
    minimal = await minimalOutages(log, 'plain');
    shaped = await minimalOutages(log, 'backend-shape');
  } finally {
    await minimalBuild.remove();
  }

  const images = new Images();
  let i: InstallerUnderTest | undefined;
  try {
    log('building the installer image (scripts/build-image.sh) and its variants');
    await images.buildBase('bench-base');
    await images.publish('bench-base', 'prod');
    for (let k = 1; k <= RUNS; k++) await images.buildVariant('good', 'bench-base', `good-${k}`);
    await images.buildVariant('crashes', 'bench-base', 'crashes');
    i = await startInstaller(images, 'bench-base', {}, 'prod');

    const outages: number[] = [];
    const helpers: number[] = [];
    let timeline: string[] = [];
    for (let k = 1; k <= RUNS; k++) {
      const target = await images.publish(`good-${k}`, 'prod');
      const poller = healthPoller(i.stack.baseUrl);
      await sleep(500);
      await update(i, target, 'completed');
      await sleep(500);
      const down = await poller.stop();
      const { totalS, startedAt } = await helperTimes();
      outages.push(down.s);
      helpers.push(totalS);
      const events = await engineEvents(startedAt - 1_000, startedAt + totalS * 1000 + 1_000, /^installer-/);
      log(`update ${k}: outage ${down.s.toFixed(2)} s, helper ${totalS.toFixed(2)} s; ${switchSteps('installer-backend', events, down)}`);
      if (k === 1) {
        const rel = (at: number) => `${((at - startedAt) / 1000).toFixed(2).padStart(6)} s`;
        timeline = [
          ...events.map((e) => ({ at: e.at, line: `${rel(e.at)}  ${e.what}` })),
          { at: down.lastOk, line: `${rel(down.lastOk)}  (client) last answer of the old backend` },
          { at: down.firstOk, line: `${rel(down.firstOk)}  (client) first answer of the new backend` },
        ]
          .sort((a, b) => a.at - b.at)
          .map((e) => e.line);
      }
    }
    log('engine events of update 1, from the helper start:');
    for (const line of timeline) log(`  ${line}`);

    const target = await images.publish('crashes', 'prod');
    await update(i, target, 'rolled-back');
    const { lines, totalS } = await helperTimes();
    // The switch (the helper's line with --wait), not the migrations it ran before.
    const from = lines.find((l) => l.text.startsWith('self-update: running: VERSION=') && l.text.includes(' --wait '));
    const to = lines.find((l) => l.text.startsWith('self-update: status rolled-back'));
    if (!from || !to) throw new Error(`helper output lacks the switch or the rollback:\n${lines.map((l) => l.text).join('\n')}`);
    const crashToHealthy = (to.at - from.at) / 1000;
    log(`crashing build: switch to rollback healthy ${crashToHealthy.toFixed(2)} s (helper ${totalS.toFixed(2)} s); the helper's lines from its switch:`);
    for (const l of lines.filter((x) => x.at >= from.at)) log(`  ${((l.at - from.at) / 1000).toFixed(2).padStart(6)} s  ${l.text.slice(0, 140)}`);

    const ratio = median(outages) / median(minimal);
    const figures: Figure[] = [
      { name: `installer outage, 100 ms /api/health poller, median of ${RUNS} (${outages.map((x) => x.toFixed(2)).join(', ')})`, value: median(outages), unit: 's', goal: '<= 1.5 s', ok: median(outages) <= 1.5 },
      { name: `minimal Node service outage, same compose command, median of ${RUNS} (${minimal.map((x) => x.toFixed(2)).join(', ')})`, value: median(minimal), unit: 's' },
      { name: 'installer outage / minimal service outage', value: ratio, unit: '×', goal: '<= 1.5', ok: ratio <= 1.5 },
      { name: `minimal service in the backend's shape (two networks, two published ports), median of ${RUNS} (${shaped.map((x) => x.toFixed(2)).join(', ')})`, value: median(shaped), unit: 's' },
      { name: "installer outage / the minimal service's in the backend's shape", value: median(outages) / median(shaped), unit: '×' },
      { name: `helper total time (start to exit), median of ${RUNS}`, value: median(helpers), unit: 's' },
      { name: 'crashing build: from the switch to the rollback being healthy', value: crashToHealthy, unit: 's', goal: '<= 10 s', ok: crashToHealthy <= 10 },
    ];
    return figures;
  } finally {
    await i?.down();
    await images.cleanup();
  }
};

export default bench;

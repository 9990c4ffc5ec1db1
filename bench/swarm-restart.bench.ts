// A restart of a replicated service, on the rig's Swarm against one host (docs/adr/0056-platform-on-a-swarm.md):
// the installer's restart job on a web service of three replicas with a health check, while a probe
// beside it asks for a page every 50 ms. The figure is the longest time with no answer (no healthy
// replica behind the name `web`): from the first probe that failed to the next that got its page.
// On the Swarm the restart goes start-first (goal: zero); on one host `docker compose restart`
// restarts the three containers at once.
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Bench, Figure } from './run.ts';
import { startTestApp, type TestApp } from '../test/helpers/api/app.ts';
import { docker, REGISTRY, run, uniqueName } from '../test/helpers/e2e/rig.ts';
import { requestJobAndFollow } from '../test/helpers/e2e/jobs.ts';
import { swarmForRun } from '../test/helpers/e2e/swarm-rig.ts';
import { eventually } from '../test/helpers/shared/eventually.ts';

const FILE = fileURLToPath(new URL('swarm-restart/docker-compose.yml', import.meta.url));
const ROUNDS = 3;

/** The longest run of failed probes between `from` and `to`: first failure to the next success, in ms. */
export function longestOutage(lines: { at: number; ok: boolean }[], from: number, to: number): number {
  let longest = 0;
  let failedAt: number | null = null;
  for (const l of lines.filter((x) => x.at >= from && x.at <= to)) {
    if (!l.ok) failedAt ??= l.at;
    else if (failedAt !== null) {
      longest = Math.max(longest, l.at - failedAt);
      failedAt = null;
    }
  }
  if (failedAt !== null) longest = Math.max(longest, to - failedAt);
  return longest;
}

/** `<RFC 3339 timestamp> ok|fail` lines, as `docker logs -t` and `docker service logs -t --raw` print them. */
function probeLines(out: string): { at: number; ok: boolean }[] {
  return out.split('\n').map((l) => /^(\S+)\s+(ok|fail)\s*$/.exec(l.trim())).filter((m): m is RegExpExecArray => m !== null).map((m) => ({ at: Date.parse(m[1]!), ok: m[2] === 'ok' }));
}

async function restartRounds(t: TestApp, probeLog: () => Promise<string>, log: (m: string) => void, where: string): Promise<number[]> {
  const outages: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    await eventually(async () => probeLines(await probeLog()).slice(-10).every((l) => l.ok) && probeLines(await probeLog()).length > 10, `the probe to see ${where} answer`, 120_000, 500);
    const from = Date.now();
    const { finished } = await requestJobAndFollow(t, 'restart', ['web']);
    if (finished.outcome !== 'completed') throw new Error(`the restart on ${where} ended ${finished.outcome}: ${finished.detail}`);
    // The probe's lines after the job, until it has answered again for a second.
    await new Promise((r) => setTimeout(r, 1_500));
    const outage = longestOutage(probeLines(await probeLog()), from, Date.now());
    log(`${where}, round ${i + 1}: ${outage} ms with no answer`);
    outages.push(outage);
  }
  return outages;
}

function platformDir(image: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'bench-restart-'));
  copyFileSync(FILE, path.join(dir, 'docker-compose.yml'));
  writeFileSync(path.join(dir, '.env'), `PLATFORM_IMAGE=${image}\n`);
  return dir;
}

const bench: Bench = async (log) => {
  const figures: Figure[] = [];
  const name = uniqueName('restartb');
  const image = `${REGISTRY}/${name}/busybox:1`;
  await docker(['tag', 'installer-rig/busybox:latest', image]);
  await docker(['push', '-q', image]);
  const release = await swarmForRun();
  try {
    // On the Swarm: the stack deployed by the installer's own deploy path (compose-up renders and pins it).
    const dir = platformDir(image);
    const t = await startTestApp({ controllers: true, env: { LOG_LEVEL: 'warn', PLATFORM_RUNTIME: 'swarm', PLATFORM_DIR: dir, PLATFORM_PROJECT: name } });
    try {
      const up = await requestJobAndFollow(t, 'compose-up');
      if (up.finished.outcome !== 'completed') throw new Error(`the stack did not come up: ${up.finished.detail}`);
      const since = new Date().toISOString();
      const outages = await restartRounds(t, () => docker(['service', 'logs', '--timestamps', '--raw', '--since', since, `${name}_probe`]), log, 'the Swarm');
      figures.push({ name: 'restart of 3 replicas on the Swarm (start-first), longest time with no healthy replica', value: Math.max(...outages), unit: 'ms', goal: '0 ms', ok: Math.max(...outages) === 0 });
    } finally {
      await t.close();
      await run('docker', ['stack', 'rm', name]);
    }
    // On one host: the same file as a Compose project, restarted by the same job.
    const hostDir = platformDir(image);
    const project = `${name}-host`;
    await docker(['compose', '-p', project, 'up', '-d', '--wait'], { cwd: hostDir });
    const h = await startTestApp({ controllers: true, env: { LOG_LEVEL: 'warn', PLATFORM_DIR: hostDir, PLATFORM_PROJECT: project } });
    try {
      const probe = (await docker(['compose', '-p', project, 'ps', '-q', 'probe'], { cwd: hostDir })).trim();
      const outages = await restartRounds(h, () => docker(['logs', '--timestamps', probe]), log, 'one host');
      figures.push({ name: 'the same restart on one host (docker compose restart), longest time with no answer', value: Math.max(...outages), unit: 'ms' });
    } finally {
      await h.close();
      await run('docker', ['compose', '-p', project, 'down', '-t', '1'], { cwd: hostDir });
    }
  } finally {
    await release();
    await run('docker', ['image', 'rm', image]);
  }
  return figures;
};

export default bench;

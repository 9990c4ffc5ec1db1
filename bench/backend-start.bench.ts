// The backend's own start in its image, without the switch around it: from the engine's start of the
// container to the first healthy answer of GET /api/health, the part of a self-update's outage that
// the backend's code decides (docs/self-update.md, "Figures"). The image is the one
// scripts/build-image.sh makes, run with its own command on the host's network (no network set-up
// in the figure) against a migrated database of the machine's Postgres, its secrets in a volume
// from a first start, as a switch finds them. Median of 12 starts, each of a new container.
import { randomBytes } from 'node:crypto';
import { median } from './stats.ts';
import type { Bench } from './run.ts';
import { ensureRig, freePort, must, run } from '../test/helpers/e2e/rig.ts';
import { createTestDatabase } from '../test/helpers/shared/db.ts';
import { eventually } from '../test/helpers/shared/eventually.ts';
import { ROOT } from '../test/helpers/shared/process.ts';

const RUNS = 12;

const bench: Bench = async (log) => {
  await ensureRig();
  const suffix = randomBytes(3).toString('hex');
  const image = `installer-bench/backend-start:${suffix}`;
  const secrets = `installer-bench-start-secrets-${suffix}`;
  log('building the installer image (scripts/build-image.sh)');
  await must('bash', [`${ROOT}/scripts/build-image.sh`, '--rig', image], { timeoutMs: 10 * 60_000 });
  const db = await createTestDatabase({ migrate: true });
  const port = await freePort();
  const health = `http://127.0.0.1:${port}/api/health`;
  const env = { DATABASE_URL: db.url, HOST: '127.0.0.1', PORT: String(port), MIGRATE_ON_BOOT: 'false' };

  /** Starts a new container of the image; ms from the engine's start to the first healthy answer, and from `docker start`. */
  async function start(): Promise<{ fromStarted: number; fromCommand: number }> {
    const id = (await must('docker', ['create', '--network', 'host', '--init', '-v', `${secrets}:/var/lib/installer/secrets`, ...Object.entries(env).flatMap(([k, v]) => ['-e', `${k}=${v}`]), image])).trim();
    try {
      const commandAt = Date.now();
      const started = must('docker', ['start', id]);
      started.catch(() => {}); // awaited below, once the answer came or the wait gave up
      const answeredAt = await eventually(
        async () => {
          const res = await fetch(health, { signal: AbortSignal.timeout(1_000) });
          await res.body?.cancel();
          return res.ok && Date.now();
        },
        `a healthy answer from ${image}`,
        60_000,
        5,
      ).catch(async (err: Error) => {
        throw new Error(`${err.message}\n${(await run('docker', ['logs', id])).stdout}`);
      });
      await started;
      const startedAt = Date.parse(JSON.parse(await must('docker', ['inspect', id]))[0].State.StartedAt);
      return { fromStarted: answeredAt - startedAt, fromCommand: answeredAt - commandAt };
    } finally {
      await run('docker', ['rm', '-f', id]);
    }
  }

  try {
    // The first start writes the secrets into their volume; a switch finds them there.
    await start();
    const starts: { fromStarted: number; fromCommand: number }[] = [];
    for (let k = 1; k <= RUNS; k++) {
      const s = await start();
      starts.push(s);
      log(`start ${k}: ${s.fromStarted} ms from the engine's start (${s.fromCommand} ms from docker start)`);
    }
    return [
      { name: `backend in its image: engine started → first /api/health answer, median of ${RUNS}`, value: median(starts.map((s) => s.fromStarted)), unit: 'ms' },
      { name: `backend in its image: docker start → first /api/health answer, median of ${RUNS}`, value: median(starts.map((s) => s.fromCommand)), unit: 'ms' },
    ];
  } finally {
    await run('docker', ['volume', 'rm', '-f', secrets]);
    await run('docker', ['rmi', '-f', image]);
    await db.drop();
  }
};

export default bench;

// `npm run soak [-- --minutes N]` (default 20, at most 20): the packaged installer stack
// (deploy/docker-compose.yml, images built by scripts/build-image.sh) on a Docker engine of its own,
// driven in a loop while it is hurt: platform jobs and self-updates requested through the API, the
// backend's node process killed with SIGKILL, its Postgres container restarted and the engine
// itself restarted, each at random moments. Then, with everything idle, what must hold (issue
// "Nothing wedges it"; docs/reliability.md, "The soak"):
//   no job, self-update or reconcile run left in flight; a new job and a new self-update accepted
//   (no 409); every action audited once; every job's events numbered 1..n with no gap or repeat and
//   one `finished`; every webhook event delivered, under one key, in its endpoint's order.
// It prints the figures and each check, and exits 1 when one fails.
//
// The engine is private: its own dockerd (data root, exec root, pidfile, socket) in a mount
// namespace of its own whose /run is empty, so that the stack's `/var/run/docker.sock` binds (the
// backend's and the self-update helper's) name this engine and never the host's. Restarting "the
// engine" restarts that one; the host's engine is used only to build the images, which go through
// the local registry. Everything is removed at the end, on failure and on Ctrl-C too.
//
// Its parts, in scripts/soak/: the private engine (engine.ts), the stack on it (stack.ts), the webhook
// receiver (receiver.ts), the builds to publish (builds.ts), the chaos (chaos.ts), the settling and
// the last requests (idle.ts), the records' checks and the figures (records.ts), and what is
// counted and printed (report.ts).
import { must, run } from '../test/helpers/e2e/rig.ts';
import { Images } from '../test/helpers/e2e/self-update-rig.ts';
import { Builds } from './soak/builds.ts';
import { chaos } from './soak/chaos.ts';
import { Engine } from './soak/engine.ts';
import { idleThenAccepted } from './soak/idle.ts';
import { Receiver } from './soak/receiver.ts';
import { printFigures, recordsHold } from './soak/records.ts';
import { Checks, log, noFigures, out } from './soak/report.ts';
import { Stack } from './soak/stack.ts';

const MAX_MINUTES = 20;
/** Kept for settling and the final checks at the end of the run. */
const FINAL_RESERVE_MS = 5 * 60_000;

function minutesArg(argv: string[]): number {
  const i = argv.indexOf('--minutes');
  if (i < 0) return MAX_MINUTES;
  const n = Number(argv[i + 1]);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--minutes must be a positive number, not ${argv[i + 1] ?? 'nothing'}`);
  return Math.min(n, MAX_MINUTES);
}

async function main(): Promise<number> {
  const minutes = minutesArg(process.argv.slice(2));
  const startedAt = Date.now();
  const hardEnd = startedAt + minutes * 60_000;
  const chaosEnd = Math.max(startedAt + 60_000, hardEnd - FINAL_RESERVE_MS);
  out(`soak: ${minutes} min (chaos until ${new Date(chaosEnd).toISOString()}, everything over by ${new Date(hardEnd).toISOString()})`);

  const images = new Images();
  const engine = new Engine();
  const receiver = new Receiver();
  let stack: Stack | undefined;
  let cleaned = false;
  const cleanup = async () => {
    if (cleaned) return;
    cleaned = true;
    receiver.stop();
    if (stack && engine.running()) await stack.down().catch((err: unknown) => log(`stack down: ${(err as Error).message}`));
    await engine.destroy().catch((err: unknown) => log(`engine destroy: ${(err as Error).message}`));
    await images.cleanup().catch((err: unknown) => log(`image cleanup: ${(err as Error).message}`));
  };
  const onSignal = (sig: NodeJS.Signals) => {
    out(`soak: ${sig}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // The whole run is bounded: past the end, whatever is running is abandoned and cleaned up.
  const bound = setTimeout(() => {
    out(`soak: FAIL the run exceeded ${minutes} min; cleaning up`);
    void cleanup().finally(() => process.exit(1));
  }, hardEnd - startedAt + 2 * 60_000);
  bound.unref();

  const f = noFigures();
  const checks = new Checks();
  const check = checks.check;

  try {
    // Images: the installer built from this checkout, and newer builds to publish one by one.
    log('building the installer image and the builds to publish (host engine, local registry)');
    const builds = new Builds(images);
    await builds.start();

    log('starting the private engine');
    await engine.start();
    await must('bash', ['-c', 'set -o pipefail; docker save installer-rig/postgres:15 installer-rig/busybox:latest | docker -H "$1" load', 'load', engine.host], { timeoutMs: 300_000 });
    await receiver.start();
    stack = new Stack(engine, images);
    log(`starting the stack ${stack.project} on it`);
    await stack.up('soak-base');
    const s = stack;
    const gateway = (await engine.docker(['network', 'inspect', '--format', '{{range .IPAM.Config}}{{.Gateway}}{{end}}', `${s.project}_default`])).trim();
    const hook = await s.call('POST', '/api/notifications/webhooks', { url: `http://${gateway}:${receiver.port}/hook`, allowPrivateNetwork: true });
    if (hook.status !== 201) throw new Error(`adding the webhook endpoint: ${hook.status} ${JSON.stringify(hook.body)}`);
    const endpointId = String(hook.body.id);
    // The platform up once, so that its jobs act on something.
    const first = await s.call('POST', '/api/deployment/jobs', { action: 'compose-up' });
    if (first.status !== 202) throw new Error(`the first platform job: ${first.status} ${JSON.stringify(first.body)}`);
    f.jobsAccepted++;

    const soak = { engine, stack: s, images, builds, receiver, endpointId, f, check };
    await chaos(soak, chaosEnd);
    await idleThenAccepted(soak, hardEnd);
    const webhooks = await recordsHold(soak);
    await printFigures(soak, { startedAt, minutes, ...webhooks });
  } catch (err) {
    check('the soak ran to its end', false, (err as Error).stack ?? String(err));
    if (engine.running()) {
      const logs = await run('docker', ['-H', engine.host, 'logs', '--tail', '60', 'installer-backend']);
      out(`--- backend log ---\n${logs.stdout}${logs.stderr}`);
    }
  } finally {
    clearTimeout(bound);
    await cleanup();
  }
  const failed = checks.failed();
  out(`soak: ${checks.all.length - failed.length} of ${checks.all.length} checks passed${failed.length ? `; FAILED: ${failed.map((c) => c.name).join('; ')}` : ''}`);
  return failed.length ? 1 : 0;
}

process.exit(await main());

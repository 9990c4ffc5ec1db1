// The backend container runs an init process as PID 1, so the compose processes that cancelled jobs
// leave behind are reaped. The real stack runs real compose jobs inside installer-backend and each
// is cancelled while compose is busy: pulls from a registry that never answers (compose ends on
// SIGTERM), and pulls whose compose hangs reading a file of the project (a file on a hung network
// mount, stood in for by a FIFO nobody writes): compose ignores SIGTERM there, the job kills its
// process group 5 s later, and compose, killed with its parent (the docker CLI), is left to PID 1.
// Then /proc inside the container is read for processes in state Z (zombie).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { randomBytes } from 'node:crypto';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import path from 'node:path';
import { buildInstallerImage, docker, REGISTRY } from '../helpers/e2e/rig.ts';
import { startStack, type Stack } from '../helpers/e2e/stack.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { parseSse } from '../helpers/shared/sse.ts';

const tag = `dev-e2e-zombies-${randomBytes(3).toString('hex')}`;
const ref = `${REGISTRY}/installer:${tag}`;
let stack: Stack | undefined;
let admin: string;
let localDir: string;
// A registry that accepts connections and never answers: a pull from it hangs until cancelled.
let silent: Server;
let silentPort: number;
let silentConnections = 0;
const sockets = new Set<Socket>();

/** Writes the platform's .env inside the backend: which file the service's env_file names. */
async function platformEnv(appEnvFile: string): Promise<void> {
  writeFileSync(path.join(localDir, '.env'), `TZ=UTC\nPLATFORM_IMAGE=127.0.0.1:${silentPort}/zombie-test:latest\nAPP_ENV_FILE=${appEnvFile}\n`);
  await docker(['cp', path.join(localDir, '.env'), `installer-backend:${stack!.platformDir}/.env`]);
}

beforeAll(async () => {
  silent = createServer((s) => {
    silentConnections++;
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  silentPort = (silent.address() as AddressInfo).port;
  await buildInstallerImage([ref]);
  stack = await startStack({ version: tag });
  admin = await stack.login('admin', await stack.adminPassword());
  // The platform inside the backend: one service, its image on the silent registry, its env_file
  // chosen in .env (a plain file, or the FIFO that makes compose hang).
  localDir = mkdtempSync(path.join(tmpdir(), 'installer-zombies-'));
  writeFileSync(path.join(localDir, 'docker-compose.yml'), 'services:\n  app:\n    image: ${PLATFORM_IMAGE}\n    env_file:\n      - ${APP_ENV_FILE}\n');
  writeFileSync(path.join(localDir, 'app.env'), 'GREETING=hello\n');
  // PLATFORM_DIR is a bind mount at the same path inside and out; the files go in through the
  // container all the same, as the backend sees them.
  const dir = stack.platformDir;
  await docker(['cp', path.join(localDir, 'docker-compose.yml'), `installer-backend:${dir}/docker-compose.yml`]);
  await docker(['cp', path.join(localDir, 'app.env'), `installer-backend:${dir}/app.env`]);
  await docker(['exec', 'installer-backend', 'mkfifo', `${dir}/hung.env`]);
});

afterAll(async () => {
  await stack?.down();
  for (const s of sockets) s.destroy();
  silent?.close();
  if (localDir) rmSync(localDir, { recursive: true, force: true });
});

interface Proc {
  pid: number;
  comm: string;
  state: string;
  ppid: number;
  cmdline: string;
}

/** Every process in the backend container, from /proc (read by node, which the image has). */
async function processes(): Promise<Proc[]> {
  const script = `
    const fs = require('node:fs');
    const out = [];
    for (const d of fs.readdirSync('/proc')) {
      if (!/^[0-9]+$/.test(d)) continue;
      try {
        const cmdline = fs.readFileSync('/proc/' + d + '/cmdline', 'utf8').split('\\0').join(' ').trim();
        out.push({ stat: fs.readFileSync('/proc/' + d + '/stat', 'utf8'), cmdline });
      } catch {}
    }
    process.stdout.write(JSON.stringify(out));`;
  const raw = JSON.parse(await docker(['exec', 'installer-backend', 'node', '-e', script])) as { stat: string; cmdline: string }[];
  return raw.map(({ stat, cmdline }) => {
    const open = stat.indexOf('(');
    const close = stat.lastIndexOf(')');
    const [state, ppid] = stat.slice(close + 2).split(' ');
    return { pid: Number(stat.slice(0, open).trim()), comm: stat.slice(open + 1, close), state: state!, ppid: Number(ppid), cmdline };
  });
}

const isCompose = (p: Proc) => p.comm === 'docker' || p.comm === 'docker-compose';

/** The end state of a job, from its event stream. */
async function finishedState(jobId: string): Promise<string> {
  const res = await fetch(`${stack!.baseUrl}/api/deployment/jobs/${jobId}/logs`, { headers: { authorization: `Bearer ${admin}` }, signal: AbortSignal.timeout(120_000) });
  expect(res.status).toBe(200);
  const events = parseSse(await res.text());
  expect(events.at(-1)?.event).toBe('finished');
  return String(events.at(-1)?.data.state);
}

/**
 * Starts a pull, waits until `busy` says compose is at work, cancels it, and waits for its end.
 * Returns how long the job took to end once cancelled (ms).
 */
async function cancelledPull(what: string, busy: () => Promise<boolean>): Promise<number> {
  const res = await fetch(`${stack!.baseUrl}/api/deployment/jobs`, {
    method: 'POST',
    headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
    body: JSON.stringify({ action: 'pull' }),
  });
  expect(res.status, await res.clone().text()).toBe(202);
  const jobId = ((await res.json()) as { jobId: string }).jobId;
  await eventually(busy, what, 60_000, 100);
  const cancelledAt = Date.now();
  const cancel = await fetch(`${stack!.baseUrl}/api/deployment/jobs/${jobId}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${admin}` } });
  expect(cancel.status, await cancel.clone().text()).toBeLessThan(300);
  expect(await finishedState(jobId)).toBe('cancelled');
  return Date.now() - cancelledAt;
}

/** Waits until no compose process of a job is alive, then lists the zombies. */
async function zombiesOnceSettled(): Promise<Proc[]> {
  await eventually(async () => !(await processes()).some((p) => p.state !== 'Z' && isCompose(p)), 'the compose processes to end', 30_000, 250);
  // An orphan is reaped as soon as it exits; give the reaper a moment before looking.
  await new Promise((r) => setTimeout(r, 1_000));
  return (await processes()).filter((p) => p.state === 'Z');
}

describe('the backend container reaps what cancelled jobs leave behind', () => {
  it('runs an init process as PID 1, with node as its child', async () => {
    const inspect = JSON.parse(await docker(['inspect', 'installer-backend']))[0];
    expect(inspect.HostConfig.Init).toBe(true);
    const procs = await processes();
    expect(procs.find((p) => p.pid === 1)?.comm).toBe('docker-init');
    expect(procs.find((p) => p.ppid === 1 && p.cmdline.includes('dist/src/bundle/start.js'))).toBeDefined();
  });

  it('leaves no zombie after cancelled pulls from a registry that never answers', async () => {
    await platformEnv('app.env');
    for (let n = 1; n <= 2; n++) {
      const before = silentConnections;
      await cancelledPull(`pull ${n} to reach the silent registry`, async () => silentConnections > before);
    }
    expect(await zombiesOnceSettled()).toEqual([]);
  });

  it('leaves no zombie after cancelled pulls whose compose ignores SIGTERM and is killed', async () => {
    await platformEnv('hung.env');
    const compose = async () => (await processes()).filter((p) => p.comm === 'docker-compose' && p.state !== 'Z').map((p) => p.pid);
    for (let n = 1; n <= 2; n++) {
      // Compose is up and blocked opening the FIFO: only SIGKILL ends it.
      let seen: number[] = [];
      const took = await cancelledPull(`compose of pull ${n} to hang on the project's file`, async () => {
        const now = await compose();
        // The same compose process, still there a second later: it hangs, it is not merely starting.
        const hanging = now.some((pid) => seen.includes(pid));
        seen = now;
        if (!hanging) await new Promise((r) => setTimeout(r, 1_000));
        return hanging;
      });
      // SIGTERM did not end it: the job's process group was killed after the 5 s grace.
      expect(took).toBeGreaterThanOrEqual(4_500);
    }
    expect(await zombiesOnceSettled()).toEqual([]);
    expect((await fetch(`${stack!.baseUrl}/api/health`)).status).toBe(200);
  });
});

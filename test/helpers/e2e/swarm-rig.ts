// The rig's multi-node Swarm: the machine's engine as the manager, and worker engines in privileged
// containers of installer-rig/swarm-node (built by scripts/rig/setup.sh from the rig's Debian base
// with the engine packages the machine runs). They are joined over a bridge network of their own:
// the manager advertises its address on that bridge, so the Swarm's control and VXLAN data traffic
// stays on it (the manager advertising the machine's eth0 address, the workers reached it but its
// overlay traffic to them did not arrive). The rig's registry (127.0.0.1:5000 on the machine) is
// carried to the same address inside each worker by a relay on the bridge's gateway, so an image
// named 127.0.0.1:5000/... is pulled by whichever node runs its task.
//
// The Swarm is made once per test run (the `e2e-swarm` project's global setup) and reused by a
// second run that finds it up; the run that made it takes it down. A Swarm that cannot form fails
// the tests that need it.
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { docker, run } from './rig.ts';
import { eventually } from '../shared/eventually.ts';

export const SWARM_NETWORK = 'installer-swarm';
// Outside the engine's default address pools (172.17-31.0.0/16, 192.168.0.0/16 in /20s), from which
// the other runs' compose networks are given theirs: a fixed subnet there can be taken first.
export const SWARM_SUBNET = '10.213.0.0/24';
export const SWARM_GATEWAY = '10.213.0.1';
export const SWARM_NODE_IMAGE = 'installer-rig/swarm-node:latest';
const RELAY = 'installer-swarm-relay';
export const WORKERS = ['installer-swarm-w1', 'installer-swarm-w2'] as const;
export type WorkerName = (typeof WORKERS)[number];

export interface SwarmNode {
  id: string;
  hostname: string;
  role: 'manager' | 'worker';
  state: string;
  availability: string;
}

/** The Swarm's nodes as the manager sees them. */
export async function swarmNodes(): Promise<SwarmNode[]> {
  const out = await docker(['node', 'ls', '--format', '{{json .}}']);
  const rows = out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as { ID: string; Hostname: string; Status: string; Availability: string; ManagerStatus: string });
  return rows.map((r) => ({ id: r.ID, hostname: r.Hostname, role: r.ManagerStatus ? 'manager' : 'worker', state: r.Status.toLowerCase(), availability: r.Availability.toLowerCase() }));
}

/** Runs the docker CLI against a worker's own engine. */
export const onWorker = (worker: WorkerName, args: string[]) => docker(['exec', worker, 'docker', ...args]);

const localState = async () => (await docker(['info', '--format', '{{.Swarm.LocalNodeState}}'])).trim();

async function running(container: string): Promise<boolean> {
  const r = await run('docker', ['inspect', '-f', '{{.State.Running}}', container]);
  return r.code === 0 && r.stdout.trim() === 'true';
}

const exists = async (container: string) => (await run('docker', ['inspect', container])).code === 0;

/**
 * True when the Swarm this file makes is there: the manager active and every container of it made.
 * A worker a test killed (or a machine's restart stopped) is started again and waited for, not
 * replaced: a test of another run may be using the Swarm, and drains or kills its nodes on purpose.
 */
async function swarmIsThere(): Promise<boolean> {
  if ((await localState()) !== 'active') return false;
  for (const c of [RELAY, ...WORKERS]) if (!(await exists(c))) return false;
  const nodes = await swarmNodes();
  if (!WORKERS.every((w) => nodes.some((n) => n.hostname === w))) return false;
  for (const c of [RELAY, ...WORKERS]) if (!(await running(c))) await docker(['start', c]);
  await waitReady();
  return true;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** One process at a time makes or removes the Swarm (two test runs on one machine). */
async function locked<T>(fn: () => Promise<T>): Promise<T> {
  const lock = path.join(tmpdir(), 'installer-swarm-rig.lock');
  await eventually(() => {
    try {
      mkdirSync(lock);
      writeFileSync(path.join(lock, 'pid'), String(process.pid));
      return true;
    } catch {
      // A lock whose holder died (a run stopped mid-way) is broken, not waited for.
      let holder = NaN;
      try {
        holder = Number(readFileSync(path.join(lock, 'pid'), 'utf8'));
      } catch {
        /* being made or removed right now */
      }
      const dead = Number.isInteger(holder) && holder > 0 ? !alive(holder) : Date.now() - (statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now()) > 60_000;
      if (dead) rmSync(lock, { recursive: true, force: true });
      return false;
    }
  }, `the Swarm rig's lock ${lock}`, 300_000, 200);
  try {
    return await fn();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/** Makes the Swarm, or finds it up. Returns whether this call made it (and so should take it down). */
export async function ensureSwarm(): Promise<boolean> {
  return locked(async () => {
    if (await swarmIsThere()) return false;
    await removeSwarm();
    await docker(['network', 'create', '--driver', 'bridge', '--subnet', SWARM_SUBNET, '--gateway', SWARM_GATEWAY, SWARM_NETWORK]);
    await docker(['swarm', 'init', '--advertise-addr', SWARM_GATEWAY, '--data-path-addr', SWARM_GATEWAY]);
    // The manager's side of the registry relay: on the bridge's gateway, to the registry on loopback.
    await docker(['run', '-d', '--name', RELAY, '--network', 'host', '--restart', 'unless-stopped', '--entrypoint', 'socat', SWARM_NODE_IMAGE,
      `TCP-LISTEN:5000,bind=${SWARM_GATEWAY},fork,reuseaddr`, 'TCP:127.0.0.1:5000']);
    const token = (await docker(['swarm', 'join-token', '-q', 'worker'])).trim();
    await Promise.all(WORKERS.map(async (w) => {
      await docker(['run', '-d', '--name', w, '--hostname', w, '--privileged', '--network', SWARM_NETWORK, '-v', '/var/lib/docker',
        '-e', `REGISTRY_RELAY=${SWARM_GATEWAY}:5000`, SWARM_NODE_IMAGE]);
      await eventually(async () => (await run('docker', ['exec', w, 'docker', 'version'])).code === 0, `the worker engine ${w} to answer`, 60_000, 200);
      await onWorker(w, ['swarm', 'join', '--token', token, `${SWARM_GATEWAY}:2377`]);
    }));
    await waitReady();
    return true;
  });
}

/** Waits until every node is Ready (after a worker came back, say). */
export async function waitReady(timeoutMs = 90_000): Promise<SwarmNode[]> {
  return eventually(async () => {
    const nodes = await swarmNodes();
    return nodes.length === WORKERS.length + 1 && nodes.every((n) => n.state === 'ready') ? nodes : null;
  }, 'every node of the Swarm to be Ready', timeoutMs, 250);
}

/** Drains a node (its tasks move to the others), or makes it active again. */
export const setAvailability = (hostname: string, availability: 'drain' | 'active') => docker(['node', 'update', '--availability', availability, hostname]);

/** Kills a worker's engine at once (the node is lost, as a machine that loses power). */
export const killWorker = (w: WorkerName) => docker(['kill', w]);

/** Starts a killed worker's engine again, with its data, and waits until its node is Ready. */
export async function reviveWorker(w: WorkerName): Promise<void> {
  if (!(await running(w))) await docker(['start', w]);
  await waitReady();
}

/** Takes the Swarm down: workers and relay removed, the manager out of swarm mode, the networks gone. */
export async function removeSwarm(): Promise<void> {
  for (const c of [...WORKERS, RELAY]) await run('docker', ['rm', '-f', '-v', c]);
  if ((await localState()) !== 'inactive') await docker(['swarm', 'leave', '--force']);
  for (const n of [SWARM_NETWORK, 'docker_gwbridge']) {
    await eventually(async () => {
      const r = await run('docker', ['network', 'rm', n]);
      return r.code === 0 || /not found/i.test(r.stderr);
    }, `the network ${n} to be removed`, 30_000, 250);
  }
}

/** Where each test run using the Swarm leaves its pid while it does (two runs on one machine). */
const HOLDERS = path.join(tmpdir(), 'installer-swarm-holders');


/**
 * For the global setup: the Swarm made or found, held by this run; at its end, taken down by the
 * last run holding it (a run's pid left behind by a run that died does not count).
 */
export async function swarmForRun(): Promise<() => Promise<void>> {
  const release = await hold();
  await ensureSwarm();
  return release;
}

/**
 * For the whole suite (scripts/run-tests.ts): holds the Swarm without making it, so that the
 * Swarm's run, ending while the others still run, leaves it up; taking it down (workers removed,
 * the manager leaving swarm mode) stalls the engine for a moment, long enough to fail a health
 * check of theirs. The suite takes it down once every run has ended.
 */
export const holdSwarmForSuite = (): Promise<() => Promise<void>> => hold();

/** Leaves this process's pid among the holders; the release removes it and, when no live holder is left, the Swarm. */
async function hold(): Promise<() => Promise<void>> {
  mkdirSync(HOLDERS, { recursive: true });
  const mine = path.join(HOLDERS, String(process.pid));
  await locked(async () => writeFileSync(mine, ''));
  return () =>
    locked(async () => {
      rmSync(mine, { force: true });
      const others = readdirSync(HOLDERS).filter((f) => alive(Number(f)));
      if (!others.length) await removeSwarm();
    });
}

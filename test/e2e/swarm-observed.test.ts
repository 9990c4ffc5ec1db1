// Observed state across the nodes of the rig's real 3-node Swarm (the machine's engine its manager):
// a stack of three services (web: three replicas, at most one per node; api: two; agent: global) is
// deployed with `docker stack deploy`, and an installer with PLATFORM_RUNTIME=swarm reads it back:
// the status names every node with its role, state and availability, each service's replicas, and
// the tasks on each node, as the docker CLI sees them; a change to a service reaches the platform's
// row from the engine's events, well before the observer's interval; the update check and the
// diagnostics say `swarm`. An installer pointed at a worker's engine says the engine is no manager.
// Other files drain or kill workers: each comparison waits until the Swarm and the stack agree with it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { docker, REGISTRY, run, uniqueName } from '../helpers/e2e/rig.ts';
import { swarmNodes, waitReady, WORKERS } from '../helpers/e2e/swarm-rig.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { ensureUiBuilt, expectAccessible, launchChromium, newPage, useToken } from '../helpers/e2e/ui.ts';
import { readObserved } from '../../src/state/observed.ts';
import type { SwarmObservation } from '../../src/contracts/swarm.ts';

const stack = uniqueName('swobs');
const image = `${REGISTRY}/${stack}/busybox:1`;
const service = (command: string, deploy: object) => ({ image, command: ['sh', '-c', command], stop_grace_period: '1s', deploy });
const COMPOSE = {
  services: {
    web: service('sleep 86400', { replicas: 3, placement: { max_replicas_per_node: 1 } }),
    api: service('sleep 86400', { replicas: 2 }),
    agent: service('sleep 86400', { mode: 'global' }),
  },
};
let t: TestApp;
let dir = '';

interface Status {
  project: string;
  runtime: string;
  containers: { name: string; service: string; state: string }[];
  swarm?: SwarmObservation;
  swarmError?: string;
}

const get = async <T,>(app: TestApp, url: string): Promise<T> => {
  const res = await app.app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${await app.token('admin')}` } });
  expect(res.statusCode, res.body).toBe(200);
  return JSON.parse(res.body) as T;
};

/** The stack's services as `docker service ls` reports them: mode and running/desired replicas. */
async function cliServices(): Promise<Map<string, { mode: string; running: number; desired: number }>> {
  const out = await docker(['service', 'ls', '--filter', `label=com.docker.stack.namespace=${stack}`, '--format', '{{.Name}}\t{{.Mode}}\t{{.Replicas}}']);
  const rows = out.trim().split('\n').filter(Boolean).map((l) => l.split('\t'));
  return new Map(rows.map(([name, mode, replicas]) => {
    const [, running, desired] = /^(\d+)\/(\d+)/.exec(replicas!)!;
    return [name!.slice(stack.length + 1), { mode: mode!, running: Number(running), desired: Number(desired) }];
  }));
}

/** The running tasks of a service as `docker service ps` reports them: full id and node. */
async function cliTasks(name: string): Promise<{ id: string; node: string }[]> {
  const out = await docker(['service', 'ps', `${stack}_${name}`, '--no-trunc', '--filter', 'desired-state=running', '--format', '{{.ID}}\t{{.Node}}\t{{.CurrentState}}']);
  return out.trim().split('\n').filter(Boolean).map((l) => l.split('\t')).filter((r) => r[2]!.startsWith('Running')).map(([id, node]) => ({ id: id!, node: node! }));
}

beforeAll(async () => {
  await waitReady();
  await docker(['tag', 'installer-rig/busybox:latest', image]);
  await docker(['push', '-q', image]);
  dir = mkdtempSync(path.join(tmpdir(), `${stack}-`));
  // The stack's compose file is the platform's: its service list comes from it as on a Compose host.
  writeFileSync(path.join(dir, 'docker-compose.yml'), JSON.stringify(COMPOSE, null, 2));
  await docker(['stack', 'deploy', '-c', path.join(dir, 'docker-compose.yml'), stack]);
  // Every reader refreshes a row older than 2 s: the status is the Swarm of that moment.
  t = await startTestApp({
    controllers: true,
    env: { PLATFORM_RUNTIME: 'swarm', PLATFORM_PROJECT: stack, PLATFORM_DIR: dir, OBSERVED_MAX_AGE_SECONDS: '2', INSTALLER_REGISTRY: '127.0.0.1:5999' },
  });
}, 300_000);

afterAll(async () => {
  await t?.close();
  await run('docker', ['stack', 'rm', stack]);
  await run('docker', ['image', 'rm', image]);
});

describe('a stack on the 3-node Swarm, as the installer observes it', () => {
  it('the status: every node with its role, each service with its replicas, the tasks on each node, as the docker CLI sees them', async () => {
    // Until the stack has converged on the nodes that take tasks now (all three, unless another file
    // drained or killed a worker), and the status agrees with the CLI.
    const seen = await eventually(async () => {
      const nodes = await swarmNodes();
      const eligible = nodes.filter((n) => n.state === 'ready' && n.availability === 'active').map((n) => n.hostname).sort();
      const cli = { services: await cliServices(), web: await cliTasks('web'), api: await cliTasks('api'), agent: await cliTasks('agent') };
      const on = (tasks: { node: string }[]) => tasks.map((x) => x.node).sort().join();
      if (on(cli.web) !== eligible.join() || on(cli.agent) !== eligible.join() || cli.api.length !== 2) return null;
      const s = await get<Status>(t, '/api/deployment/status');
      if (!s.swarm) return null;
      const nodeRows = (list: { hostname: string; role: string; state: string; availability: string }[]) => list.map((n) => [n.hostname, n.role, n.state, n.availability].join()).sort().join(';');
      const replicas = s.swarm.services.map((x) => `${x.service}:${x.runningReplicas}/${x.desiredReplicas}`).sort().join();
      const cliReplicas = [...cli.services].map(([n, x]) => `${n}:${x.running}/${x.desired}`).sort().join();
      const running = (name: string) => s.swarm!.tasks.filter((x) => x.service === name && x.current && x.state === 'running').map((x) => `${x.id}@${x.node}`).sort().join();
      const cliRunning = (tasks: { id: string; node: string }[]) => tasks.map((x) => `${x.id}@${x.node}`).sort().join();
      const agrees = nodeRows(s.swarm.nodes) === nodeRows(nodes) && replicas === cliReplicas && (['web', 'api', 'agent'] as const).every((n) => running(n) === cliRunning(cli[n]));
      return agrees ? { s, swarm: s.swarm, eligible, agentDesired: cli.services.get('agent')!.desired } : null;
    }, 'the stack to converge and the status to agree with the CLI', 180_000, 1_000);
    if (seen.eligible.length < 3) console.log(`swarm observed: only ${seen.eligible.join(', ')} take tasks now (another file drained or killed a worker)`);

    const { s, swarm, eligible } = seen;
    expect(s).toMatchObject({ project: stack, runtime: 'swarm' });
    expect(s.swarmError).toBeUndefined();
    // Nodes: the three, with their roles.
    expect(swarm.nodes.map((n) => n.hostname).sort()).toEqual(['vm', ...WORKERS].sort());
    expect(swarm.nodes.find((n) => n.hostname === 'vm')).toMatchObject({ role: 'manager', leader: true });
    for (const w of WORKERS) expect(swarm.nodes.find((n) => n.hostname === w)).toMatchObject({ role: 'worker', leader: false });
    // Services: mode and replicas (web: one per node that takes tasks, at most 3; agent: one on each).
    const byName = new Map(swarm.services.map((x) => [x.service, x]));
    expect(byName.get('web')).toMatchObject({ name: `${stack}_web`, mode: 'replicated', desiredReplicas: 3, runningReplicas: Math.min(3, eligible.length), image });
    expect(byName.get('api')).toMatchObject({ mode: 'replicated', desiredReplicas: 2, runningReplicas: 2 });
    expect(byName.get('agent')).toMatchObject({ mode: 'global', desiredReplicas: seen.agentDesired, runningReplicas: eligible.length });
    // Tasks: web's and agent's running tasks one on each node that takes tasks; web's three slots all have a current task.
    for (const name of ['web', 'agent']) {
      expect(swarm.tasks.filter((x) => x.service === name && x.current && x.state === 'running').map((x) => x.node).sort(), name).toEqual(eligible);
    }
    expect(swarm.tasks.filter((x) => x.service === 'web' && x.current).map((x) => x.slot).sort()).toEqual([1, 2, 3]);
    expect(swarm.tasks.filter((x) => x.service === 'agent').every((x) => x.slot === null)).toBe(true);
    // Containers: one per current task, on any node; those on this node are the engine's own containers, by name.
    expect(s.containers).toHaveLength(swarm.tasks.filter((x) => x.current).length);
    const here = swarm.tasks.filter((x) => x.current && x.node === 'vm' && x.state === 'running');
    if (eligible.includes('vm')) expect(here.length).toBeGreaterThanOrEqual(2);
    for (const task of here) {
      const name = (await docker(['ps', '--filter', `label=com.docker.swarm.task.id=${task.id}`, '--format', '{{.Names}}'])).trim();
      expect(s.containers.map((c) => c.name)).toContain(name);
    }
  });

  it('a change to a service reaches the platform row from the engine events, before the 30 s interval', async () => {
    const db = t.db.database.db;
    const desired = async () => (await readObserved(db, 'platform'))?.data?.swarm?.services.find((s) => s.service === 'api')?.desiredReplicas;
    expect(await eventually(desired, 'api to be observed')).toBe(2);
    const started = Date.now();
    await docker(['service', 'scale', '--detach', `${stack}_api=1`]);
    await expect.poll(desired, { timeout: 10_000, interval: 100 }).toBe(1);
    console.log(`swarm observer: a service scaled seen in the platform row after ${Date.now() - started} ms`);
    const row = (await readObserved(db, 'platform'))!;
    expect(row.conditions.find((c) => c.type === 'SwarmReachable')).toMatchObject({ status: 'True', reason: 'ManagerAnswered' });
  });

  it('the update check and the diagnostics name the runtime; the bundle holds the Swarm', async () => {
    expect(await get<{ platformRuntime: string }>(t, '/api/system/self-update-check')).toMatchObject({ platformRuntime: 'swarm' });
    const bundle = await get<{ platformRuntime: string; platform: { swarm: SwarmObservation } }>(t, '/api/system/diagnostics');
    expect(bundle.platformRuntime).toBe('swarm');
    expect(bundle.platform.swarm.nodes.map((n) => n.hostname).sort()).toEqual(['vm', ...WORKERS].sort());
    expect(bundle.platform.swarm.services.map((s) => s.service).sort()).toEqual(['agent', 'api', 'web']);
  });
});

describe('the status page on the Swarm', () => {
  it('shows the Nodes, Services and Tasks tables in place of the containers, and the stack\'s services to act on', async () => {
    ensureUiBuilt();
    const base = await t.app.listen({ host: '127.0.0.1', port: 0 });
    const browser = await launchChromium();
    try {
      const { context, page } = await newPage(browser, { bypassCSP: true });
      await useToken(context, await t.token('operator'));
      await page.goto(`${base}/`);
      await page.getByTestId('swarm-nodes').waitFor();
      expect(await page.getByTestId('platform-runtime').textContent()).toBe(`Swarm stack ${stack}`);
      // What the page shows against what the status read says (the page polls it every 5 s; the Swarm may move meanwhile).
      const compare = async () => {
        const status = await get<Status>(t, '/api/deployment/status');
        const swarm = status.swarm!;
        const expected = {
          nodes: swarm.nodes.map((n) => [n.hostname, n.leader ? `${n.role} (leader)` : n.role, n.state, n.availability].join('|')),
          replicas: swarm.services.map((x) => `${x.service}|${x.runningReplicas}/${x.desiredReplicas}`),
          tasks: swarm.tasks.map((x) => `${x.current ? '' : '\\_ '}${x.service}.${x.slot ?? x.node}|${x.node ?? 'unassigned'}|${x.state}`),
          services: swarm.services.map((x) => x.service).sort(),
        };
        const rows = async (table: string, pick: number[]) =>
          Promise.all((await page.locator(`[data-testid=${table}] tbody tr`).all()).map(async (r) => {
            const texts = await r.locator('td').allTextContents();
            return pick.map((i) => texts[i]).join('|');
          }));
        const shown = {
          nodes: await rows('swarm-nodes', [0, 1, 2, 3]),
          replicas: await rows('swarm-services', [0, 2]),
          tasks: await rows('swarm-tasks', [0, 1, 2]),
          services: await page.locator('[data-testid=actions] input[name=service]').evaluateAll((inputs) => inputs.map((i) => i.getAttribute('value') ?? '')),
        };
        return { expected, shown };
      };
      const last = await eventually(async () => {
        const c = await compare();
        return JSON.stringify(c.expected) === JSON.stringify(c.shown) ? c : null;
      }, 'the page to show what the status read says', 30_000, 1_000).catch(() => compare());
      expect(last.shown).toEqual(last.expected);
      // The Tasks table is the containers' view here, with their nodes: the manager knows no container's health.
      expect(await page.getByTestId('containers').count()).toBe(0);
      expect(await page.locator('#containers-title').count()).toBe(0);
      await expectAccessible(page, 'the status page on a Swarm');
    } finally {
      await browser.close();
    }
  });
});

describe("an installer whose engine is a worker's", () => {
  let relayIn: { worker: string; pid: string } | undefined;
  let relayOut: ChildProcess | undefined;
  let w: TestApp | undefined;

  afterAll(async () => {
    await w?.close();
    relayOut?.kill();
    if (relayIn) await run('docker', ['exec', relayIn.worker, 'kill', relayIn.pid]);
  });

  it('records SwarmReachable False NotAManager with the engine\'s words, and the status says why it shows no Swarm', async () => {
    const nodes = await waitReady();
    const worker = WORKERS.find((x) => nodes.some((n) => n.hostname === x))!;
    // The worker's engine socket, carried to a socket here: in the worker over its bridge address, then here.
    const ip = (await docker(['inspect', '-f', '{{(index .NetworkSettings.Networks "installer-swarm").IPAddress}}', worker])).trim();
    const pid = (await docker(['exec', worker, 'sh', '-c', `socat TCP-LISTEN:2390,bind=${ip},fork,reuseaddr UNIX-CONNECT:/var/run/docker.sock >/dev/null 2>&1 & echo $!`])).trim();
    relayIn = { worker, pid };
    const socket = path.join(mkdtempSync(path.join(tmpdir(), 'swobs-w-')), 'docker.sock');
    relayOut = spawn('socat', [`UNIX-LISTEN:${socket},fork`, `TCP:${ip}:2390`], { stdio: 'ignore' });
    await eventually(() => existsSync(socket), 'the relay to the worker engine');
    await eventually(async () => (await run('docker', ['-H', `unix://${socket}`, 'info', '--format', '{{.Swarm.ControlAvailable}}'])).stdout.trim() === 'false', 'the worker engine to answer');

    w = await startTestApp({ env: { PLATFORM_RUNTIME: 'swarm', PLATFORM_PROJECT: stack, PLATFORM_DIR: dir, DOCKER_SOCKET: socket, OBSERVED_MAX_AGE_SECONDS: '2' } });
    const row = await eventually(async () => {
      const r = await readObserved(w!.db.database.db, 'platform');
      return r?.conditions.some((c) => c.type === 'SwarmReachable') ? r : null;
    }, 'the platform to be observed through the worker');
    expect(row.conditions.find((c) => c.type === 'EngineReachable')).toMatchObject({ status: 'True' });
    const swarm = row.conditions.find((c) => c.type === 'SwarmReachable')!;
    expect(swarm).toMatchObject({ status: 'False', reason: 'NotAManager' });
    expect(swarm.message).toContain("Worker nodes can't be used to view or modify cluster state");
    const status = await get<Status>(w, '/api/deployment/status');
    expect(status).toMatchObject({ runtime: 'swarm', containers: [], swarmError: swarm.message });
    expect(status.swarm).toBeUndefined();
  });
});

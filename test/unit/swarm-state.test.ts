// The Swarm's JSON as this machine's engine answered it (test/fixtures/swarm: GET /nodes,
// /services?status=true and /tasks of a stack `obscap` on the rig's 3-node Swarm, caught mid-way
// through a rolling update of `web`; the 503 a worker's engine answers GET /nodes with), mapped to
// the views the observer stores; the platform's row built from them; the event stream's stack events.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import type Docker from 'dockerode';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/shared/process.ts';
import { FAILED_HISTORY, nodeViews, readSwarmState, serviceViews, swarmReadError, taskViews } from '../../src/adapters/swarm-state.ts';
import { watchProjectEvents } from '../../src/adapters/docker-engine.ts';
import { observePlatform } from '../../controllers/observer/platform.ts';
import { NOT_A_MANAGER, type SwarmObservation } from '../../src/contracts/swarm.ts';
import type { PlatformPort } from '../../src/contracts/ports.ts';

const fixture = <T,>(name: string): T => JSON.parse(readFileSync(path.join(ROOT, 'test/fixtures/swarm', name), 'utf8')) as T;
type Raw = { ID: string; ServiceID: string; Slot?: number; NodeID?: string; CreatedAt: string; Status: { State: string } }[];
const rawNodes = fixture<Parameters<typeof nodeViews>[0]>('nodes.json');
const rawServices = fixture<Parameters<typeof serviceViews>[0]>('services.json');
const rawTasks = fixture<Raw>('tasks.json');
const workerRefusal = fixture<{ statusCode: number; json: { message: string } }>('worker-nodes-503.json');
const STACK = 'obscap';
const at = '2026-11-29T00:30:00.000Z';

const nodes = nodeViews(rawNodes);
const services = serviceViews(rawServices, STACK);
const tasks = taskViews(rawTasks as Parameters<typeof taskViews>[0], services, nodes);
const serviceId = (name: string) => services.find((s) => s.service === name)!.id;

describe('the Swarm as views of the engine JSON', () => {
  it('nodes: the manager (leader) first, each with role, state, availability, engine version and address', () => {
    expect(nodes.map((n) => [n.hostname, n.role, n.leader, n.state, n.availability])).toEqual([
      ['vm', 'manager', true, 'ready', 'active'],
      ['installer-swarm-w1', 'worker', false, 'ready', 'active'],
      ['installer-swarm-w2', 'worker', false, 'ready', 'active'],
    ]);
    expect(nodes[0]).toMatchObject({ managerReachability: 'reachable', engineVersion: '26.1.5+dfsg1', address: '192.168.213.1', message: null });
    expect(nodes[1]!.managerReachability).toBeNull();
    expect(new Set(nodes.map((n) => n.id))).toEqual(new Set(rawNodes.map((n) => n.ID)));
  });

  it('services: the compose name without the stack, mode, running/desired replicas, update state and the pinned digest', () => {
    expect(services.map((s) => [s.name, s.service, s.mode, s.runningReplicas, s.desiredReplicas, s.updateState])).toEqual([
      ['obscap_agent', 'agent', 'global', 3, 3, null],
      ['obscap_broken', 'broken', 'replicated', 0, 1, null],
      ['obscap_missing', 'missing', 'replicated', 0, 1, null],
      ['obscap_web', 'web', 'replicated', 3, 3, 'updating'],
    ]);
    const web = services.find((s) => s.service === 'web')!;
    expect(web).toMatchObject({ image: '127.0.0.1:5000/obscap/busybox:1', updateMessage: 'update in progress' });
    expect(web.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    // An image no registry has is not pinned.
    expect(services.find((s) => s.service === 'missing')).toMatchObject({ image: '127.0.0.1:5000/obscap/nosuch:1', digest: null });
  });

  it('tasks: each slot (each node of a global service) its newest task, and its last failed ones with their errors', () => {
    const current = tasks.filter((t) => t.current);
    // One current task per slot or node, whichever the engine listed: the newest by creation.
    const groups = new Map<string, Raw>();
    for (const t of rawTasks) groups.set(`${t.ServiceID}/${t.Slot ?? t.NodeID}`, [...(groups.get(`${t.ServiceID}/${t.Slot ?? t.NodeID}`) ?? []), t]);
    const newest = [...groups.values()].map((g) => g.reduce((a, b) => (b.CreatedAt > a.CreatedAt ? b : a)).ID);
    expect(current.map((t) => t.id).sort()).toEqual(newest.sort());
    // The global service: a task on each of the three nodes, no slot.
    expect(tasks.filter((t) => t.service === 'agent').map((t) => [t.slot, t.node, t.state])).toEqual([
      [null, 'installer-swarm-w1', 'running'],
      [null, 'installer-swarm-w2', 'running'],
      [null, 'vm', 'running'],
    ]);
    // web.3 mid-update: the new task (ready) is current; the old one, shut down by the update, is no failure and is left out.
    expect(tasks.filter((t) => t.service === 'web').map((t) => [t.slot, t.state, t.desiredState])).toEqual([
      [1, 'running', 'running'],
      [2, 'running', 'running'],
      [3, 'ready', 'ready'],
    ]);
    // broken.1 failed four times: the newest, then the FAILED_HISTORY before it, newest first.
    const broken = tasks.filter((t) => t.serviceId === serviceId('broken'));
    expect(broken).toHaveLength(1 + FAILED_HISTORY);
    expect(broken.map((t) => [t.slot, t.current, t.state, t.error])).toEqual([
      [1, true, 'failed', 'task: non-zero exit (3)'],
      [1, false, 'failed', 'task: non-zero exit (3)'],
      [1, false, 'failed', 'task: non-zero exit (3)'],
    ]);
    expect(broken.map((t) => t.createdAt)).toEqual([...broken.map((t) => t.createdAt)].sort().reverse());
    expect(tasks.find((t) => t.service === 'missing' && t.current)).toMatchObject({ state: 'rejected', error: 'No such image: 127.0.0.1:5000/obscap/nosuch:1', node: 'installer-swarm-w2' });
    // Running tasks carry their container.
    for (const t of tasks.filter((x) => x.state === 'running')) expect(t.containerId).toMatch(/^[0-9a-f]{64}$/);
  });

  it("a worker's 503 becomes NOT_A_MANAGER in the engine's words; any other failure passes as it came", () => {
    const refusal = Object.assign(new Error(`(HTTP code 503) unexpected - ${workerRefusal.json.message}`), workerRefusal);
    const e = swarmReadError(refusal) as Error & { code?: string };
    expect(e.code).toBe(NOT_A_MANAGER);
    expect(e.message).toContain("Worker nodes can't be used to view or modify cluster state");
    const gone = Object.assign(new Error('connect ENOENT /var/run/docker.sock'), { code: 'ENOENT' });
    expect(swarmReadError(gone)).toBe(gone);
  });

  it('readSwarmState asks for the stack by its label with replica counts, then its services\' tasks only', async () => {
    const asked: Record<string, unknown>[] = [];
    const docker = {
      listNodes: async () => rawNodes,
      listServices: async (o: Record<string, unknown>) => (asked.push(o), rawServices),
      listTasks: async (o: Record<string, unknown>) => (asked.push(o), rawTasks),
    } as unknown as Docker;
    const seen = await readSwarmState(docker, STACK);
    expect(asked[0]).toEqual({ filters: { label: ['com.docker.stack.namespace=obscap'] }, status: true });
    expect(asked[1]).toEqual({ filters: { service: services.map((s) => s.id) } });
    expect(seen).toEqual({ nodes, services, tasks });
    // A stack with no services lists no tasks (an empty filter would list the whole Swarm's).
    const empty = await readSwarmState({ ...docker, listServices: async () => [], listTasks: async () => { throw new Error('asked for tasks'); } } as unknown as Docker, 'none');
    expect(empty).toEqual({ nodes, services: [], tasks: [] });
  });
});

const port = (runtime: 'compose' | 'swarm', swarm: () => Promise<SwarmObservation>): PlatformPort => ({
  project: STACK,
  runtime,
  services: async () => ['agent', 'broken', 'missing', 'web'],
  containers: async () => [{ name: 'local-1', service: 'web', state: 'running', health: null, image: 'x', digest: null, since: null }],
  swarm,
  readEnv: async () => [],
});
const condition = (c: { type: string; status: string; reason: string }[], type: string) => c.find((x) => x.type === type);

describe("the platform's row on a Swarm", () => {
  it('holds the nodes, services and tasks; its containers are the current tasks on every node, named as the Swarm names them', async () => {
    const { data, conditions, answered } = await observePlatform(port('swarm', async () => ({ nodes, services, tasks })), at);
    expect(answered).toBe(true);
    expect(data).toMatchObject({ runtime: 'swarm', swarm: { nodes, services, tasks }, services: ['agent', 'broken', 'missing', 'web'] });
    expect(data.engineError).toBeUndefined();
    const current = tasks.filter((t) => t.current);
    expect(data.containers).toHaveLength(current.length);
    const web2 = current.find((t) => t.service === 'web' && t.slot === 2)!;
    expect(data.containers).toContainEqual({ name: `obscap_web.2.${web2.id}`, service: 'web', state: 'running', health: null, image: web2.image, digest: web2.digest, since: web2.timestamp });
    const agentOnVm = current.find((t) => t.service === 'agent' && t.node === 'vm')!;
    expect(data.containers.map((c) => c.name)).toContain(`obscap_agent.${agentOnVm.nodeId}.${agentOnVm.id}`);
    expect(condition(conditions, 'SwarmReachable')).toMatchObject({ status: 'True', reason: 'ManagerAnswered', message: '3 nodes; 4 services of stack obscap' });
    expect(condition(conditions, 'EngineReachable')).toMatchObject({ status: 'True' });
  });

  it('an engine that is no manager: reachable, SwarmReachable False NotAManager with the cause, and no containers', async () => {
    const refusal = swarmReadError(Object.assign(new Error('refused'), workerRefusal));
    const { data, conditions, answered } = await observePlatform(port('swarm', async () => { throw refusal; }), at);
    expect(answered).toBe(false);
    expect(data.containers).toEqual([]);
    expect(data.swarm).toBeUndefined();
    expect(data.swarmError).toContain('not a Swarm manager');
    expect(data.engineError).toBe(data.swarmError);
    expect(condition(conditions, 'EngineReachable')).toMatchObject({ status: 'True' });
    expect(condition(conditions, 'SwarmReachable')).toMatchObject({ status: 'False', reason: 'NotAManager', message: refusal.message });
  });

  it('an engine that does not answer: EngineReachable False, the Swarm Unknown', async () => {
    const { data, conditions } = await observePlatform(port('swarm', async () => { throw new Error('connect ECONNREFUSED'); }), at);
    expect(data.engineError).toBe('the Docker engine did not answer: connect ECONNREFUSED');
    expect(condition(conditions, 'EngineReachable')).toMatchObject({ status: 'False', reason: 'EngineUnreachable' });
    expect(condition(conditions, 'SwarmReachable')).toMatchObject({ status: 'Unknown' });
  });

  it('the Compose runtime reads the local containers and never the Swarm', async () => {
    const { data, conditions } = await observePlatform(port('compose', async () => { throw new Error('the Swarm was read'); }), at);
    expect(data).toMatchObject({ runtime: 'compose', containers: [{ name: 'local-1' }] });
    expect(data.swarm).toBeUndefined();
    expect(data.swarmError).toBeUndefined();
    expect(conditions.map((c) => c.type)).toEqual(['EngineReachable', 'ServicesKnown']);
  });
});

describe('the engine events that wake the observation of a stack', () => {
  const events = (lines: object[], stacks?: string[]) => {
    const stream = new PassThrough();
    let asked: unknown;
    const docker = { getEvents: async (o: unknown) => ((asked = o), stream) } as unknown as Docker;
    const seen: string[] = [];
    const w = watchProjectEvents(docker, ['platform', 'installer'], (p) => seen.push(p), () => {}, stacks ? { stacks } : {});
    return new Promise<{ seen: string[]; asked: unknown }>((resolve) =>
      setImmediate(() => {
        stream.write(lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
        setImmediate(() => (w.stop(), resolve({ seen, asked })));
      }),
    );
  };
  const lines = [
    { Type: 'service', Action: 'update', Actor: { Attributes: { name: 'obscap_web', 'updatestate.new': 'updating' } } },
    { Type: 'service', Action: 'create', Actor: { Attributes: { name: 'other_web' } } },
    { Type: 'node', Action: 'update', Actor: { Attributes: { name: 'installer-swarm-w1' } } },
    { Type: 'container', Action: 'die', Actor: { Attributes: { 'com.docker.stack.namespace': 'obscap' } } },
    { Type: 'container', Action: 'exec_start: sh', Actor: { Attributes: { 'com.docker.stack.namespace': 'obscap' } } },
    { Type: 'container', Action: 'start', Actor: { Attributes: { 'com.docker.compose.project': 'installer' } } },
  ];

  it("with the stack: its services' events, every node's, and its task containers' state changes", async () => {
    const { seen, asked } = await events(lines, [STACK]);
    expect(asked).toEqual({ filters: { type: ['container', 'service', 'node'] } });
    expect(seen).toEqual(['obscap', 'obscap', 'obscap', 'installer']);
  });

  it('without a stack (the Compose runtime): containers of the projects only', async () => {
    const { seen, asked } = await events(lines);
    expect(asked).toEqual({ filters: { type: ['container'] } });
    expect(seen).toEqual(['installer']);
  });
});

// Platform logs across the rig's three Swarm nodes (PLATFORM_RUNTIME=swarm): a stack whose `web`
// service runs one replica on each node, each printing a numbered line with its node's hostname on
// stdout (and every third on stderr), beside a one-replica `solo`. Read through the real app, wired
// as the server wires it, and compared with what `docker service logs` says the Swarm holds.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { docker, REGISTRY, run, uniqueName } from '../helpers/e2e/rig.ts';
import { swarmNodes, waitReady } from '../helpers/e2e/swarm-rig.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { readSse as readSseAt, type SseMessage } from '../helpers/shared/sse.ts';
import { REDACTED } from '../../src/logger.ts';
import type { ContainerLogLine } from '../../src/contracts/ports.ts';

const stack = uniqueName('swlogs');
const image = `${REGISTRY}/${stack}/busybox:1`;
const LEAK = TEST_SECRETS.SERVICE_TOKEN;
const TS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$/;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// Each replica names its node (hostname is the node's), so a line says where it was printed.
const counter = (name: string, every: string) =>
  `["sh", "-c", "echo \\"${name} $$(hostname) connecting with token=${LEAK}\\"; i=0; while true; do i=$$((i+1)); echo \\"${name} $$(hostname) out $$i\\"; ` +
  `if [ $$((i % 3)) -eq 0 ]; then echo \\"${name} $$(hostname) err $$i\\" >&2; fi; sleep ${every}; done"]`;
const STACK_FILE = `
services:
  web:
    image: ${image}
    hostname: "{{.Node.Hostname}}"
    command: ${counter('web', '0.2')}
    deploy: { replicas: 3, placement: { max_replicas_per_node: 1 } }
  solo:
    image: ${image}
    hostname: "{{.Node.Hostname}}"
    command: ${counter('solo', '0.3')}
`;

let t: TestApp;
let base: string;
let hostnames: string[];

beforeAll(async () => {
  // Another file drains or stops nodes for a while: start on a whole Swarm.
  await waitReady(300_000);
  hostnames = (await eventually(async () => {
    const nodes = await swarmNodes();
    return nodes.every((n) => n.state === 'ready' && n.availability === 'active') && nodes;
  }, 'every node of the Swarm to be Ready and Active', 300_000, 500)).map((n) => n.hostname).sort();
  await docker(['tag', 'installer-rig/busybox:latest', image]);
  await docker(['push', '-q', image]);
  const dir = mkdtempSync(path.join(tmpdir(), 'swarm-logs-'));
  writeFileSync(path.join(dir, 'stack.yml'), STACK_FILE);
  await docker(['stack', 'deploy', '--detach=false', '-c', path.join(dir, 'stack.yml'), stack], { timeoutMs: 300_000 });
  await eventually(async () => {
    const out = await docker(['service', 'ps', `${stack}_web`, '--filter', 'desired-state=running', '--format', '{{.Node}} {{.CurrentState}}']);
    const running = out.trim().split('\n').filter((l) => / Running /.test(l));
    return new Set(running.map((l) => l.split(' ')[0])).size === 3;
  }, 'a web replica running on each of the three nodes', 120_000, 500);
  t = await startTestApp({ env: { PLATFORM_PROJECT: stack, PLATFORM_RUNTIME: 'swarm', LOG_CLIENT_STALL_SECONDS: '5' } });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  await sleep(3_000); // some history: about 15 lines a web replica
});

afterAll(async () => {
  await t?.close();
  await run('docker', ['stack', 'rm', stack]);
  await run('docker', ['rmi', image]);
});

/** What the Swarm holds for a service, as `docker service logs --timestamps --no-trunc` prints it (scrubbed as the app must). */
async function heldLines(service: string): Promise<ContainerLogLine[]> {
  const r = await run('docker', ['service', 'logs', '--timestamps', '--no-trunc', `${stack}_${service}`]);
  if (r.code !== 0) throw new Error(r.stderr);
  const parse = (text: string, stream: 'stdout' | 'stderr') =>
    text.split('\n').filter(Boolean).map((l) => {
      const m = /^(\S+) (\S+)@(\S+?)\s+\| (.*)$/.exec(l);
      if (!m) throw new Error(`not a line of docker service logs: ${l}`);
      const [, timestamp, container, node, line] = m;
      const slot = container!.split('.')[1];
      return { container: container!, service, node: node!, task: `${service}.${slot}`, stream, timestamp: timestamp!, line: line!.split(LEAK).join(REDACTED) };
    });
  return [...parse(r.stdout, 'stdout'), ...parse(r.stderr, 'stderr')];
}

/** In the window's order: timestamp, ties by container. */
const ordered = (lines: ContainerLogLine[]) =>
  [...lines].sort((a, b) => (a.timestamp !== b.timestamp ? (a.timestamp < b.timestamp ? -1 : 1) : a.container < b.container ? -1 : a.container > b.container ? 1 : 0));
const allHeld = async () => ordered([...(await heldLines('web')), ...(await heldLines('solo'))]);

const readSse = (pathAndQuery: string, token: string, enough?: (events: SseMessage[]) => boolean, timeoutMs?: number) =>
  readSseAt(`${base}${pathAndQuery}`, token, enough, timeoutMs);
const logLines = (events: SseMessage[]) => events.filter((e) => e.event === undefined).map((e) => e.data as unknown as ContainerLogLine);
const numberOf = (l: ContainerLogLine) => Number(/ (\d+)$/.exec(l.line)?.[1] ?? NaN);
const timestamps = (lines: ContainerLogLine[]) => lines.map((l) => l.timestamp);

/** Every line names its node and task, and the text (printed by the replica) names the same node. */
function expectNamed(lines: ContainerLogLine[]) {
  for (const l of lines) {
    expect(Object.keys(l)).toEqual(['container', 'service', 'node', 'task', 'stream', 'timestamp', 'line']);
    expect(l.timestamp).toMatch(TS);
    expect(l.line.startsWith(`${l.service} ${l.node} `), JSON.stringify(l)).toBe(true);
    expect(l.task).toMatch(new RegExp(`^${l.service}\\.\\d$`));
    expect(l.container).toMatch(new RegExp(`^${stack}_${l.task!.replace('.', '\\.')}\\.[a-z0-9]{25}$`));
    if (/ out \d+$/.test(l.line)) expect(l.stream).toBe('stdout');
    if (/ err \d+$/.test(l.line)) expect(l.stream).toBe('stderr');
  }
}

/** Each task's numbered stdout lines are consecutive: nothing missing, nothing twice. */
function expectConsecutive(lines: ContainerLogLine[]) {
  for (const task of new Set(lines.map((l) => l.container))) {
    const nums = lines.filter((l) => l.container === task && l.stream === 'stdout' && / out \d+$/.test(l.line)).map(numberOf);
    expect(nums, task).toEqual(nums.map((_, i) => nums[0]! + i));
  }
}

describe('time windows across nodes (GET /api/deployment-log)', () => {
  it('sends exactly the lines the Swarm holds from since to until, from every node, each named, in timestamp order', async () => {
    const held = await allHeld();
    const since = held[10]!.timestamp;
    const until = held[held.length - 10]!.timestamp;
    const expected = held.filter((l) => l.timestamp >= since && l.timestamp <= until);
    const res = await readSse(`/api/deployment-log?since=${since}&until=${until}`, await t.token('admin'));
    expect(res.status).toBe(200);
    expect(res.endedByServer).toBe(true);
    const got = logLines(res.events);
    expect(res.events.at(-1)).toEqual({ event: 'end', data: { lines: got.length } });
    expectNamed(got);
    expect(new Set(got.filter((l) => l.service === 'web').map((l) => l.node)).size).toBe(3);
    expect([...new Set(got.map((l) => l.node))].sort()).toEqual(hostnames);
    expect(timestamps(got)).toEqual([...timestamps(got)].sort()); // one order across nodes
    expect(got).toEqual(expected);

    // One task by its container name.
    const one = got.find((l) => l.service === 'web' && l.node !== hostnames[0])!;
    const only = await readSse(`/api/deployment-log?since=${since}&until=${until}&containerName=${one.container}`, await t.token('admin'));
    expect(logLines(only.events)).toEqual(expected.filter((l) => l.container === one.container));
  });

  it('follows until a future until, then ends, in timestamp order across nodes', async () => {
    const since = new Date(Date.now() - 1_000).toISOString();
    const until = new Date(Date.now() + 2_000).toISOString();
    const started = Date.now();
    const res = await readSse(`/api/deployment-log?since=${since}&until=${until}`, await t.token('admin'), () => false, 15_000);
    expect(res.endedByServer).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_500);
    const got = logLines(res.events);
    expectNamed(got);
    expectConsecutive(got);
    expect(timestamps(got)).toEqual([...timestamps(got)].sort());
    expect([...new Set(got.map((l) => l.node))].sort()).toEqual(hostnames);
    const inWindow = (l: ContainerLogLine) => l.timestamp >= since.replace('Z', '000000Z') && l.timestamp <= until.replace('Z', '000000Z');
    expect(ordered(got)).toEqual((await allHeld()).filter(inWindow));
  });

  it('answers 400 for a container the stack does not have', async () => {
    const res = await readSse(`/api/deployment-log?containerName=${stack}_web.9.abcdefghijklmnopqrstuvwxy`, await t.token('admin'));
    expect(res.status).toBe(400);
    expect(JSON.parse(res.body)).toMatchObject({ statusCode: 400, message: expect.stringContaining(`containerName: no platform container is named`) });
  });
});

describe('live streams across nodes (GET /api/deployment/logs)', () => {
  it('sends the tail of each task, then new lines from every node, all in timestamp order, nothing missing or twice', async () => {
    const res = await readSse('/api/deployment/logs?tail=3', await t.token('viewer'), () => false, 3_500);
    expect(res.status).toBe(200);
    const got = logLines(res.events);
    expectNamed(got);
    // The tail: three lines of each of the four tasks.
    const tail = got.slice(0, 12);
    expect(new Set(tail.map((l) => l.task))).toEqual(new Set(['web.1', 'web.2', 'web.3', 'solo.1']));
    for (const task of ['web.1', 'web.2', 'web.3', 'solo.1']) expect(tail.filter((l) => l.task === task)).toHaveLength(3);
    // Then three seconds of live lines: every node, in one timestamp order, each task consecutive.
    expect(got.length).toBeGreaterThan(12 + 30);
    expect([...new Set(got.slice(12).map((l) => l.node))].sort()).toEqual(hostnames);
    expect(timestamps(got)).toEqual([...timestamps(got)].sort());
    expectConsecutive(got);
    // Each task's lines exactly as the Swarm holds them over the span read of it.
    const held = await allHeld();
    for (const c of new Set(got.map((l) => l.container))) {
      const mine = got.filter((l) => l.container === c);
      expect(ordered(mine)).toEqual(held.filter((l) => l.container === c && l.timestamp >= mine[0]!.timestamp && l.timestamp <= mine.at(-1)!.timestamp));
    }
  });

  it('filters one service, and answers 404 for a service the stack does not have', async () => {
    const token = await t.token('viewer');
    const res = await readSse('/api/deployment/logs/solo?tail=2', token, (ev) => ev.length >= 6);
    expect(res.status).toBe(200);
    const got = logLines(res.events);
    expect(got.length).toBeGreaterThanOrEqual(6);
    expectNamed(got);
    expect(new Set(got.map((l) => l.task))).toEqual(new Set(['solo.1']));
    expectConsecutive(got);

    const missing = await readSse('/api/deployment/logs/nope', token);
    expect(missing.status).toBe(404);
    expect(JSON.parse(missing.body)).toMatchObject({ statusCode: 404, message: `service "nope" is not a service of the platform (stack ${stack})` });
  });
});

describe('download across nodes (GET /api/deployment-log/download)', () => {
  it('is the window as text, each line `<container>@<node> | <timestamp> <stream> <line>`, in timestamp order', async () => {
    const held = await allHeld();
    const since = held[5]!.timestamp;
    const until = held[held.length - 5]!.timestamp;
    const expected = held.filter((l) => l.timestamp >= since && l.timestamp <= until);
    expect(new Set(expected.map((l) => l.node)).size).toBe(3);
    const res = await fetch(`${base}/api/deployment-log/download?since=${since}&until=${until}`, { headers: { authorization: `Bearer ${await t.token('admin')}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(res.headers.get('content-disposition')).toMatch(/^attachment; filename="logs-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\.txt"$/);
    const lines = (await res.text()).split('\n');
    expect(lines.pop()).toBe('');
    expect(lines).toEqual(expected.map((l) => `${l.container}@${l.node} | ${l.timestamp} ${l.stream} ${l.line}`));
  });
});

describe('redaction', () => {
  it('never passes an installer secret a replica prints, on any endpoint', async () => {
    const raw = await run('docker', ['service', 'logs', '--raw', `${stack}_web`]);
    expect(raw.stdout).toContain(LEAK); // the replicas really printed it
    const admin = await t.token('admin');
    const since = '2000-01-01T00:00:00Z';
    const live = await readSse('/api/deployment/logs/web?tail=10000', await t.token('viewer'), (ev) => ev.length >= 60);
    const window = await readSse(`/api/deployment-log?since=${since}&until=${new Date().toISOString()}`, admin);
    const download = await (await fetch(`${base}/api/deployment-log/download?since=${since}`, { headers: { authorization: `Bearer ${admin}` } })).text();
    for (const [name, text] of [['live', JSON.stringify(live.events)], ['window', JSON.stringify(window.events)], ['download', download]] as const) {
      expect(text, name).not.toContain(LEAK);
      for (const host of hostnames) expect(text, `${name} ${host}`).toContain(`web ${host} connecting with token=${REDACTED}`);
    }
  });
});

// A Swarm stack's logs taken apart on frames captured from the rig's engine (26.1, three nodes;
// test/fixtures/swarm-logs, read with details=1): a service's stream, which gives each node's lines
// as a block, out of time order; each task's own log; a line longer than 16 KiB the engine split;
// and the stack's services, tasks and nodes (trimmed to the fields read). The same adapter on the
// real Swarm: test/e2e/swarm-logs.test.ts.
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  Closer,
  HoldBack,
  LineSource,
  LogFrameParser,
  mergeOrdered,
  parseDetails,
  StackDirectory,
  type FrameOptions,
  type ParsedLine,
  type RawNode,
  type RawService,
  type RawTask,
} from '../../src/adapters/container-logs/index.ts';
import type { ContainerLogLine } from '../../src/contracts/ports.ts';
import { LogStore } from '../../src/ui/src/logs/store.ts';
import { ROOT } from '../helpers/shared/process.ts';
import type Docker from 'dockerode';

const DIR = path.join(ROOT, 'test/fixtures/swarm-logs');
const fixture = (name: string) => readFileSync(path.join(DIR, name));
const stack = JSON.parse(fixture('stack.json').toString('utf8')) as { services: RawService[]; tasks: RawTask[]; nodes: RawNode[] };
const hostnameOf = new Map(stack.nodes.map((n) => [n.ID, n.Description!.Hostname!]));
const taskById = new Map(stack.tasks.map((t) => [t.ID, t]));
const web = stack.services.find((s) => s.Spec!.Name === 'swlexp_web')!;

/** A directory that knows the captured stack and never asks an engine. */
function directory(): StackDirectory {
  const dir = new StackDirectory({} as Docker, 'swlexp');
  dir.learn(stack);
  return dir;
}

function parse(bytes: Buffer[], opts: FrameOptions = { details: true }): ParsedLine[] {
  const out: ParsedLine[] = [];
  const p = new LogFrameParser(false, (l) => out.push(l), 1024 * 1024, opts);
  for (const b of bytes) p.push(b);
  p.end();
  return out;
}

/** The frames of a multiplexed body, each as its own buffer. */
function frames(body: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let off = 0; off < body.length; off += 8 + body.readUInt32BE(off + 4)) out.push(body.subarray(off, off + 8 + body.readUInt32BE(off + 4)));
  return out;
}

const inversions = (ts: string[]) => ts.filter((t, i) => i > 0 && t < ts[i - 1]!).length;
const byTime = (lines: ContainerLogLine[]) => [...lines].sort((a, b) => (a.timestamp < b.timestamp ? -1 : a.timestamp > b.timestamp ? 1 : 0));
const taskIdOfLine = (l: ContainerLogLine) => l.container.slice(l.container.lastIndexOf('.') + 1);

/** A line source fed a captured body, as the engine connection would. */
function sourceOf(body: Buffer, makeLine: (p: ParsedLine, text: string) => ContainerLogLine | null, extra: { notAfter?: string; stopAfter?: string } = {}) {
  const control = { destroyed: false, resume() {}, destroy() { control.destroyed = true; } };
  const src = new LineSource({ id: 'x', name: 'x', service: 'web', tty: false }, { scrub: (s) => s.replace(' err ', ' [redacted] '), maxBytes: 1 << 20, maxLineBytes: 1 << 20, frames: { details: true }, makeLine, ...extra });
  src.attach(control);
  src.bytes(body);
  src.end(null);
  return { src, control };
}

async function collect(gen: AsyncGenerator<ContainerLogLine[]>): Promise<ContainerLogLine[]> {
  const out: ContainerLogLine[] = [];
  for await (const batch of gen) out.push(...batch);
  return out;
}

describe('frames of a service read with details', () => {
  it('hands on each message\'s attributes apart from its text', () => {
    const lines = parse([fixture('service-web-tail6.bin')]);
    expect(lines).toHaveLength(24);
    for (const l of lines) {
      const attrs = parseDetails(l.details!);
      expect([...attrs.keys()].sort()).toEqual(['com.docker.swarm.node.id', 'com.docker.swarm.service.id', 'com.docker.swarm.task.id']);
      expect(attrs.get('com.docker.swarm.service.id')).toBe(web.ID);
      expect(taskById.get(attrs.get('com.docker.swarm.task.id')!)?.NodeID).toBe(attrs.get('com.docker.swarm.node.id'));
      expect(l.text).toMatch(new RegExp(`^web ${hostnameOf.get(attrs.get('com.docker.swarm.node.id')!)} (out|err) \\d+$`));
      expect(l.stream).toBe(l.text.includes(' err ') ? 'stderr' : 'stdout');
    }
    // Read without the option, the attributes would be taken for text.
    expect(parse([fixture('service-web-tail6.bin')], {})[0]!.text).toMatch(/^com\.docker\.swarm\.node\.id=/);
  });

  it('joins the pieces of a split line per task, even when another task\'s pieces come between them', () => {
    const [a1, a2, a3, aShort, b1, b2, b3, bShort] = frames(fixture('service-long-line.bin'));
    // Each task's messages in their order, the two tasks' interleaved (one stream of one service).
    const interleaved = Buffer.concat([a1!, b1!, a2!, b2!, b3!, bShort!, a3!, aShort!]);
    // Wherever the reads are cut.
    for (const size of [interleaved.length, 1000, 4099]) {
      const chunks: Buffer[] = [];
      for (let i = 0; i < interleaved.length; i += size) chunks.push(interleaved.subarray(i, i + size));
      const lines = parse(chunks);
      expect(lines.map((l) => (l.text.length === 40_000 && /^x+$/.test(l.text) ? 'long' : l.text)), `reads of ${size}`).toEqual([
        'long',
        'short after the long line',
        'long',
        'short after the long line',
      ]);
      const tasks = lines.map((l) => parseDetails(l.details!).get('com.docker.swarm.task.id'));
      expect(tasks[0]).toBe(tasks[1]);
      expect(tasks[2]).toBe(tasks[3]);
      expect(tasks[0]).not.toBe(tasks[2]);
      // Each long line under the timestamp of its first piece.
      expect(lines.map((l) => l.timestamp)).toEqual([b1, bShort, a1, aShort].map((f) => f!.toString('latin1', 8, 38)));
    }
  });

  it('reports the engine\'s own messages (stream 3) instead of dropping them: a task on a node that is down', () => {
    const down = fixture('down-node-task.bin');
    expect(down[0]).toBe(3);
    const reported: string[] = [];
    const lines = parse([fixture('service-web-tail6.bin').subarray(0, 227), down], { details: true, systemError: (m) => reported.push(m) });
    expect(lines).toHaveLength(1);
    expect(reported).toHaveLength(1);
    expect(reported[0]).toMatch(/^Error grabbing logs: .*incomplete log stream.* node \w+ is not available$/);
  });

  it('decodes attributes the engine URL-encoded', () => {
    expect([...parseDetails('com.docker.swarm.node.id=n1,env+name=a+b%2Cc%3Dd,broken')]).toEqual([
      ['com.docker.swarm.node.id', 'n1'],
      ['env name', 'a b,c=d'],
    ]);
  });
});

describe('names of a stack\'s lines', () => {
  it('names each line of a service\'s stream with its node\'s hostname, its task and its container', () => {
    const dir = directory();
    const svc = dir.services.get(web.ID)!;
    expect(svc).toMatchObject({ name: 'swlexp_web', service: 'web', tty: false });
    const make = dir.serviceLine(svc);
    const lines = parse([fixture('service-web-tail6.bin')]).map((p) => make(p, p.text)!);
    for (const l of lines) {
      const task = taskById.get(taskIdOfLine(l))!;
      expect(Object.keys(l)).toEqual(['container', 'service', 'node', 'task', 'stream', 'timestamp', 'line']);
      expect(l.node).toBe(hostnameOf.get(task.NodeID!));
      expect(l.line).toContain(` ${l.node} `);
      expect(l.task).toBe(`web.${task.Slot}`);
      expect(l.container).toBe(`swlexp_web.${task.Slot}.${task.ID}`);
    }
    expect(new Set(lines.map((l) => l.node))).toEqual(new Set(['vm', 'installer-swarm-w1', 'installer-swarm-w2']));
    // One task only (containerName): the others' lines are dropped.
    const one = lines[0]!;
    const only = dir.serviceLine(svc, taskIdOfLine(one));
    expect(parse([fixture('service-web-tail6.bin')]).map((p) => only(p, p.text)).filter(Boolean).every((l) => l!.container === one.container)).toBe(true);
  });

  it('names a line of a task it does not know yet provisionally, and completes it from the engine', async () => {
    const dir = new StackDirectory(
      {
        getTask: (id: string) => ({ inspect: async () => stack.tasks.find((t) => t.ID === id) }),
        getNode: (id: string) => ({ inspect: async () => stack.nodes.find((n) => n.ID === id) }),
      } as unknown as Docker,
      'swlexp',
    );
    dir.learn({ services: stack.services });
    const make = dir.serviceLine(dir.services.get(web.ID)!);
    const lines = parse([fixture('service-web-tail6.bin')]).map((p) => make(p, p.text)!);
    expect(lines[0]!.task).toBe('web');
    expect(lines[0]!.node).toMatch(/^[a-z0-9]{25}$/); // the node's id until it is known
    await dir.resolve(lines);
    for (const l of lines) expect(l.node).toBe(hostnameOf.get(taskById.get(taskIdOfLine(l))!.NodeID!));
    expect(lines.every((l) => /^web\.\d$/.test(l.task!) && /^swlexp_web\.\d\./.test(l.container))).toBe(true);
  });
});

describe('ordering across nodes', () => {
  it('a service\'s live lines, nodes out of time order, leave the hold-back in timestamp order', () => {
    const dir = directory();
    const make = dir.serviceLine(dir.services.get(web.ID)!);
    const arrived = parse([fixture('service-web-tail6.bin')]).map((p) => make(p, p.text)!);
    expect(inversions(arrived.map((l) => l.timestamp))).toBeGreaterThan(0); // as the engine sent them
    const hold = new HoldBack(250);
    arrived.forEach((l, i) => hold.add(l, 1000 + i)); // one after another, within a millisecond each
    expect(hold.take(1249)).toEqual([]); // nothing has waited long enough
    expect(hold.nextDue()).toBe(1250 + arrived.findIndex((l) => l === byTime(arrived)[0]));
    const out = [...hold.take(1249 + arrived.length, 5), ...hold.take(1249 + arrived.length)];
    expect(out).toEqual(byTime(arrived));
    expect(hold.size).toBe(0);
    // Every task's lines in the order the engine gave them.
    for (const task of new Set(arrived.map(taskIdOfLine))) expect(out.filter((l) => taskIdOfLine(l) === task)).toEqual(arrived.filter((l) => taskIdOfLine(l) === task));
  });

  it('a line later than the hold is sent when it comes; a flood is not held; equal timestamps keep their arrival order', () => {
    const l = (ts: string, line: string) => ({ container: 'c', service: 's', stream: 'stdout', timestamp: `2026-11-29T00:00:0${ts}.000000000Z`, line }) as ContainerLogLine;
    const hold = new HoldBack(100, 3);
    hold.add(l('5', 'b'), 0);
    hold.add(l('5', 'c'), 10);
    hold.add(l('4', 'a'), 50); // 40 ms late, within the hold: still first
    expect(hold.take(109).map((x) => x.line)).toEqual([]);
    expect(hold.take(150).map((x) => x.line)).toEqual(['a', 'b', 'c']);
    hold.add(l('3', 'too late'), 200);
    expect(hold.take(300).map((x) => x.line)).toEqual(['too late']);
    for (const x of ['w', 'x', 'y', 'z']) hold.add(l('9', x), 400);
    expect(hold.take(401).map((x) => x.line)).toEqual(['w']); // past three held, the earliest leaves at once
    expect(hold.drain().map((x) => x.line)).toEqual(['x', 'y', 'z']);
  });

  it('history: each task\'s own log, merged across nodes in timestamp order, named and scrubbed', async () => {
    const dir = directory();
    const files = readdirSync(DIR).filter((f) => f.startsWith('task-'));
    expect(files).toHaveLength(3);
    const perTask = files.map((f) => {
      const task = dir.tasks.get(/^task-(\w+)-/.exec(f)![1]!)!;
      return { task, body: fixture(f) };
    });
    const sources = perTask.map(({ task, body }) => sourceOf(body, dir.taskLine(task, dir.services.get(task.serviceId)!)).src);
    const merged = await collect(mergeOrdered(sources, new Closer(), true));
    expect(merged).toHaveLength(perTask.reduce((n, { body }) => n + frames(body).length, 0));
    expect(merged.map((l) => l.timestamp)).toEqual(byTime(merged).map((l) => l.timestamp));
    expect(new Set(merged.map((l) => l.node))).toEqual(new Set(['vm', 'installer-swarm-w1', 'installer-swarm-w2']));
    // Concatenated as read, the three logs are not in time order: the merge did the work.
    const concatenated = perTask.flatMap(({ body }) => parse([body]).map((p) => p.timestamp));
    expect(inversions(concatenated)).toBeGreaterThan(0);
    for (const l of merged) {
      expect(l.line).not.toContain(' err '); // every line passed the scrubber
      expect(l.line).toContain(` ${l.node} `);
    }
    expect(merged.filter((l) => l.stream === 'stderr').every((l) => l.line.includes('[redacted]'))).toBe(true);
  });

  it('a history read ends at the first line well past the window, keeping what came before, without an error', async () => {
    const dir = directory();
    const file = readdirSync(DIR).find((f) => f.startsWith('task-'))!;
    const task = dir.tasks.get(/^task-(\w+)-/.exec(file)![1]!)!;
    const all = parse([fixture(file)]);
    const end = all[2]!.timestamp;
    const { src, control } = sourceOf(fixture(file), dir.taskLine(task, dir.services.get(task.serviceId)!), { notAfter: end, stopAfter: end });
    const got = await collect(mergeOrdered([src], new Closer(), true));
    expect(got.map((l) => l.timestamp)).toEqual(all.slice(0, 3).map((p) => p.timestamp));
    expect(control.destroyed).toBe(true);
    expect(src.error).toBeNull();
    expect(src.ended).toBe(true);
  });
});

describe('the viewer\'s lines', () => {
  it('keeps a Swarm line\'s node and task for the row, and a compose line without them', () => {
    const dir = directory();
    const make = dir.serviceLine(dir.services.get(web.ID)!);
    const swarmLine = parse([fixture('service-web-tail6.bin')]).map((p) => make(p, p.text)!)[0]!;
    const store = new LogStore(10);
    store.push(swarmLine);
    store.push({ container: 'platform-web-1', service: 'web', stream: 'stdout', timestamp: swarmLine.timestamp, line: 'compose' });
    expect(store.at(0)).toMatchObject({ container: swarmLine.container, node: swarmLine.node, task: swarmLine.task, source: 'web' });
    expect(Object.keys(store.at(1))).not.toContain('node');
  });
});

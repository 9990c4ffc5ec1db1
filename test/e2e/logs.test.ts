// Platform container logs on the real engine: a compose project of busybox services that print
// numbered lines on stdout and stderr (test/fixtures/logs-platform), read through the real app on a
// listening port and compared with what `docker logs` says the engine holds.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventSource } from 'eventsource';
import path from 'node:path';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { docker, run, uniqueName } from '../helpers/e2e/rig.ts';
import { ROOT } from '../helpers/shared/process.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { parseSse, readSse as readSseAt, type SseMessage } from '../helpers/shared/sse.ts';
import { ContainerLogs, openEngineStream } from '../../src/adapters/container-logs/index.ts';
import { connectEngine } from '../../src/adapters/docker-engine.ts';
import { secretScrubber, REDACTED } from '../../src/logger.ts';
import type { ContainerLogLine } from '../../src/contracts/ports.ts';

const COMPOSE_FILE = path.join(ROOT, 'test/fixtures/logs-platform/docker-compose.yml');
const project = uniqueName('logs-t');
const LEAK = TEST_SECRETS.SERVICE_TOKEN;
const scrub = secretScrubber(Object.values(TEST_SECRETS));
const compose = (args: string[]) => docker(['compose', '-p', project, '-f', COMPOSE_FILE, ...args], { env: { LEAK }, timeoutMs: 120_000 });
const alpha = `${project}-alpha-1`;
const beta = `${project}-beta-1`;
const late = `${project}-late-1`;
const TS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$/;

let t: TestApp;
let base: string;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  await compose(['up', '-d']);
  t = await startTestApp({
    env: { PLATFORM_PROJECT: project, LOG_CLIENT_STALL_SECONDS: '5' },
    logs: new ContainerLogs(connectEngine('/var/run/docker.sock'), { scrub }),
  });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
  await sleep(2_500); // some history: alpha ~12 lines, beta ~8
});
afterAll(async () => {
  await t?.close();
  await compose(['--profile', 'late', 'down', '-t', '1', '--remove-orphans']);
});

/** What the engine holds for a container, as `docker logs --timestamps` prints it, scrubbed. */
async function engineLines(name: string): Promise<ContainerLogLine[]> {
  const r = await run('docker', ['logs', '--timestamps', name]);
  if (r.code !== 0) throw new Error(r.stderr);
  const service = name.slice(project.length + 1).replace(/-1$/, '');
  const parse = (text: string, stream: 'stdout' | 'stderr') =>
    text.split('\n').filter(Boolean).map((l) => ({ container: name, service, stream, timestamp: l.slice(0, l.indexOf(' ')), line: scrub(l.slice(l.indexOf(' ') + 1)) }));
  return [...parse(r.stdout, 'stdout'), ...parse(r.stderr, 'stderr')].sort((a, b) => (a.timestamp < b.timestamp ? -1 : a.timestamp > b.timestamp ? 1 : 0));
}

/** Every container of the project, with what the engine holds for each, merged. */
async function allEngineLines(): Promise<ContainerLogLine[]> {
  const names = (await docker(['ps', '-a', '--filter', `label=com.docker.compose.project=${project}`, '--format', '{{.Names}}'])).trim().split('\n').filter(Boolean);
  return merged(...(await Promise.all(names.map(engineLines))));
}

/** Merged as the window promises: timestamp order, ties by container name. */
const merged = (...lists: ContainerLogLine[][]) =>
  lists.flat().sort((a, b) => (a.timestamp !== b.timestamp ? (a.timestamp < b.timestamp ? -1 : 1) : a.container < b.container ? -1 : a.container > b.container ? 1 : 0));

/** Reads an SSE response of the app until `enough` says so, the server ends it, or the time is up. */
const readSse = (pathAndQuery: string, token: string, enough?: (events: SseMessage[]) => boolean, timeoutMs?: number) =>
  readSseAt(`${base}${pathAndQuery}`, token, enough, timeoutMs);

const logLines = (events: SseMessage[]) => events.filter((e) => e.event === undefined).map((e) => e.data as unknown as ContainerLogLine);
const numberOf = (l: ContainerLogLine) => Number(/ (\d+)$/.exec(l.line)?.[1] ?? NaN);

/** Asserts a container's numbered lines are consecutive, in order, and on the stream its rule says. */
function expectConsecutive(lines: ContainerLogLine[], stderrEvery: number) {
  const nums = lines.map(numberOf);
  expect(nums.length).toBeGreaterThan(0);
  expect(nums).toEqual(nums.map((_, i) => nums[0]! + i));
  for (const l of lines) expect(l.stream).toBe(numberOf(l) % stderrEvery === 0 ? 'stderr' : 'stdout');
  const ts = lines.map((l) => l.timestamp);
  expect(ts).toEqual([...ts].sort());
  expect(new Set(ts).size).toBe(ts.length);
}

describe('live aggregated stream (GET /api/deployment/logs)', () => {
  it('sends the tail of each container in timestamp order, then every new line in order, as the engine holds them', async () => {
    const token = await t.token('viewer');
    const received: ContainerLogLine[] = [];
    const es = new EventSource(`${base}/api/deployment/logs?tail=5`, {
      fetch: (input, init) => fetch(input, { ...init, headers: { ...init?.headers, authorization: `Bearer ${token}` } }),
    });
    es.addEventListener('message', (e) => received.push(JSON.parse((e as MessageEvent).data)));
    let failed: unknown = null;
    es.onerror = (e) => (failed = e);
    await sleep(3_000);
    es.close();
    expect(failed).toBeNull();

    for (const l of received) {
      expect(Object.keys(l)).toEqual(['container', 'service', 'stream', 'timestamp', 'line']);
      expect(l.timestamp).toMatch(TS);
      expect([alpha, beta]).toContain(l.container);
      expect(l.service).toBe(l.container === alpha ? 'alpha' : 'beta');
    }
    // The tail: five lines of each container, in timestamp order across both.
    const tail = received.slice(0, 10);
    expect(tail.filter((l) => l.container === alpha)).toHaveLength(5);
    expect(tail.filter((l) => l.container === beta)).toHaveLength(5);
    expect(tail.map((l) => l.timestamp)).toEqual(tail.map((l) => l.timestamp).sort());

    // Then three seconds of live lines: nothing missing, nothing twice, each container in order.
    const a = received.filter((l) => l.container === alpha);
    const b = received.filter((l) => l.container === beta);
    expect(a.length).toBeGreaterThanOrEqual(5 + 12);
    expect(b.length).toBeGreaterThanOrEqual(5 + 8);
    expectConsecutive(a, 3);
    expectConsecutive(b, 4);
    // Exactly what the engine holds over the same span.
    for (const [name, got] of [[alpha, a], [beta, b]] as const) {
      const held = (await engineLines(name)).filter((l) => l.timestamp >= got[0]!.timestamp && l.timestamp <= got.at(-1)!.timestamp);
      expect(got).toEqual(held);
    }
  });

  it('filters one service and answers 404 for a service the platform does not have', async () => {
    const token = await t.token('viewer');
    const { status, events } = await readSse('/api/deployment/logs/beta?tail=3', token, (ev) => ev.length >= 8);
    expect(status).toBe(200);
    const lines = logLines(events);
    expect(lines.length).toBeGreaterThanOrEqual(8);
    expect(new Set(lines.map((l) => l.container))).toEqual(new Set([beta]));
    expectConsecutive(lines, 4);
    const held = await engineLines(beta);
    expect(lines.slice(0, 3)).toEqual(held.slice(held.indexOf(held.find((l) => l.timestamp === lines[0]!.timestamp)!)).slice(0, 3));

    const missing = await readSse('/api/deployment/logs/gamma', token);
    expect(missing.status).toBe(404);
    expect(JSON.parse(missing.body)).toMatchObject({ statusCode: 404, code: 'not_found', message: expect.stringContaining('service "gamma"') });
  });

  it('lets a container that starts later join from its first line, and follows a restarted one without repeats', async () => {
    const token = await t.token('viewer');
    const ac = new AbortController();
    const received: ContainerLogLine[] = [];
    const reading = (async () => {
      const res = await fetch(`${base}/api/deployment/logs?tail=0`, { headers: { authorization: `Bearer ${token}` }, signal: ac.signal });
      const reader = res.body!.getReader();
      const dec = new TextDecoder();
      let text = '';
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) return;
          text += dec.decode(value, { stream: true });
          const cut = text.lastIndexOf('\n\n');
          if (cut >= 0) {
            received.push(...logLines(parseSse(text.slice(0, cut + 2))));
            text = text.slice(cut + 2);
          }
        }
      } catch (err) {
        if ((err as Error).name !== 'AbortError') throw err;
      }
    })();
    const waitFor = (what: string, pred: () => boolean) => eventually(pred, what, 15_000);
    try {
      await waitFor('a first live line', () => received.length > 0);
      const connectedAt = received[0]!.timestamp;
      await compose(['--profile', 'late', 'up', '-d', 'late']);
      await waitFor('ten lines of the late container', () => received.filter((l) => l.container === late).length >= 10);
      const l = received.filter((x) => x.container === late);
      expect(l[0]!.line).toBe('late out 1');
      expect(l[0]!.service).toBe('late');
      expectConsecutive(l, Number.MAX_SAFE_INTEGER);
      expect(l[0]!.timestamp > connectedAt).toBe(true);

      await docker(['restart', '-t', '1', alpha]);
      const restartedAt = received.length;
      await waitFor('alpha after its restart', () => received.slice(restartedAt).some((x) => x.container === alpha && x.line === 'alpha out 2'));
      const a = received.filter((x) => x.container === alpha);
      const ts = a.map((x) => x.timestamp);
      expect(new Set(ts).size).toBe(ts.length); // nothing sent twice across the restart
      expect(ts).toEqual([...ts].sort());
      const firstAfter = a.findIndex((x) => x.line === 'alpha out 1');
      expect(firstAfter).toBeGreaterThan(0);
      expectConsecutive(a.slice(0, firstAfter), 3);
      expectConsecutive(a.slice(firstAfter), 3);
    } finally {
      ac.abort();
      await reading;
    }
  });
});

describe('time windows (GET /api/deployment-log, admin)', () => {
  it('sends exactly the lines from since to until, both inclusive, in timestamp order, then ends', async () => {
    const a = await engineLines(alpha);
    const b = await engineLines(beta);
    const since = a[3]!.timestamp;
    const until = b[15]!.timestamp;
    const expected = (await allEngineLines()).filter((l) => l.timestamp >= since && l.timestamp <= until);
    expect(expected.length).toBeGreaterThan(20);
    const token = await t.token('admin');

    const res = await readSse(`/api/deployment-log?since=${since}&until=${until}`, token);
    expect(res.status).toBe(200);
    expect(res.endedByServer).toBe(true);
    expect(logLines(res.events)).toEqual(expected);
    expect(res.events.at(-1)).toEqual({ event: 'end', data: { lines: expected.length } });

    // One nanosecond inside either end leaves out the line stamped at that end.
    const inside = (ts: string, deltaNs: number) => {
      const frac = BigInt(ts.slice(20, 29)) + BigInt(deltaNs);
      return `${ts.slice(0, 20)}${frac.toString().padStart(9, '0')}Z`;
    };
    const narrower = await readSse(`/api/deployment-log?since=${inside(since, 1)}&until=${inside(until, -1)}`, token);
    expect(logLines(narrower.events)).toEqual(expected.filter((l) => l.timestamp !== since && l.timestamp !== until));

    // The same window in another offset and one container by name.
    const plusTwo = `${new Date(Date.parse(`${since.slice(0, 19)}Z`) + 2 * 3_600_000).toISOString().slice(0, 19)}${since.slice(19, 29)}+02:00`;
    const one = await readSse(`/api/deployment-log?since=${encodeURIComponent(plusTwo)}&until=${until}&containerName=${alpha}`, token);
    expect(logLines(one.events)).toEqual(expected.filter((l) => l.container === alpha));
  });

  it('follows when until is absent, and ends by itself when until is reached', async () => {
    const token = await t.token('admin');
    const start = new Date(Date.now() - 1_000).toISOString();
    const open = await readSse(`/api/deployment-log?since=${start}`, token, (ev) => ev.some((e) => e.event === undefined && String((e.data as { timestamp: string }).timestamp) > new Date(Date.now() - 200).toISOString()), 10_000);
    expect(open.endedByServer).toBe(false);
    const lines = logLines(open.events);
    expect(lines.every((l) => l.timestamp >= start.replace('Z', '000000Z'))).toBe(true);
    expectConsecutive(lines.filter((l) => l.container === beta), 4);

    const until = new Date(Date.now() + 1_500).toISOString();
    const started = Date.now();
    const bounded = await readSse(`/api/deployment-log?since=${start}&until=${until}`, token, () => false, 10_000);
    expect(bounded.endedByServer).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_000);
    const got = logLines(bounded.events);
    expect(got.at(-1)!.timestamp <= until.replace('Z', '000000Z')).toBe(true);
    expect(bounded.events.at(-1)).toEqual({ event: 'end', data: { lines: got.length } });
    // Everything the engine stamped inside the window, nothing else, none twice.
    const held = (await allEngineLines()).filter((l) => l.timestamp >= start.replace('Z', '000000Z') && l.timestamp <= until.replace('Z', '000000Z'));
    expect(merged(got)).toEqual(held);
    // What the engine held when the request came is history: one strict timestamp order. The rest
    // is live: each container exactly in order, across containers as delivered (ADR 0007).
    const requestedAt = new Date(started).toISOString().replace('Z', '000000Z');
    const history = got.filter((l) => l.timestamp < requestedAt);
    expect(history.length).toBeGreaterThan(0);
    expect(got.slice(0, history.length)).toEqual(merged(history));
    for (const c of new Set(got.map((l) => l.container))) {
      const mine = got.filter((l) => l.container === c);
      expect(mine).toEqual(held.filter((l) => l.container === c));
    }
  });

  it('answers 400 naming the parameter, and 403 to non-admins', async () => {
    const admin = await t.token('admin');
    const cases: [string, string][] = [
      ['/api/deployment-log?since=not-a-date', 'since:'],
      ['/api/deployment-log?until=2024-05-01T25:00:00Z', 'until:'],
      ['/api/deployment-log?since=2024-05-02T00:00:00Z&until=2024-05-01T00:00:00Z', 'since: must not be later than until'],
      [`/api/deployment-log?containerName=${project}-gamma-1`, 'containerName:'],
      ['/api/deployment-log/download?until=2024-05-01T00:00:00Z', 'since: is required'],
      [`/api/deployment-log/download?since=2024-05-01T00:00:00Z&containerName=${project}-gamma-1`, 'containerName:'],
      ['/api/deployment/logs?tail=ten', 'querystring.tail'],
      ['/api/deployment/logs?tail=100001', 'querystring.tail'],
    ];
    for (const [url, message] of cases) {
      const res = await readSse(url, admin);
      expect(res.status, url).toBe(400);
      expect(JSON.parse(res.body), url).toMatchObject({ statusCode: 400, code: 'bad_request', message: expect.stringContaining(message) });
    }
    for (const role of ['viewer', 'operator'] as const) {
      for (const url of ['/api/deployment-log', '/api/deployment-log/download?since=2024-05-01T00:00:00Z']) {
        const res = await readSse(url, await t.token(role));
        expect(res.status, `${role} ${url}`).toBe(403);
      }
    }
  });
});

describe('download (GET /api/deployment-log/download, admin)', () => {
  it('is a text attachment named logs-<ISO timestamp>.txt, every line prefixed with its container, as many lines as the window holds', async () => {
    const a = await engineLines(alpha);
    const b = await engineLines(beta);
    const since = a[0]!.timestamp;
    const until = b.at(-1)!.timestamp;
    const expected = (await allEngineLines()).filter((l) => l.timestamp >= since && l.timestamp <= until);
    expect(new Set(expected.map((l) => l.container))).toEqual(new Set([alpha, beta, late]));
    const res = await fetch(`${base}/api/deployment-log/download?since=${since}&until=${until}`, { headers: { authorization: `Bearer ${await t.token('admin')}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/plain; charset=utf-8');
    expect(res.headers.get('content-disposition')).toMatch(/^attachment; filename="logs-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\.txt"$/);
    const body = await res.text();
    const lines = body.split('\n');
    expect(lines.pop()).toBe('');
    expect(lines).toHaveLength(expected.length);
    for (const l of lines) expect([alpha, beta, late].some((name) => l.startsWith(`${name} | `)), l).toBe(true);
    expect(lines).toEqual(expected.map((l) => `${l.container} | ${l.timestamp} ${l.stream} ${l.line}`));
  });
});

describe('redaction', () => {
  it('never passes an installer secret a container prints, on any endpoint', async () => {
    const raw = await run('docker', ['logs', beta]);
    expect(raw.stdout + raw.stderr).toContain(LEAK); // the container really printed it
    const admin = await t.token('admin');
    const since = '2000-01-01T00:00:00Z';
    const live = await readSse('/api/deployment/logs/beta?tail=10000', await t.token('viewer'), (ev) => ev.length >= 20);
    const window = await readSse(`/api/deployment-log?since=${since}&until=${new Date().toISOString()}&containerName=${beta}`, admin);
    const download = await (await fetch(`${base}/api/deployment-log/download?since=${since}&containerName=${beta}`, { headers: { authorization: `Bearer ${admin}` } })).text();
    for (const [name, text] of [['live', JSON.stringify(live.events)], ['window', JSON.stringify(window.events)], ['download', download]] as const) {
      expect(text, name).not.toContain(LEAK);
      expect(text, name).toContain(`beta connecting with token=${REDACTED} and more`);
      expect(text, name).toContain(`beta secret on stderr ${REDACTED}`);
    }
  });
});

describe('resuming a follower (adapter)', () => {
  it('repeats and skips nothing when the last line read has left the re-read window', async () => {
    await compose(['--profile', 'late', 'up', '-d', 'late']);
    // A re-read window of one line: after a restart the follower almost surely falls back to a scan.
    const logs = new ContainerLogs(connectEngine('/var/run/docker.sock'), { scrub, resumeWindow: 1 });
    const feed = logs.live({ project, containerName: late }, { tail: 0 });
    const got: ContainerLogLine[] = [];
    const reading = (async () => {
      for await (const batch of feed) got.push(...batch);
    })();
    await sleep(700);
    await docker(['stop', '-t', '1', late]);
    await sleep(500);
    await docker(['start', late]);
    await sleep(1_500);
    feed.close();
    await reading;
    const restart = got.findIndex((l, i) => i > 0 && l.line === 'late out 1');
    expect(restart).toBeGreaterThan(0);
    expectConsecutive(got.slice(0, restart), Number.MAX_SAFE_INTEGER);
    expectConsecutive(got.slice(restart), Number.MAX_SAFE_INTEGER);
    const held = (await engineLines(late)).filter((l) => l.timestamp >= got[0]!.timestamp && l.timestamp <= got.at(-1)!.timestamp);
    expect(got).toEqual(held);
  });
});

describe('the engine socket reader', () => {
  const read = (path: string) =>
    new Promise<Buffer>((resolve, reject) => {
      const parts: Buffer[] = [];
      openEngineStream('/var/run/docker.sock', path, {
        bytes: (b) => parts.push(Buffer.from(b)) > 0, // copied: the reader reuses its buffer
        end: (err) => (err ? reject(err) : resolve(Buffer.concat(parts))),
      }).catch(reject);
    });

  it('reads a log body like docker logs does, and reports the engine\'s error with its status', async () => {
    const raw = await read(`/containers/${alpha}/logs?stdout=1&stderr=1&timestamps=1&tail=3`);
    // Three multiplexed frames: an 8-byte header, then "<timestamp> alpha …\n".
    let off = 0;
    const texts: string[] = [];
    while (off < raw.length) {
      const size = raw.readUInt32BE(off + 4);
      texts.push(raw.toString('utf8', off + 8, off + 8 + size));
      off += 8 + size;
    }
    expect(off).toBe(raw.length);
    expect(texts).toHaveLength(3);
    // The same three lines as docker logs shows (alpha keeps writing, so look them up by timestamp).
    const held = await engineLines(alpha);
    const at = held.findIndex((l) => l.timestamp === texts[0]!.slice(0, texts[0]!.indexOf(' ')));
    expect(at).toBeGreaterThanOrEqual(0);
    expect(texts.map((x) => x.slice(x.indexOf(' ') + 1, -1))).toEqual(held.slice(at, at + 3).map((l) => l.line));
    await expect(read('/containers/no-such-container-here/logs?stdout=1')).rejects.toMatchObject({ statusCode: 404, message: expect.stringContaining('No such container') });
  });
});

// The container-log routes against an in-memory ContainerLogsPort: parameter validation, roles,
// the SSE and download formats, dropping a client that stops reading, closing with streams open.
// The same routes on the real engine: test/e2e/logs.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { parseSse } from '../helpers/shared/sse.ts';
import { stalledClient } from '../helpers/api/stalled-client.ts';
import { parseInstant, TAIL_DEFAULT, TAIL_MAX } from '../../src/api/routes/logs.ts';
import { readObserved, requestRefresh } from '../../src/state/observed.ts';
import type { ContainerLogLine, ContainerLogsPort, LogFeed, LogSelection, PlatformContainer } from '../../src/contracts/ports.ts';

const CONTAINERS: PlatformContainer[] = [
  { id: 'a1', name: 'platform-web-1', service: 'web', state: 'running' },
  { id: 'b2', name: 'platform-db-1', service: 'db', state: 'exited' },
];

const line = (i: number, container = 'platform-web-1'): ContainerLogLine => ({
  container,
  service: container === 'platform-web-1' ? 'web' : 'db',
  stream: i % 2 ? 'stderr' : 'stdout',
  timestamp: `2024-05-01T10:00:${String(i % 60).padStart(2, '0')}.000000${String(i % 1000).padStart(3, '0')}Z`,
  line: `line ${i}`,
});

/** Feeds built from a generator of batches; remembers how they were asked for and whether they were closed. */
class FakeLogs implements ContainerLogsPort {
  calls: { kind: 'live' | 'window'; selection: LogSelection; opts: unknown; feed: { closed: boolean } }[] = [];
  batches: () => AsyncGenerator<ContainerLogLine[]> = async function* () {
    yield [line(1), line(2)];
    yield [line(3, 'platform-db-1')];
  };
  /** When set, every feed's engine step fails with it (the engine went away after the observer's look). */
  openError: Error | null = null;
  private feed(kind: 'live' | 'window', selection: LogSelection, opts: unknown): LogFeed {
    const state = { closed: false };
    this.calls.push({ kind, selection, opts, feed: state });
    const gen = this.batches();
    let onClose!: () => void;
    const closed = new Promise<IteratorReturnResult<undefined>>((r) => (onClose = () => r({ done: true, value: undefined })));
    const close = () => {
      state.closed = true;
      onClose();
    };
    const opened = this.openError ? Promise.reject(this.openError) : Promise.resolve();
    opened.catch(() => {});
    return {
      opened,
      close,
      [Symbol.asyncIterator]: () => ({
        next: async () => (state.closed ? { done: true as const, value: undefined } : Promise.race([gen.next(), closed])),
        return: async () => {
          close();
          return { done: true as const, value: undefined };
        },
      }),
    };
  }
  live(selection: LogSelection, opts: { tail: number }): LogFeed {
    return this.feed('live', selection, opts);
  }
  window(selection: LogSelection, opts: { since?: bigint; until?: bigint; follow: boolean }): LogFeed {
    return this.feed('window', selection, opts);
  }
}

const fake = new FakeLogs();
let t: TestApp;
let base: string;
beforeAll(async () => {
  t = await startTestApp({ logs: fake, platformContainers: () => CONTAINERS, env: { LOG_CLIENT_STALL_SECONDS: '1' } });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => t?.close());

async function get(url: string, role: 'viewer' | 'operator' | 'admin' | null = 'admin') {
  const headers: Record<string, string> = role ? { authorization: `Bearer ${await t.token(role)}` } : {};
  return t.app.inject({ method: 'GET', url, headers });
}

describe('ISO 8601 instants', () => {
  it('keeps nanoseconds and honours offsets', () => {
    expect(parseInstant('2024-05-01T10:00:00.123456789Z')).toBe(1714557600123456789n);
    expect(parseInstant('2024-05-01T12:00:00.123456789+02:00')).toBe(1714557600123456789n);
    expect(parseInstant('2024-05-01T09:30:00-0030')).toBe(1714557600000000000n);
    expect(parseInstant('2024-05-01T10:00:00.5Z')).toBe(1714557600500000000n);
    expect(parseInstant('2024-05-01T10:00Z')).toBe(1714557600000000000n);
    expect(parseInstant('2024-05-01T10:00:00')).toBe(1714557600000000000n); // no offset: UTC
    expect(parseInstant('2024-05-01')).toBe(1714521600000000000n);
  });

  it('refuses what is not a real instant', () => {
    for (const bad of ['', 'yesterday', '1714557600', '2024-04-31T00:00:00Z', '2024-13-01T00:00:00Z', '2024-05-01T24:00:00Z', '2024-05-01T10:00:00.1234567891Z', '2024-05-01T10:00:00+25:00', '1969-12-31T23:59:59Z', '2024-05-01T10:00:00Z junk']) {
      expect(parseInstant(bad), bad).toBeNull();
    }
  });
});

describe('parameters', () => {
  it.each([
    ['/api/deployment/logs?tail=abc', 'querystring.tail'],
    ['/api/deployment/logs?tail=1.5', 'querystring.tail'],
    ['/api/deployment/logs?tail=-1', 'querystring.tail'],
    ['/api/deployment/logs?tail=', 'querystring.tail'],
    [`/api/deployment/logs?tail=${TAIL_MAX + 1}`, `querystring.tail: must be at most ${TAIL_MAX}`],
    ['/api/deployment/logs/web?tail=1e3', 'querystring.tail'],
    ['/api/deployment-log?since=yesterday', 'since: must be an ISO 8601 date-time'],
    ['/api/deployment-log?until=2024-02-30T00:00:00Z', 'until: must be an ISO 8601 date-time'],
    ['/api/deployment-log?since=2024-05-01T10:00:01Z&until=2024-05-01T10:00:00Z', 'since: must not be later than until'],
    ['/api/deployment-log?containerName=platform-nope-1', 'containerName: no platform container is named "platform-nope-1"'],
    ['/api/deployment-log?containerName=..%2F..%2Fetc', 'containerName: no platform container'],
    ['/api/deployment-log/download', 'since: is required'],
    ['/api/deployment-log/download?since=2024-05-01T10:00:00Z&containerName=web', 'containerName: no platform container is named "web"'],
  ])('%s answers 400 naming the parameter', async (url, message) => {
    const before = fake.calls.length;
    const res = await get(url);
    expect(res.statusCode).toBe(400);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    const body = res.json();
    expect(body).toMatchObject({ statusCode: 400, error: 'Bad Request', code: 'bad_request' });
    expect(body.message).toContain(message);
    expect(fake.calls.length).toBe(before); // nothing was read
  });

  it('answers 404 naming an unknown service', async () => {
    const res = await get('/api/deployment/logs/nosuch', 'viewer');
    expect(res.statusCode).toBe(404);
    expect(res.json()).toMatchObject({ statusCode: 404, code: 'not_found' });
    expect(res.json().message).toContain('service "nosuch"');
  });

  it('passes tail (default and given), service, window and container to the port', async () => {
    fake.calls = [];
    await get('/api/deployment/logs', 'viewer');
    await get('/api/deployment/logs?tail=0', 'viewer');
    await get(`/api/deployment/logs/db?tail=${TAIL_MAX}`, 'viewer');
    await get('/api/deployment-log?since=2024-05-01T10:00:00.000000001Z&until=2024-05-01T12:00:00.000000001%2B02:00&containerName=platform-db-1'); // one instant: allowed
    await get('/api/deployment-log/download?since=2024-05-01T10:00:00Z');
    expect(fake.calls.map(({ kind, selection, opts }) => ({ kind, selection, opts }))).toEqual([
      { kind: 'live', selection: { project: 'platform' }, opts: { tail: TAIL_DEFAULT } },
      { kind: 'live', selection: { project: 'platform' }, opts: { tail: 0 } },
      { kind: 'live', selection: { project: 'platform', service: 'db' }, opts: { tail: TAIL_MAX } },
      { kind: 'window', selection: { project: 'platform', containerName: 'platform-db-1' }, opts: { since: 1714557600000000001n, until: 1714557600000000001n, follow: true } },
      { kind: 'window', selection: { project: 'platform' }, opts: { since: 1714557600000000000n, follow: false } },
    ]);
    expect(fake.calls.every((c) => c.feed.closed)).toBe(true);
  });
});

describe('roles', () => {
  it('needs a signed-in caller for the live streams', async () => {
    expect((await get('/api/deployment/logs', null)).statusCode).toBe(401);
    expect((await get('/api/deployment/logs/web', null)).statusCode).toBe(401);
    expect((await get('/api/deployment/logs', 'viewer')).statusCode).toBe(200);
  });

  it.each(['viewer', 'operator'] as const)('refuses the window and the download to a %s with 403', async (role) => {
    for (const url of ['/api/deployment-log', '/api/deployment-log/download?since=2024-05-01T10:00:00Z']) {
      const res = await get(url, role);
      expect(res.statusCode).toBe(403);
      expect(res.json()).toMatchObject({ statusCode: 403, code: 'forbidden' });
    }
  });

  it('refuses the service token (operator) on the admin endpoints', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/api/deployment-log', headers: { authorization: `Bearer ${t.settings.secrets.SERVICE_TOKEN}` } });
    expect(res.statusCode).toBe(403);
  });
});

describe('formats', () => {
  it('streams one SSE event per line with container, service, stream, timestamp and line', async () => {
    const res = await get('/api/deployment/logs', 'viewer');
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/event-stream');
    const events = parseSse(res.body);
    expect(events.map((e) => e.data)).toEqual([line(1), line(2), line(3, 'platform-db-1')]);
    expect(events.every((e) => e.event === undefined)).toBe(true);
  });

  it('ends a window with an end event that counts the lines', async () => {
    const res = await get('/api/deployment-log?until=2030-01-01T00:00:00Z');
    const events = parseSse(res.body);
    expect(events.at(-1)).toEqual({ event: 'end', data: { lines: 3 } });
    expect(events.slice(0, -1).map((e) => e.data)).toEqual([line(1), line(2), line(3, 'platform-db-1')]);
  });

  it('downloads text lines prefixed with the container name, as a dated attachment', async () => {
    const before = Date.now();
    const res = await get('/api/deployment-log/download?since=2024-05-01T10:00:00Z');
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/plain; charset=utf-8');
    const m = /^attachment; filename="logs-(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)\.txt"$/.exec(String(res.headers['content-disposition']));
    expect(m).not.toBeNull();
    expect(Date.parse(m![1]!)).toBeGreaterThanOrEqual(before - 1000);
    expect(res.body).toBe(
      [line(1), line(2), line(3, 'platform-db-1')].map((l) => `${l.container} | ${l.timestamp} ${l.stream} ${l.line}\n`).join(''),
    );
  });

  it('tells an SSE client when the engine fails mid-stream, without a 500', async () => {
    const saved = fake.batches;
    fake.batches = async function* () {
      yield [line(1)];
      throw new Error('engine went away');
    };
    try {
      const res = await get('/api/deployment/logs', 'viewer');
      expect(res.statusCode).toBe(200);
      const events = parseSse(res.body);
      expect(events[0]!.data).toEqual(line(1));
      expect(events[1]).toMatchObject({ event: 'error' });
      expect(JSON.stringify(events[1])).not.toContain('engine went away');
    } finally {
      fake.batches = saved;
    }
  });
});

/** An endless feed of 200-character lines, for clients that stop reading. */
async function* endless(): AsyncGenerator<ContainerLogLine[]> {
  for (let i = 0; ; i++) {
    const batch = Array.from({ length: 500 }, (_, j) => ({ ...line(i * 500 + j), line: 'x'.repeat(200) }));
    yield batch;
    await new Promise((r) => setImmediate(r));
  }
}

describe('slow clients', () => {
  it.each([
    ['/api/deployment/logs', 'dropped a log stream client that stopped reading'],
    ['/api/deployment-log/download?since=2024-05-01T10:00:00Z', 'dropped a log download client that stopped reading'],
  ])('%s drops a client that stops reading after LOG_CLIENT_STALL_SECONDS, with bounded buffering', async (path, message) => {
    const saved = fake.batches;
    fake.batches = endless;
    try {
      const rssBefore = process.memoryUsage().rss;
      const client = await stalledClient(base, path, await t.token('admin'));
      expect(client.head).toMatch(/^HTTP\/1.1 200/);
      const call = fake.calls.at(-1)!;
      const started = Date.now();
      while (!call.feed.closed && Date.now() - started < 10_000) await new Promise((r) => setTimeout(r, 50));
      const waited = Date.now() - started;
      expect(call.feed.closed).toBe(true);
      expect(waited).toBeGreaterThanOrEqual(900); // the bound is 1 s here
      expect(waited).toBeLessThan(6_000);
      expect(t.logs.some((l) => l.includes(message))).toBe(true);
      // What reaches the client is what the socket buffers held when it stopped: far less than an endless feed.
      const received = await client.resume();
      expect(received).toBeLessThan(64 * 1024 * 1024);
      expect(process.memoryUsage().rss - rssBefore).toBeLessThan(200 * 1024 * 1024);
    } finally {
      fake.batches = saved;
    }
  });

  it('ends open streams when the app closes', async () => {
    const own = new FakeLogs();
    own.batches = async function* () {
      yield [line(1)];
      await new Promise(() => {}); // never ends by itself
    };
    const app2 = await startTestApp({ logs: own });
    const base2 = await app2.app.listen({ host: '127.0.0.1', port: 0 });
    const res = await fetch(`${base2}/api/deployment/logs`, { headers: { authorization: `Bearer ${await app2.token('viewer')}` } });
    const reader = res.body!.getReader();
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toContain('line 1');
    const started = Date.now();
    await app2.close();
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(own.calls[0]!.feed.closed).toBe(true);
  });
});

describe('without an engine connection', () => {
  it('answers 503 in the one error shape', async () => {
    const bare = await startTestApp({ logs: null });
    try {
      const res = await bare.app.inject({ method: 'GET', url: '/api/deployment/logs', headers: { authorization: `Bearer ${await bare.token('viewer')}` } });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toMatchObject({ statusCode: 503, code: 'unavailable' });
    } finally {
      await bare.close();
    }
  });
});

describe('names from observed state, the engine from the stream', () => {
  it('a service the observer has not seen is 404 without asking the engine; one it has seen is streamed', async () => {
    const platform: PlatformContainer[] = [{ id: 'w', name: 'platform-web-1', service: 'web', state: 'running' }];
    const own = new FakeLogs();
    const app2 = await startTestApp({ logs: own, platformContainers: () => platform });
    try {
      const headers = { authorization: `Bearer ${await app2.token('viewer')}` };
      await expect.poll(async () => (await readObserved(app2.db.database.db, 'platform'))?.data?.containers.length).toBe(1);
      // A container started after the observer's look (no engine event reaches it here): unknown
      // until observed, and no feed was opened to find out.
      platform.push({ id: 'q', name: 'platform-queue-1', service: 'queue', state: 'running' });
      const unseen = await app2.app.inject({ method: 'GET', url: '/api/deployment/logs/queue', headers });
      expect(unseen.statusCode).toBe(404);
      expect(own.calls).toEqual([]);
      const window = await app2.app.inject({ method: 'GET', url: '/api/deployment-log?containerName=platform-queue-1&until=2024-05-01T10:00:00Z', headers: { authorization: `Bearer ${await app2.token('admin')}` } });
      expect(window.statusCode).toBe(400);
      expect(own.calls).toEqual([]);
      // Observed again (the status page's read after a job would do the same): now it is known.
      await requestRefresh(app2.db.database.db, 'platform');
      await expect.poll(async () => (await readObserved(app2.db.database.db, 'platform'))?.data?.containers.length).toBe(2);
      const seen = await app2.app.inject({ method: 'GET', url: '/api/deployment-log?containerName=platform-queue-1&until=2024-05-01T10:00:00Z', headers: { authorization: `Bearer ${await app2.token('admin')}` } });
      expect(seen.statusCode, seen.body).toBe(200);
      expect(own.calls.map((c) => c.selection)).toEqual([{ project: 'platform', containerName: 'platform-queue-1' }]);
    } finally {
      await app2.close();
    }
  });

  it('the engine down for the observer: 503 before any stream; down when the stream opens: 503, the feed closed', async () => {
    let engineUp = true;
    const own = new FakeLogs();
    const app2 = await startTestApp({
      logs: own,
      platformContainers: () => {
        if (!engineUp) throw new Error('connect ENOENT /var/run/docker.sock');
        return CONTAINERS;
      },
    });
    try {
      const headers = { authorization: `Bearer ${await app2.token('admin')}` };
      own.openError = new Error('connect ENOENT /var/run/docker.sock');
      for (const url of ['/api/deployment/logs', '/api/deployment/logs/web', '/api/deployment-log', '/api/deployment-log/download?since=2024-05-01T10:00:00Z']) {
        const res = await app2.app.inject({ method: 'GET', url, headers });
        expect(res.statusCode, url).toBe(503);
        expect(res.json()).toMatchObject({ code: 'unavailable', message: 'the Docker engine did not answer; try again shortly' });
      }
      expect(own.calls).toHaveLength(4);
      expect(own.calls.every((c) => c.feed.closed)).toBe(true);
      own.openError = null;
      engineUp = false;
      await requestRefresh(app2.db.database.db, 'platform');
      await expect.poll(async () => (await readObserved(app2.db.database.db, 'platform'))?.data?.engineError).toBeDefined();
      const res = await app2.app.inject({ method: 'GET', url: '/api/deployment/logs/web', headers });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toMatchObject({ code: 'unavailable', message: 'the Docker engine did not answer; try again shortly' });
      expect(own.calls).toHaveLength(4);
    } finally {
      await app2.close();
    }
  });

  it('an engine read that failed is tried again within seconds, not at the 30 s interval: the names are back unasked', async () => {
    let failures = 1;
    const own = new FakeLogs();
    const app2 = await startTestApp({
      logs: own,
      platformContainers: () => {
        if (failures > 0) {
          failures--;
          throw new Error('the engine did not answer within 5 s');
        }
        return CONTAINERS;
      },
    });
    try {
      const db = app2.db.database.db;
      await expect.poll(async () => (await readObserved(db, 'platform'))?.data?.engineError, { timeout: 10_000 }).toBeDefined();
      const failedAt = Date.now();
      // No request for a refresh: only the observer's own retry can bring the containers back.
      await expect.poll(async () => (await readObserved(db, 'platform'))?.data?.containers.length, { timeout: 10_000, interval: 100 }).toBe(2);
      expect(Date.now() - failedAt).toBeLessThan(10_000);
      const res = await app2.app.inject({ method: 'GET', url: '/api/deployment/logs/web', headers: { authorization: `Bearer ${await app2.token('viewer')}` } });
      expect(res.statusCode).toBe(200);
    } finally {
      await app2.close();
    }
  });
});

// Bounded connections (docs/adr/0040-bounded-connections.md) on the real listeners of
// src/listeners.ts, plain HTTP and HTTPS, with real sockets: live streams capped per caller and in
// all (429 with Retry-After, the slot back when a stream closes); a client that dribbles its
// headers cut after the header timeout; an idle kept-alive connection closed; streams and a long
// download not cut by the request timeout; connections past the cap refused while the open ones
// are served. Small settings keep it fast.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import net from 'node:net';
import tls from 'node:tls';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { parseSse } from '../helpers/shared/sse.ts';
import { runEntry } from '../helpers/shared/process.ts';
import { connect, open, type Opened } from '../helpers/api/raw-sockets.ts';
import { startListeners, type Listeners } from '../../src/listeners.ts';
import { generatedCertificate, type TlsMaterial } from '../../src/adapters/tls.ts';
import { createJob } from '../../src/state/jobs.ts';
import type { ContainerLogLine, ContainerLogsPort, LogFeed, PlatformContainer } from '../../src/contracts/ports.ts';

const HOST = '127.0.0.1';
const quiet = pino({ enabled: false });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const HEADERS_TIMEOUT_MS = 500;
const REQUEST_TIMEOUT_MS = 1_000;
const KEEP_ALIVE_TIMEOUT_MS = 200;
/** Node keeps an idle connection this much longer than keepAliveTimeout (server.keepAliveTimeoutBuffer). */
const KEEP_ALIVE_BUFFER_MS = 1_000;
const DOWNLOAD_BATCHES = 15;
const BATCH_EVERY_MS = 100;

const line = (i: number): ContainerLogLine => ({ container: 'platform-web-1', service: 'web', stream: 'stdout', timestamp: `2024-05-01T10:00:${String(i % 60).padStart(2, '0')}.000000000Z`, line: `line ${i}` });

/**
 * The platform's logs as the engine adapter hands them over, in memory (the same routes on the real
 * engine: test/e2e/logs.test.ts): a live feed follows until closed; a window yields a batch every
 * BATCH_EVERY_MS, so that a download lasts longer than the request timeout.
 */
const CONTAINERS: PlatformContainer[] = [{ id: 'a1', name: 'platform-web-1', service: 'web', state: 'running' }];

class SlowLogs implements ContainerLogsPort {
  private feed(batches: AsyncGenerator<ContainerLogLine[]>): LogFeed {
    let closed = false;
    let onClose = () => {};
    const stop = new Promise<IteratorReturnResult<undefined>>((r) => (onClose = () => r({ done: true, value: undefined })));
    const close = () => {
      closed = true;
      onClose();
    };
    return {
      opened: Promise.resolve(),
      close,
      [Symbol.asyncIterator]: () => ({
        next: async () => (closed ? { done: true as const, value: undefined } : Promise.race([batches.next(), stop])),
        return: async () => {
          close();
          return { done: true as const, value: undefined };
        },
      }),
    };
  }
  live(): LogFeed {
    return this.feed(
      (async function* () {
        yield [line(0)];
        await new Promise(() => {}); // follows: nothing more until closed
      })(),
    );
  }
  window(): LogFeed {
    return this.feed(
      (async function* () {
        for (let i = 0; i < DOWNLOAD_BATCHES; i++) {
          await sleep(BATCH_EVERY_MS);
          yield [line(2 * i), line(2 * i + 1)];
        }
      })(),
    );
  }
}

const portOf = (address: string) => Number(new URL(address).port);

describe('caps on live streams, and timeouts, on both listeners', () => {
  let t: TestApp;
  let listeners: Listeners;
  let material: TlsMaterial;
  let base: string;
  let secureBase: string;
  const auth = (token: string) => ({ authorization: `Bearer ${token}` });
  const service = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}` };

  beforeAll(async () => {
    t = await startTestApp({
      logs: new SlowLogs(),
      platformContainers: () => CONTAINERS,
      env: {
        STREAMS_PER_PRINCIPAL: '2',
        STREAMS_TOTAL: '3',
        HTTP_HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS),
        HTTP_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
        HTTP_KEEP_ALIVE_TIMEOUT_MS: String(KEEP_ALIVE_TIMEOUT_MS),
        HTTP_MAX_CONNECTIONS: '64',
      },
    });
    material = await generatedCertificate(mkdtempSync(path.join(tmpdir(), 'installer-bounded-')));
    listeners = await startListeners(t.app, { HOST, PORT: 0, HTTPS_PORT: 0, HSTS_MAX_AGE_SECONDS: 0 }, material, quiet);
    base = listeners.httpAddress;
    secureBase = listeners.httpsAddress!;
  });
  afterAll(async () => {
    await listeners?.close();
    await t?.close();
  });

  async function jobStreamUrl(): Promise<string> {
    const jobId = await createJob(t.db.database.db, { kind: 'restart', params: {}, actor: { id: 'operator' } });
    await t.wired.events.open(jobId);
    return `/api/deployment/jobs/${jobId}/logs`;
  }

  async function expectRefused(res: Opened, cap: string) {
    expect(res.status).toBe(429);
    expect(res.headers['retry-after']).toBe('5');
    expect(JSON.parse(await res.ended)).toEqual({ statusCode: 429, error: 'Too Many Requests', code: 'rate_limited', message: expect.stringContaining(cap) });
  }

  const openCount = () => t.app.streamSlots.total;

  it('caps the streams of one caller over both listeners, and gives the slot back when one closes', async () => {
    const viewer = auth(await t.token('viewer'));
    const url = await jobStreamUrl();
    const a = await open(`${base}${url}`, viewer);
    const b = await open(`${secureBase}${url}`, viewer, material.cert);
    expect([a.status, b.status]).toEqual([200, 200]);

    // A third, a job stream or a log stream, on either listener: refused, naming the cap.
    const third = await open(`${base}/api/deployment/logs?tail=10000`, viewer);
    await expectRefused(third, 'STREAMS_PER_PRINCIPAL=2');
    expect(await third.ended).toContain('the user viewer already holds 2');
    await expectRefused(await open(`${secureBase}${url}`, viewer, material.cert), 'STREAMS_PER_PRINCIPAL=2');
    // A caller without a token is refused before it could take a slot.
    expect((await open(`${base}${url}`, {})).status).toBe(401);
    expect(openCount()).toBe(2);

    // Another caller is not held back by the viewer's streams.
    const op = await open(`${base}${url}`, auth(await t.token('operator')));
    expect(op.status).toBe(200);

    // The client goes away: its slot comes back, and the viewer gets in again.
    a.close();
    await eventually(() => openCount() === 2, 'the closed stream to free its slot');
    const again = await open(`${base}/api/deployment/logs?tail=10000`, viewer);
    expect(again.status).toBe(200);
    await eventually(() => again.received().includes('line 0'), 'the log stream to deliver its first line');
    for (const s of [b, op, again]) s.close();
    await eventually(() => openCount() === 0, 'every slot back');
  });

  it('caps the streams of all callers together, and frees a slot when a client leaves or the server ends its stream', async () => {
    const url = await jobStreamUrl();
    const viewer = auth(await t.token('viewer'));
    const streams = [await open(`${base}${url}`, viewer), await open(`${base}${url}`, viewer), await open(`${secureBase}${url}`, service, material.cert)];
    expect(streams.map((s) => s.status)).toEqual([200, 200, 200]);

    const admin = auth(await t.token('admin'));
    const over = await open(`${base}/api/deployment-log/download?since=2024-05-01T10:00:00Z`, admin);
    await expectRefused(over, 'STREAMS_TOTAL=3');
    expect(await over.ended).toContain('the installer already serves 3');
    await expectRefused(await open(`${secureBase}${url}`, admin, material.cert), 'STREAMS_TOTAL=3');

    // One client goes away: the admin's download gets in, and runs to its end.
    streams[2]!.close();
    await eventually(() => openCount() === 2, 'the closed stream to free its slot');
    const admitted = await open(`${base}/api/deployment-log/download?since=2024-05-01T10:00:00Z`, admin);
    expect(admitted.status).toBe(200);
    expect((await admitted.ended).trimEnd().split('\n')).toHaveLength(2 * DOWNLOAD_BATCHES);

    // The job finishes: the server ends the two streams left, and their slots come back.
    await t.wired.events.append(url.split('/')[4]!, 'finished', { outcome: 'completed', exitCode: 0 });
    for (const s of streams.slice(0, 2)) expect(parseSse(await s.ended).at(-1)).toMatchObject({ event: 'finished' });
    await eventually(() => openCount() === 0, 'the ended streams to free their slots');
    const now = await open(`${base}${await jobStreamUrl()}`, admin);
    expect(now.status).toBe(200);
    now.close();
    await eventually(() => openCount() === 0, 'the last slot back');
  });

  it('counts the service token as one caller, whatever person it forwards', async () => {
    const url = await jobStreamUrl();
    const as = (user: string) => ({ ...service, 'x-actor-user-id': user });
    const kept = [await open(`${base}${url}`, as('alice')), await open(`${base}${url}`, as('bob'))];
    expect(kept.map((s) => s.status)).toEqual([200, 200]);
    const third = await open(`${base}${url}`, as('carol'));
    await expectRefused(third, 'STREAMS_PER_PRINCIPAL=2');
    expect(await third.ended).toContain('the service token already holds 2');
    for (const s of kept) s.close();
    await eventually(() => openCount() === 0, 'the slots back');
  });

  it.each(['http', 'https'] as const)('keeps a stream open over %s long past the request timeout, and completes a download that outlasts it', async (scheme) => {
    const root = scheme === 'http' ? base : secureBase;
    const ca = scheme === 'https' ? material.cert : undefined;
    const url = await jobStreamUrl();
    const jobId = url.split('/')[4]!;
    const stream = await open(`${root}${url}`, auth(await t.token('viewer')), ca);
    expect(stream.status).toBe(200);
    const started = Date.now();
    for (let i = 1; i <= 6; i++) {
      await sleep(REQUEST_TIMEOUT_MS / 3);
      await t.wired.events.append(jobId, 'output', { stream: 'stdout', line: `l${i}` });
    }
    await t.wired.events.append(jobId, 'finished', { outcome: 'completed', exitCode: 0 });
    const events = parseSse(await stream.ended);
    expect(Date.now() - started).toBeGreaterThan(2 * REQUEST_TIMEOUT_MS);
    expect(events.map((e) => e.event)).toEqual(['output', 'output', 'output', 'output', 'output', 'output', 'finished']);

    const began = Date.now();
    const download = await open(`${root}/api/deployment-log/download?since=2024-05-01T10:00:00Z`, auth(await t.token('admin')), ca);
    expect(download.status).toBe(200);
    const text = await download.ended;
    expect(Date.now() - began).toBeGreaterThan(REQUEST_TIMEOUT_MS);
    expect(text.trimEnd().split('\n')).toHaveLength(2 * DOWNLOAD_BATCHES);
    await eventually(() => openCount() === 0, 'the slots back');
  });

  it.each(['http', 'https'] as const)('cuts a client that dribbles its headers over %s after the header timeout', async (scheme) => {
    let started = 0;
    let lines = 0;
    const port = portOf(scheme === 'http' ? base : secureBase);
    const { data, closedAt } = await connect(scheme, port, material.cert, (s) => {
      started = Date.now();
      s.write('GET /api/health HTTP/1.1\r\nHost: installer\r\n');
      const drip = setInterval(() => {
        if (!s.destroyed) s.write(`X-Drip-${++lines}: x\r\n`);
      }, 50);
      s.once('close', () => clearInterval(drip));
    });
    const held = closedAt - started;
    expect(data).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    expect(JSON.parse(data.slice(data.indexOf('\r\n\r\n') + 4))).toEqual({
      statusCode: 408,
      error: 'Request Timeout',
      code: 'request_timeout',
      message: `the request did not arrive in time: its headers must come within ${HEADERS_TIMEOUT_MS} ms (HTTP_HEADERS_TIMEOUT_MS), all of it within ${REQUEST_TIMEOUT_MS} ms (HTTP_REQUEST_TIMEOUT_MS)`,
    });
    expect(held).toBeGreaterThanOrEqual(HEADERS_TIMEOUT_MS - 50);
    expect(held).toBeLessThan(HEADERS_TIMEOUT_MS + 2_000);
    expect(lines).toBeGreaterThan(3);
  });

  it.each(['http', 'https'] as const)('answers over %s a request that is not HTTP, or whose headers are too large, in the error shape', async (scheme) => {
    const port = portOf(scheme === 'http' ? base : secureBase);
    const answer = async (head: string) => {
      const { data } = await connect(scheme, port, material.cert, (s) => s.write(head));
      return { status: data.split('\r\n')[0], body: JSON.parse(data.slice(data.indexOf('\r\n\r\n') + 4)) as unknown };
    };
    expect(await answer('HELLO THERE\r\n\r\n')).toEqual({
      status: 'HTTP/1.1 400 Bad Request',
      body: { statusCode: 400, error: 'Bad Request', code: 'bad_request', message: 'the request is not valid HTTP/1.1' },
    });
    expect(await answer(`GET /api/health HTTP/1.1\r\nHost: installer\r\nX-Big: ${'x'.repeat(20_000)}\r\n\r\n`)).toEqual({
      status: 'HTTP/1.1 431 Request Header Fields Too Large',
      body: { statusCode: 431, error: 'Request Header Fields Too Large', code: 'bad_request', message: 'the request headers are too large (16 KiB at most)' },
    });
  });

  it.each(['http', 'https'] as const)('closes a kept-alive connection over %s once it has been idle for the keep-alive timeout', async (scheme) => {
    const port = portOf(scheme === 'http' ? base : secureBase);
    let answeredAt = 0;
    let answers = 0;
    const { data, closedAt } = await connect(scheme, port, material.cert, (s) => {
      const ask = () => s.write('GET /api/health HTTP/1.1\r\nHost: installer\r\n\r\n');
      s.on('data', (chunk: string) => {
        if (!chunk.includes('"status"')) return;
        answeredAt = Date.now();
        // Used again at once: still open. Then left idle.
        if (++answers === 1) setTimeout(ask, 20);
      });
      ask();
    });
    expect(answers).toBe(2);
    expect(data).toContain(`Keep-Alive: timeout=${Math.floor(KEEP_ALIVE_TIMEOUT_MS / 1000)}`);
    const idle = closedAt - answeredAt;
    expect(idle).toBeGreaterThanOrEqual(KEEP_ALIVE_TIMEOUT_MS);
    expect(idle).toBeLessThan(KEEP_ALIVE_TIMEOUT_MS + KEEP_ALIVE_BUFFER_MS + 2_000);
  });
});

describe('a connection cap on each listener', () => {
  const MAX = 4;
  let t: TestApp;
  let listeners: Listeners;
  let material: TlsMaterial;

  beforeAll(async () => {
    t = await startTestApp({ logs: null, env: { HTTP_MAX_CONNECTIONS: String(MAX), STREAMS_TOTAL: '3', STREAMS_PER_PRINCIPAL: '3' } });
    material = await generatedCertificate(mkdtempSync(path.join(tmpdir(), 'installer-bounded-')));
    listeners = await startListeners(t.app, { HOST, PORT: 0, HTTPS_PORT: 0, HSTS_MAX_AGE_SECONDS: 0 }, material, quiet);
  });
  afterAll(async () => {
    await listeners?.close();
    await t?.close();
  });

  /** A kept-alive connection that has had one answer; `ask` sends another request on it. */
  function keptAlive(scheme: 'http' | 'https', port: number) {
    const socket = scheme === 'http' ? net.connect({ host: HOST, port }) : tls.connect({ host: HOST, port, ca: material.cert, checkServerIdentity: () => undefined });
    socket.setEncoding('utf8');
    socket.on('error', () => {});
    let data = '';
    let waiting: ((answer: string) => void) | null = null;
    socket.on('data', (c: string) => {
      data += c;
      const end = data.indexOf('}');
      if (end >= 0 && waiting) {
        const answer = data.slice(0, end + 1);
        data = data.slice(end + 1);
        waiting(answer);
        waiting = null;
      }
    });
    const closed = new Promise<string>((r) => socket.once('close', () => r(data)));
    const ask = () =>
      new Promise<string>((resolve) => {
        waiting = resolve;
        socket.write('GET /api/health HTTP/1.1\r\nHost: installer\r\n\r\n');
      });
    return { socket, ask, closed };
  }

  it.each(['http', 'https'] as const)('refuses a connection past HTTP_MAX_CONNECTIONS on %s, serves the open ones, and accepts again when one closes', async (scheme) => {
    const port = portOf(scheme === 'http' ? listeners.httpAddress : listeners.httpsAddress!);
    const held = Array.from({ length: MAX }, () => keptAlive(scheme, port));
    for (const c of held) expect(await c.ask()).toMatch(/^HTTP\/1\.1 200 OK/);

    const over = keptAlive(scheme, port);
    void over.ask();
    expect(await over.closed).toBe('');

    for (const c of held) expect(await c.ask()).toMatch(/^HTTP\/1\.1 200 OK/);

    held[0]!.socket.destroy();
    await held[0]!.closed;
    const next = await eventually(async () => {
      const c = keptAlive(scheme, port);
      const answer = await Promise.race([c.ask(), c.closed.then(() => null)]);
      return answer ? c : null;
    }, 'a connection to be accepted once one has closed');
    for (const c of [...held.slice(1), next]) c.socket.destroy();
    await Promise.all([...held, next].map((c) => c.closed));
  });
});

describe('the settings', () => {
  it('stop the process with one line naming the variable when a value is bad', async () => {
    const cases: [Record<string, string>, string][] = [
      [{ STREAMS_PER_PRINCIPAL: '0' }, 'STREAMS_PER_PRINCIPAL: must be at least 1'],
      [{ STREAMS_TOTAL: 'lots' }, 'STREAMS_TOTAL: must be a whole number of streams'],
      [{ HTTP_HEADERS_TIMEOUT_MS: '20000', HTTP_REQUEST_TIMEOUT_MS: '15000' }, 'HTTP_REQUEST_TIMEOUT_MS: must be at least HTTP_HEADERS_TIMEOUT_MS: the headers are part of the request'],
    ];
    for (const [env, line] of cases) {
      const proc = runEntry('src/main.ts', { DATA_DIR: mkdtempSync(path.join(tmpdir(), 'installer-bounded-')), HOST, PORT: '0', ...env });
      expect(await proc.exited).toBe(78);
      expect(proc.output().trim().split('\n')).toEqual([`installer: configuration error: ${line}`]);
    }
  });
});

// The UI's stream follower (src/ui/src/sse.ts) told 429 by a stream cap
// (docs/adr/0040-bounded-connections.md): a follower that reconnects waits the Retry-After it was
// given, shows why, and gets in once a slot is free; one that does not reconnect shows the message.
// A real HTTP server on loopback stands for the installer; plain TypeScript, no browser.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

// Loaded by URL: the follower's module reaches the page's document through src/ui/src/api.ts, which
// the Node-only typecheck of the tests does not know (the UI has its own, with the DOM).
type FollowState = 'connecting' | 'live' | 'reconnecting' | 'ended' | 'failed';
interface SseModule {
  retryAfterMs(header: string | null): number;
  SseFollower: new (o: {
    url: string;
    reconnect: boolean;
    retryMs: number;
    isLast: (e: { event: string }) => boolean;
    onEvent: (e: { event: string }) => void;
    onState: (s: FollowState, detail?: string) => void;
  }) => { start(): unknown };
}
const { retryAfterMs, SseFollower } = (await import(new URL('../../src/ui/src/sse.ts', import.meta.url).href)) as SseModule;

const CAP_MESSAGE = 'too many open streams: the user viewer already holds 10, the most one caller may hold at once (STREAMS_PER_PRINCIPAL=10); close one, then try again';

let refusals = 0;
let asked: number[] = [];
const server = http.createServer((req, res) => {
  asked.push(Date.now());
  if (refusals > 0) {
    refusals--;
    res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '1' });
    res.end(JSON.stringify({ statusCode: 429, error: 'Too Many Requests', message: CAP_MESSAGE, code: 'rate_limited' }));
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.end('id: 1\nevent: finished\ndata: {"seq":1}\n\n');
});
let base: string;
beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // The page's session storage, where the signed-in token lives.
  if (!('sessionStorage' in globalThis) || !globalThis.sessionStorage) {
    const items = new Map<string, string>();
    Object.defineProperty(globalThis, 'sessionStorage', {
      configurable: true,
      value: { getItem: (k: string) => items.get(k) ?? null, setItem: (k: string, v: string) => void items.set(k, v), removeItem: (k: string) => void items.delete(k) },
    });
  }
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

function follow(reconnect: boolean) {
  const states: { s: FollowState; detail?: string }[] = [];
  const events: string[] = [];
  const done = new Promise<void>((resolve) => {
    new SseFollower({
      url: `${base}/api/deployment/jobs/j/logs`,
      reconnect,
      retryMs: 10,
      isLast: (e) => e.event === 'finished',
      onEvent: (e) => events.push(e.event),
      onState: (s, detail) => {
        states.push({ s, ...(detail ? { detail } : {}) });
        if (s === 'ended' || s === 'failed') resolve();
      },
    }).start();
  });
  return { states, events, done };
}

describe('a stream follower refused by a stream cap', () => {
  it('reconnects after the Retry-After, saying why, and follows once let in', async () => {
    refusals = 1;
    asked = [];
    const f = follow(true);
    await f.done;
    expect(f.states).toEqual([{ s: 'connecting' }, { s: 'reconnecting', detail: CAP_MESSAGE }, { s: 'reconnecting' }, { s: 'live' }, { s: 'ended' }]);
    expect(f.events).toEqual(['finished']);
    expect(asked).toHaveLength(2);
    expect(asked[1]! - asked[0]!).toBeGreaterThanOrEqual(950);
  });

  it('without reconnecting, fails with the message naming the cap', async () => {
    refusals = 1;
    const f = follow(false);
    await f.done;
    expect(f.states.at(-1)).toEqual({ s: 'failed', detail: CAP_MESSAGE });
  });

  it('reads Retry-After as whole seconds, from 1 s to a minute, 5 s when it is absent or a date', () => {
    expect([retryAfterMs('1'), retryAfterMs(' 12 '), retryAfterMs('0'), retryAfterMs('3600'), retryAfterMs(null), retryAfterMs('Wed, 21 Oct 2015 07:28:00 GMT')]).toEqual([1000, 12000, 1000, 60000, 5000, 5000]);
  });
});

// The backend's ports bound before its code has loaded (src/early-listeners.ts, as the image's loader
// binds them): requests sent while the backend starts are held, and answered by the real listeners
// (src/listeners.ts, the test app on Postgres) once they take the sockets over; a port the settings
// do not name is closed; a port that cannot be bound is left to the backend's own listen.
import { afterEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { freePort } from '../helpers/shared/ports.ts';
import { pinnedHttps, plainHttp, type Answer } from '../helpers/shared/https.ts';
import { listenEarly, releaseEarly, takeEarly } from '../../src/early-listeners.ts';
import { startListeners, type Listeners } from '../../src/listeners.ts';
import { generatedCertificate } from '../../src/adapters/tls.ts';

const HOST = '127.0.0.1';
const quiet = pino({ enabled: false });

/** Whether a TCP connection to the port is accepted (true) or refused (false). */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: HOST, port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** A request's answer, and whether it had come before `settledBy` was asked. */
function track(answer: Promise<Answer>): { answer: Promise<Answer>; settled: () => boolean } {
  let done = false;
  void answer.then(
    () => (done = true),
    () => (done = true),
  );
  return { answer, settled: () => done };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let t: TestApp | undefined;
let listeners: Listeners | undefined;
const dirs: string[] = [];
afterEach(async () => {
  releaseEarly();
  await listeners?.close();
  listeners = undefined;
  await t?.close();
  t = undefined;
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('ports bound before the backend has loaded', () => {
  it('holds the requests sent meanwhile, on both ports, and the listeners answer them on the same sockets', async () => {
    const [httpPort, httpsPort] = [await freePort(), await freePort()];
    await listenEarly({ HOST, PORT: String(httpPort), HTTPS_PORT: String(httpsPort) });
    const dir = mkdtempSync(path.join(tmpdir(), 'installer-early-'));
    dirs.push(dir);
    const tls = await generatedCertificate(dir);

    // Sent while the backend is still loading: accepted, and nothing answers them yet.
    const health = track(plainHttp(`http://${HOST}:${httpPort}/api/health`));
    const secure = track(pinnedHttps(`https://${HOST}:${httpsPort}/api/health`, tls.cert));
    const plainOnHttps = track(plainHttp(`http://${HOST}:${httpsPort}/api/health`));
    t = await startTestApp();
    await sleep(200);
    expect([health.settled(), secure.settled(), plainOnHttps.settled()]).toEqual([false, false, false]);

    listeners = await startListeners(t.app, { HOST, PORT: httpPort, HTTPS_PORT: httpsPort, HSTS_MAX_AGE_SECONDS: 0 }, tls, quiet);
    expect(listeners.httpAddress).toBe(`http://${HOST}:${httpPort}`);
    expect(listeners.httpsAddress).toBe(`https://${HOST}:${httpsPort}`);

    const held = await health.answer;
    expect(held.status).toBe(200);
    expect(JSON.parse(held.body)).toMatchObject({ status: 'ok', db: 'up' });
    const heldSecure = await secure.answer;
    expect(heldSecure.status).toBe(200);
    expect(heldSecure.peerFingerprint256).toBe(tls.fingerprint256);
    // Plain HTTP held on the HTTPS port is told to use HTTPS, as it is once the backend runs.
    const heldPlain = await plainOnHttps.answer;
    expect(heldPlain.status).toBe(400);
    expect(JSON.parse(heldPlain.body)).toMatchObject({ code: 'https_required' });

    // Later requests reach the same listeners.
    expect((await plainHttp(`http://${HOST}:${httpPort}/api/health`)).status).toBe(200);
    expect((await pinnedHttps(`https://${HOST}:${httpsPort}/api/health`, tls.cert)).status).toBe(200);
  });

  it('closes a port the settings do not name, with what it held, and the backend binds its own', async () => {
    const [early, other] = [await freePort(), await freePort()];
    await listenEarly({ HOST, PORT: String(early) });
    const stranded = track(plainHttp(`http://${HOST}:${early}/api/health`));
    t = await startTestApp();
    listeners = await startListeners(t.app, { HOST, PORT: other, HTTPS_PORT: undefined, HSTS_MAX_AGE_SECONDS: 0 }, null, quiet);

    expect(listeners.httpAddress).toBe(`http://${HOST}:${other}`);
    expect((await plainHttp(`http://${HOST}:${other}/api/health`)).status).toBe(200);
    await expect(stranded.answer).rejects.toThrow();
    expect(await accepts(early)).toBe(false);
  });

  it('leaves a port it cannot bind, a port setting the backend would refuse, and a host name to the backend', async () => {
    const taken = net.createServer();
    await new Promise<void>((r) => taken.listen(0, HOST, r));
    const port = (taken.address() as net.AddressInfo).port;
    try {
      await listenEarly({ HOST, PORT: String(port) });
      expect(takeEarly(HOST, port)).toBeUndefined();
    } finally {
      await new Promise((r) => taken.close(r));
    }
    const free = await freePort();
    await listenEarly({ HOST, PORT: `${free}x`, HTTPS_PORT: '0' });
    expect(await accepts(free)).toBe(false);
    // A host name is not looked up before the backend has loaded: its own listen resolves it.
    await listenEarly({ HOST: 'localhost', PORT: String(free) });
    expect(takeEarly('localhost', free)).toBeUndefined();
    expect(await accepts(free)).toBe(false);
  });
});

// Plain HTTP kept to the host (PLAIN_HTTP_FROM=host, the image's setting; docs/adr/0020-https-listeners.md):
// on real sockets, plain HTTP answers the loopback, is refused on every other address, and on the
// default route's address (where a container's published port arrives) answers only the gateway,
// closing anyone else's connection unread; HTTPS answers on every address. The default route is
// this machine's own, read from /proc/net/route as the backend reads it in its container. With the
// operator's certificate, the control plane (asking for installer-backend) is shown the generated one.
import { afterEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import tlsModule, { type TLSSocket } from 'node:tls';
import { networkInterfaces, tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { generate } from 'selfsigned';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { freePort } from '../helpers/shared/ports.ts';
import { plainHttp } from '../helpers/shared/https.ts';
import { defaultRoute, listenEarly, plainHttpHosts, releaseEarly, takeEarly } from '../../src/early-listeners.ts';
import { startListeners, type Listeners } from '../../src/listeners.ts';
import { generatedCertificate, loadTls } from '../../src/adapters/tls.ts';

const quiet = pino({ enabled: false });

/** What a plain HTTP request carrying the service token gets: the answer's bytes, or how the connection ended. */
function sendWithToken(host: string, port: number): Promise<{ refused: boolean; answer: string }> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    let answer = '';
    socket.on('connect', () => socket.write(`GET /api/deployment/status HTTP/1.1\r\nHost: installer-backend\r\nAuthorization: Bearer ${TEST_SECRETS.SERVICE_TOKEN}\r\nConnection: close\r\n\r\n`));
    socket.on('data', (d: Buffer) => (answer += d.toString('latin1')));
    socket.on('error', (err: NodeJS.ErrnoException) => resolve({ refused: err.code === 'ECONNREFUSED', answer }));
    socket.on('close', () => resolve({ refused: false, answer }));
    socket.setTimeout(5_000, () => socket.destroy());
  });
}

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

const route = defaultRoute();

describe('the default route, as the backend reads it', () => {
  it('parses the kernel table of a container on two networks: the interface and gateway of 0.0.0.0/0', () => {
    // /proc/net/route in a container on two bridge networks (measured), the first carrying the default route.
    const table = [
      'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT',
      'eth0\t00000000\t010014AC\t0003\t0\t0\t0\t00000000\t0\t0\t0',
      'eth0\t000014AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0',
      'eth1\t000015AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0',
    ].join('\n');
    const interfaces = { eth0: [{ address: '172.20.0.2', family: 'IPv4', internal: false }], eth1: [{ address: '172.21.0.2', family: 'IPv4', internal: false }] };
    expect(defaultRoute(table, interfaces)).toEqual({ address: '172.20.0.2', gateway: '172.20.0.1' });
    expect(defaultRoute(table.split('\n').filter((l) => !l.includes('010014AC')).join('\n'), interfaces)).toBeNull();
    expect(plainHttpHosts('0.0.0.0', 'host', { address: '172.20.0.2', gateway: '172.20.0.1' })).toEqual({ hosts: ['127.0.0.1', '172.20.0.2'], gateway: '172.20.0.1' });
    expect(plainHttpHosts('0.0.0.0', 'anywhere', { address: '172.20.0.2', gateway: '172.20.0.1' })).toEqual({ hosts: ['0.0.0.0'], gateway: null });
    expect(plainHttpHosts('127.0.0.1', 'host', { address: '172.20.0.2', gateway: '172.20.0.1' })).toEqual({ hosts: ['127.0.0.1'], gateway: null });
    expect(plainHttpHosts('0.0.0.0', 'host', null)).toEqual({ hosts: ['127.0.0.1'], gateway: null });
  });

  it("finds this machine's, an address of one of its interfaces", () => {
    expect(route, 'this machine has no IPv4 default route: the tests below need one').not.toBeNull();
    const own = Object.values(networkInterfaces()).flat().map((a) => a?.address);
    expect(own).toContain(route!.address);
  });
});

describe('plain HTTP from the host only (PLAIN_HTTP_FROM=host, HOST=0.0.0.0)', () => {
  it('answers the loopback, refuses other addresses, closes unread what reaches the published address from anyone but the gateway; HTTPS answers everywhere', async () => {
    t = await startTestApp();
    const dir = mkdtempSync(path.join(tmpdir(), 'installer-plain-'));
    dirs.push(dir);
    const tls = await generatedCertificate(dir);
    const [port, httpsPort] = [await freePort(), await freePort()];
    // As the image's loader binds them: the loopback and the default route's address, not 0.0.0.0.
    await listenEarly({ HOST: '0.0.0.0', PORT: String(port), HTTPS_PORT: String(httpsPort), PLAIN_HTTP_FROM: 'host' });
    expect(takeEarly('0.0.0.0', port)).toBeUndefined();
    listeners = await startListeners(t.app, { HOST: '0.0.0.0', PORT: port, HTTPS_PORT: httpsPort, HSTS_MAX_AGE_SECONDS: 0, PLAIN_HTTP_FROM: 'host' }, tls, quiet);
    expect(listeners.httpAddress).toBe(`http://127.0.0.1:${port}`);

    expect((await plainHttp(`http://127.0.0.1:${port}/api/health`)).status).toBe(200);
    // Another address of this machine: nothing listens there, the token is never sent.
    expect(await sendWithToken('127.0.0.2', port)).toEqual({ refused: true, answer: '' });
    // The default route's address, from this machine (not its gateway): accepted by the kernel, closed unread.
    expect(await sendWithToken(route!.address, port)).toEqual({ refused: false, answer: '' });
    // HTTPS on every address, the token with it, as the control plane calls installer-backend on `platform`.
    const secure = await new Promise<{ status: number; fingerprint: string }>((resolve, reject) => {
      const req = https.request(
        { host: route!.address, port: httpsPort, servername: 'installer-backend', ca: tls.cert, path: '/api/deployment/status', headers: { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}` }, agent: false },
        (res) => {
          res.resume();
          resolve({ status: res.statusCode ?? 0, fingerprint: (res.socket as TLSSocket).getPeerCertificate().fingerprint256 });
        },
      );
      req.on('error', reject);
      req.end();
    });
    expect(secure).toEqual({ status: 200, fingerprint: tls.fingerprint256 });
  });

  it("answers the gateway on the published address (here this machine plays its own gateway), with the app's routes", async () => {
    t = await startTestApp();
    const port = await freePort();
    listeners = await startListeners(t.app, { HOST: '0.0.0.0', PORT: port, HTTPS_PORT: undefined, HSTS_MAX_AGE_SECONDS: 0, PLAIN_HTTP_FROM: 'host' }, null, quiet, {
      route: { address: route!.address, gateway: route!.address },
    });
    const health = await plainHttp(`http://${route!.address}:${port}/api/health`);
    expect(health.status).toBe(200);
    expect(JSON.parse(health.body)).toMatchObject({ status: 'ok' });
    expect((await sendWithToken('127.0.0.2', port)).refused).toBe(true);
  });

  it('keeps PLAIN_HTTP_FROM=anywhere as HOST says: every address of 0.0.0.0', async () => {
    t = await startTestApp();
    const port = await freePort();
    listeners = await startListeners(t.app, { HOST: '0.0.0.0', PORT: port, HTTPS_PORT: undefined, HSTS_MAX_AGE_SECONDS: 0, PLAIN_HTTP_FROM: 'anywhere' }, null, quiet);
    expect((await plainHttp(`http://127.0.0.2:${port}/api/health`)).status).toBe(200);
  });
});

/** The fingerprint of the certificate the HTTPS listener shows a client asking for `servername`. */
function shownTo(port: number, servername: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tlsModule.connect({ host: '127.0.0.1', port, servername, rejectUnauthorized: false }, () => {
      resolve(socket.getPeerX509Certificate()!.fingerprint256);
      socket.destroy();
    });
    socket.on('error', reject);
  });
}

describe("the control plane's certificate beside the operator's", () => {
  it('shows the generated certificate to a client asking for installer-backend, the operator\'s to everyone else', async () => {
    t = await startTestApp();
    const dir = mkdtempSync(path.join(tmpdir(), 'installer-sni-'));
    dirs.push(dir);
    const made = await generate([{ name: 'commonName', value: 'installer.example.test' }], { keySize: 2048, algorithm: 'sha256' });
    writeFileSync(path.join(dir, 'cert.pem'), made.cert);
    writeFileSync(path.join(dir, 'key.pem'), made.private);
    const tls = (await loadTls({ HTTPS_PORT: 0, TLS_CERT_FILE: path.join(dir, 'cert.pem'), TLS_KEY_FILE: path.join(dir, 'key.pem'), SECRETS_DIR: path.join(dir, 'secrets') }))!;
    expect(tls.source).toBe('operator');
    const own = await generatedCertificate(path.join(dir, 'secrets'));
    expect(tls.platform?.fingerprint256).toBe(own.fingerprint256);
    expect(own.fingerprint256).not.toBe(tls.fingerprint256);

    listeners = await startListeners(t.app, { HOST: '127.0.0.1', PORT: 0, HTTPS_PORT: 0, HSTS_MAX_AGE_SECONDS: 0, PLATFORM_INSTALLER_URL: 'https://installer-backend:8443' }, tls, quiet);
    const port = Number(new URL(listeners.httpsAddress!).port);
    expect(await shownTo(port, 'installer-backend')).toBe(own.fingerprint256);
    expect(await shownTo(port, 'installer.example.test')).toBe(tls.fingerprint256);
    expect(await shownTo(port, 'localhost')).toBe(tls.fingerprint256);
  });
});

// The installer's listeners (docs/adr/0020-https-listeners.md): plain HTTP on HOST:PORT, for
// loopback and the container healthcheck (with PLAIN_HTTP_FROM=host: the loopback and the host
// through the published port, nothing on another network); and, with HTTPS_PORT, HTTPS on
// HOST:HTTPS_PORT, the port the compose files publish on the host and the control plane's on `platform`.
// Plain HTTP that reaches the HTTPS port is answered there, never routed: a browser's page load is
// redirected to https:// on the same host and port, anything else gets a 400 naming the URL to use.
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tlsModule from 'node:tls';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { Settings } from './config.ts';
import { platformCertificate, type TlsMaterial } from './adapters/tls.ts';
import { plainHttpHosts, releaseEarly, takeEarly, type EarlyListener } from './early-listeners.ts';
import { answerClientError, limitConnections, serverTimeouts } from './api/connection-limits.ts';

/** The first byte of every TLS connection: a handshake record. */
const TLS_HANDSHAKE = 0x16;
/** A connection that sends nothing is dropped after this long. */
const FIRST_BYTE_TIMEOUT_MS = 10_000;
/**
 * How long a stopping backend lets the responses in flight finish before it ends their connections
 * (docs/adr/0036-bounded-drain.md). The API answers in milliseconds; what is still being written
 * after this is a client that stopped reading, and a self-update's switch waits for this process.
 */
export const DRAIN_MS = 1_000;

/**
 * Closes the app: new connections are refused at once, idle ones closed, and connections whose
 * response is still being written after DRAIN_MS are ended, on the app's server and on `others`.
 */
async function closeWithin(app: FastifyInstance, others: http.Server[] = []): Promise<void> {
  const closing = app.close();
  const cut = setTimeout(() => {
    app.server.closeAllConnections();
    for (const server of others) server.closeAllConnections();
  }, DRAIN_MS);
  try {
    await closing;
  } finally {
    clearTimeout(cut);
  }
}

export interface Listeners {
  /** `http://host:port` of the plain HTTP listener. */
  httpAddress: string;
  /** `https://host:port` of the HTTPS listener; null without HTTPS_PORT. */
  httpsAddress: string | null;
  /** Stops accepting on both, closes the app (DRAIN_MS for responses in flight), then ends what is left of the HTTPS connections. */
  close(): Promise<void>;
}

/** The Strict-Transport-Security value for this certificate: only for the operator's own, never for a generated one. */
export function hstsHeader(tls: Pick<TlsMaterial, 'source'>, maxAgeSeconds: number): string | null {
  return tls.source === 'operator' && maxAgeSeconds > 0 ? `max-age=${maxAgeSeconds}` : null;
}

const HOST_HEADER = /^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?$/;

/** Answers plain HTTP that reached the HTTPS port. */
export function answerPlainHttp(req: http.IncomingMessage, res: http.ServerResponse): void {
  const host = req.headers.host;
  const url = req.url ?? '/';
  const target = host && HOST_HEADER.test(host) && url.startsWith('/') ? `https://${host}${url}` : null;
  res.setHeader('connection', 'close');
  // A page load is redirected. A call of the API is refused: its token or password has already
  // crossed the network in clear, and following a redirect would hide that from the caller.
  if (target && (req.method === 'GET' || req.method === 'HEAD') && !url.startsWith('/api/') && url !== '/api') {
    res.writeHead(301, { location: target, 'content-type': 'text/plain; charset=utf-8' });
    res.end(req.method === 'HEAD' ? undefined : `This port speaks HTTPS: ${target}\n`);
    return;
  }
  const message = `this port speaks HTTPS, not plain HTTP: use ${target ? new URL(target).origin : 'https://'}`;
  res.writeHead(400, { 'content-type': 'application/json; charset=utf-8' });
  res.end(JSON.stringify({ statusCode: 400, error: 'Bad Request', message, code: 'https_required' }));
}

/**
 * Options of `listen` that take over the socket of a port bound early (src/early-listeners.ts), or
 * bind one. Node's `server.listen(handle)` takes "anything with an underlying _handle member": the
 * server then accepts on that socket, and nothing is refused while the socket passes over.
 */
function listenOn(host: string, port: number, early: EarlyListener | undefined): { host: string; port: number; _handle?: unknown } {
  return early ? { host, port, _handle: (early.server as unknown as { _handle: unknown })._handle } : { host, port };
}

/** Gives `server` the connections a port bound early held unread, now that it listens on their socket. */
function handOver(early: EarlyListener | undefined, server: net.Server): void {
  for (const socket of early?.held.splice(0) ?? []) {
    if (socket.destroyed) continue;
    server.emit('connection', socket);
    socket.resume();
  }
}

/**
 * Plain HTTP on `host` (the address the engine delivers the published port to) for connections from
 * `gateway` (the host) only: any other peer's connection is closed before a byte of it is read.
 * What is accepted is the app's own server's connection, with its timeouts and limits.
 */
async function listenForHost(app: FastifyInstance, host: string, port: number, gateway: string | null, logger: Logger): Promise<net.Server> {
  const side = net.createServer({ pauseOnConnect: true }, (socket) => {
    if (socket.remoteAddress !== gateway) {
      socket.destroy();
      return;
    }
    app.server.emit('connection', socket);
    socket.resume();
  });
  const early = takeEarly(host, port);
  await new Promise<void>((resolve, reject) => {
    side.once('error', reject);
    side.listen(listenOn(host, port, early), () => {
      side.off('error', reject);
      side.on('error', (err) => logger.error({ err }, 'plain HTTP listener failed'));
      resolve();
    });
  });
  handOver(early, side);
  return side;
}

function urlOf(scheme: 'http' | 'https', address: AddressInfo): string {
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `${scheme}://${host}:${address.port}`;
}

/**
 * Serves `app` on HOST:PORT over HTTP and, when `tls` is given, on HOST:HTTPS_PORT over HTTPS.
 * Both reach the same routes (Fastify's `routing`), so every hook, limit and log line is shared.
 */
export async function startListeners(
  app: FastifyInstance,
  settings: Pick<Settings, 'HOST' | 'PORT' | 'HTTPS_PORT' | 'HSTS_MAX_AGE_SECONDS'> & Partial<Pick<Settings, 'PLAIN_HTTP_FROM' | 'PLATFORM_INSTALLER_URL'>>,
  tls: TlsMaterial | null,
  logger: Logger,
  opts: { route?: { address: string; gateway: string } | null } = {},
): Promise<Listeners> {
  const plainHosts = plainHttpHosts(settings.HOST, settings.PLAIN_HTTP_FROM, opts.route);
  const [first, ...others] = plainHosts.hosts as [string, ...string[]];
  const earlyHttp = takeEarly(first, settings.PORT);
  const httpAddress = await app.listen(listenOn(first, settings.PORT, earlyHttp));
  handOver(earlyHttp, app.server);
  const sides = await Promise.all(others.map((host) => listenForHost(app, host, (app.server.address() as AddressInfo).port, plainHosts.gateway, logger)));
  if (others.length) logger.info({ plainHttp: [httpAddress, ...sides.map((s) => urlOf('http', s.address() as AddressInfo))], answers: plainHosts.gateway }, 'plain HTTP on the loopback and, for the host only, the published port');
  const closeSides = () => Promise.all(sides.map((side) => new Promise<void>((resolve) => side.close(() => resolve()))));
  if (!tls || settings.HTTPS_PORT === undefined) {
    releaseEarly();
    return {
      httpAddress,
      httpsAddress: null,
      async close() {
        const stopped = closeSides();
        await closeWithin(app);
        await stopped;
      },
    };
  }

  const hsts = hstsHeader(tls, settings.HSTS_MAX_AGE_SECONDS);
  // The control plane asks for the installer's name on `platform` and is shown the certificate whose
  // fingerprint the platform's .env holds (the generated one, when the operator's serves the rest).
  const platformName = settings.PLATFORM_INSTALLER_URL ? new URL(settings.PLATFORM_INSTALLER_URL).hostname : null;
  const own = platformCertificate(tls);
  const forPlatform = own === tls ? null : tlsModule.createSecureContext({ key: own.key, cert: own.cert, minVersion: 'TLSv1.2' });
  const sni = forPlatform && platformName ? { SNICallback: (name: string, cb: (err: Error | null, ctx?: tlsModule.SecureContext) => void) => cb(null, name === platformName ? forPlatform : undefined) } : {};
  // The same timeouts and connection cap as the plain listener the app made
  // (docs/adr/0040-bounded-connections.md); a handshake gets as long as a request's headers.
  const limits = app.settings;
  const timeouts = serverTimeouts(limits);
  const secure = https.createServer({ key: tls.key, cert: tls.cert, minVersion: 'TLSv1.2', ...sni, ...timeouts, handshakeTimeout: limits.HTTP_HEADERS_TIMEOUT_MS }, (req, res) => {
    if (hsts) res.setHeader('strict-transport-security', hsts);
    app.routing(req, res);
  });
  secure.on('tlsClientError', (err) => logger.debug({ err: { message: err.message, code: (err as NodeJS.ErrnoException).code } }, 'TLS handshake failed'));
  secure.on('clientError', answerClientError(limits));
  const plain = http.createServer({ requestTimeout: FIRST_BYTE_TIMEOUT_MS, headersTimeout: FIRST_BYTE_TIMEOUT_MS, connectionsCheckingInterval: timeouts.connectionsCheckingInterval }, answerPlainHttp);
  plain.keepAliveTimeout = 0;
  // Neither server listens itself (the front below hands them its connections), and Node starts
  // checking the header and request timeouts when a server starts listening: start it here, or a
  // client that dribbles its headers would be held forever.
  secure.emit('listening');
  plain.emit('listening');

  // One port, two protocols: the first byte tells a TLS handshake from plain HTTP.
  const open = new Set<net.Socket>();
  const front = net.createServer((socket) => {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
    socket.on('error', () => {}); // a reset before the first byte is nobody's error
    socket.setTimeout(FIRST_BYTE_TIMEOUT_MS, () => socket.destroy());
    socket.once('data', (first: Buffer) => {
      socket.pause();
      socket.setTimeout(0);
      socket.unshift(first);
      (first[0] === TLS_HANDSHAKE ? secure : plain).emit('connection', socket);
      process.nextTick(() => socket.resume());
    });
  });
  limitConnections(front, limits.HTTP_MAX_CONNECTIONS, logger, 'https');
  const httpsPort = settings.HTTPS_PORT;
  const earlyHttps = takeEarly(settings.HOST, httpsPort);
  await new Promise<void>((resolve, reject) => {
    front.once('error', reject);
    front.listen(listenOn(settings.HOST, httpsPort, earlyHttps), () => {
      front.off('error', reject);
      front.on('error', (err) => logger.error({ err }, 'HTTPS listener failed'));
      resolve();
    });
  });
  handOver(earlyHttps, front);
  releaseEarly();
  const httpsAddress = urlOf('https', front.address() as AddressInfo);

  return {
    httpAddress,
    httpsAddress,
    async close() {
      const stopped = Promise.all([new Promise<void>((resolve) => front.close(() => resolve())), closeSides()]);
      secure.closeIdleConnections();
      await closeWithin(app, [secure]);
      // What the app could not end itself (an open stream, a handshake never finished) ends now.
      for (const socket of open) socket.destroy();
      // Stops their timeout checks.
      secure.close();
      plain.close();
      await stopped;
    },
  };
}

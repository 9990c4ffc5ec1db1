// Bounded connections (docs/adr/0040-bounded-connections.md): how long a client may take to send
// its request, how long an idle kept-alive connection is kept, and how many connections a
// listener holds. The same values for the plain HTTP listener (Fastify's server) and the HTTPS one
// (src/listeners.ts).
//
// Node's requestTimeout bounds receiving the request only: once a request has been read whole, the
// connection leaves the list the timeouts are checked on, so a response being written (an event
// stream, a download, an answer that waits for a self-update's preflight) is never cut by it.
import type { Server, Socket } from 'node:net';
import { STATUS_CODES } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { Settings } from '../config.ts';
import { errorBody, type ErrorBody } from './errors.ts';

export type ConnectionSettings = Pick<Settings, 'HTTP_HEADERS_TIMEOUT_MS' | 'HTTP_REQUEST_TIMEOUT_MS' | 'HTTP_KEEP_ALIVE_TIMEOUT_MS' | 'HTTP_MAX_CONNECTIONS'>;

/**
 * How often the server looks for connections over their header or request timeout. Node checks
 * every 30 s by default, so a header timeout of 10 s would really be up to 40 s; a quarter of the
 * shorter timeout, at most a second, keeps the lateness small for the cost of a walk over at most
 * HTTP_MAX_CONNECTIONS entries.
 */
export function checkEveryMs(s: Pick<Settings, 'HTTP_HEADERS_TIMEOUT_MS' | 'HTTP_REQUEST_TIMEOUT_MS'>): number {
  return Math.max(25, Math.min(1_000, Math.floor(Math.min(s.HTTP_HEADERS_TIMEOUT_MS, s.HTTP_REQUEST_TIMEOUT_MS) / 4)));
}

/** Node's server options for these settings (http.createServer / https.createServer). */
export function serverTimeouts(s: ConnectionSettings) {
  return {
    headersTimeout: s.HTTP_HEADERS_TIMEOUT_MS,
    requestTimeout: s.HTTP_REQUEST_TIMEOUT_MS,
    keepAliveTimeout: s.HTTP_KEEP_ALIVE_TIMEOUT_MS,
    connectionsCheckingInterval: checkEveryMs(s),
  };
}

/** The answer to a connection whose request Node could not take: too slow, headers too large, not HTTP. */
export function clientErrorBody(code: string | undefined, s: Pick<Settings, 'HTTP_HEADERS_TIMEOUT_MS' | 'HTTP_REQUEST_TIMEOUT_MS'>): ErrorBody {
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return errorBody(
      408,
      `the request did not arrive in time: its headers must come within ${s.HTTP_HEADERS_TIMEOUT_MS} ms (HTTP_HEADERS_TIMEOUT_MS), all of it within ${s.HTTP_REQUEST_TIMEOUT_MS} ms (HTTP_REQUEST_TIMEOUT_MS)`,
      'request_timeout',
    );
  }
  if (code === 'HPE_HEADER_OVERFLOW') return errorBody(431, 'the request headers are too large (16 KiB at most)', 'bad_request');
  return errorBody(400, 'the request is not valid HTTP/1.1', 'bad_request');
}

/**
 * Node's 'clientError' handler for both listeners: the answer in the project's error shape, then the
 * connection closed (Node's own answer has no body; Fastify's has no `code`, and over TLS is cut
 * before it is sent). A reset connection gets nothing.
 */
export function answerClientError(s: Pick<Settings, 'HTTP_HEADERS_TIMEOUT_MS' | 'HTTP_REQUEST_TIMEOUT_MS'>) {
  return (err: NodeJS.ErrnoException, socket: Socket): void => {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    const body = clientErrorBody(err.code, s);
    const json = JSON.stringify(body);
    // Ended, not destroyed: over TLS the answer is still being encrypted when write returns. A
    // client that does not take it is cut a second later.
    socket.end(`HTTP/1.1 ${body.statusCode} ${STATUS_CODES[body.statusCode]}\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`);
    setTimeout(() => socket.destroy(), 1_000).unref();
  };
}

/** Fastify's options for the server it makes (the plain HTTP listener). */
export function fastifyConnectionOptions(s: ConnectionSettings) {
  const { headersTimeout, connectionsCheckingInterval, keepAliveTimeout, requestTimeout } = serverTimeouts(s);
  return { keepAliveTimeout, requestTimeout, http: { headersTimeout, connectionsCheckingInterval }, clientErrorHandler: answerClientError(s) };
}

/** How often a listener that keeps refusing connections says so. */
const DROP_LOG_EVERY_MS = 60_000;

/**
 * Caps the connections `server` holds at once: Node closes each one past the cap as soon as it is
 * accepted, and the connections already open are served as before. Refusals are logged once a
 * minute at most, with their count, so a flood does not become a flood of log lines.
 */
export function limitConnections(server: Server, max: number, log: FastifyBaseLogger, listener: string): void {
  server.maxConnections = max;
  let dropped = 0;
  let loggedAt = 0;
  server.on('drop', () => {
    dropped++;
    const now = Date.now();
    if (now - loggedAt < DROP_LOG_EVERY_MS) return;
    loggedAt = now;
    log.warn({ listener, maxConnections: max, refused: dropped }, 'refused connections over HTTP_MAX_CONNECTIONS');
    dropped = 0;
  });
}

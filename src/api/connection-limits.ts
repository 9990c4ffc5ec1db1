// Bounded connections (docs/adr/0040-bounded-connections.md): how long a client may take to send
// its request, how long an idle kept-alive connection is kept, and how many connections a
// listener holds. The same values for the plain HTTP listener (Fastify's server) and the HTTPS one
// (src/listeners.ts).
//
// Node's requestTimeout bounds receiving the request only: once a request has been read whole, the
// connection leaves the list the timeouts are checked on, so a response being written (an event
// stream, a download, an answer that waits for a self-update's preflight) is never cut by it.
import type { Server } from 'node:net';
import type { FastifyBaseLogger } from 'fastify';
import type { Settings } from '../config.ts';

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

/** Fastify's options for the server it makes (the plain HTTP listener). */
export function fastifyConnectionOptions(s: ConnectionSettings) {
  const { headersTimeout, connectionsCheckingInterval, keepAliveTimeout, requestTimeout } = serverTimeouts(s);
  return { keepAliveTimeout, requestTimeout, http: { headersTimeout, connectionsCheckingInterval } };
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

// The backend's ports, bound before its code has loaded (docs/adr/0038-ports-bound-before-the-start.md).
// The image's loader (src/bundle/start.ts) binds HOST:PORT and HOST:HTTPS_PORT first, in a few
// milliseconds of the process's start; connections made while the rest of the backend loads are
// accepted by the kernel and held unread, and once the app is built its listeners take the sockets
// over with those connections (src/listeners.ts). A client asking while a self-update's new backend
// starts is answered when it is ready, instead of being refused until it listens.
//
// The loader and the bundle are separate scripts, so the sockets pass between them through one
// process-wide registry (a global symbol). Node's built-ins come from process.getBuiltinModule: the
// loader imports this module before anything else, and an import of node:net would cost it more
// than the bind (src/bundle/start.ts says why).
import type { Server, Socket } from 'node:net';

/** HOST's and PORT's defaults, shared with src/config.ts so that both bind the same address. */
export const DEFAULT_HOST = '0.0.0.0';
export const DEFAULT_PORT = 8080;

/**
 * Connections held unread at most, per port, while the backend starts; those beyond are closed at
 * once, as a port nobody listens on would refuse them. Node's default listen backlog.
 */
export const EARLY_CONNECTIONS_MAX = 511;

/** A port bound early: its listening server, and the connections it accepted and holds unread. */
export interface EarlyListener {
  readonly server: Server;
  readonly held: Socket[];
}

const REGISTRY = Symbol.for('installer.early-listeners');
type Registry = Map<string, EarlyListener>;
const keyOf = (host: string, port: number) => `${host}|${port}`;

function registry(): Registry {
  const g = globalThis as { [REGISTRY]?: Registry };
  return (g[REGISTRY] ??= new Map());
}

/** A port number as src/config.ts reads one (a whole number), or undefined for anything else and for 0 (a free port, which nothing could know before the app). */
function portOf(value: string | undefined, fallback: number | undefined): number | undefined {
  if (value === undefined || value === '') return fallback;
  if (!/^\d{1,5}$/.test(value.trim())) return undefined;
  const port = Number(value);
  return port >= 1 && port <= 65535 ? port : undefined;
}

/**
 * Binds HOST:PORT and, when set, HOST:HTTPS_PORT, as `env` names them, when HOST is an IP address. A
 * port that cannot be bound (taken, or a setting src/config.ts would refuse) and a HOST that is a name
 * are left alone: the backend's own listen then binds them, or fails with its error as it did before.
 */
export async function listenEarly(env: NodeJS.ProcessEnv): Promise<void> {
  const host = env.HOST === undefined || env.HOST === '' ? DEFAULT_HOST : env.HOST;
  const { createServer, isIP } = process.getBuiltinModule('node:net');
  // An address only: a name would be looked up before anything else of the backend ran (a slow or
  // failing resolver would hold its whole start), and may stand for several addresses.
  if (!isIP(host)) return;
  const ports = [portOf(env.PORT, DEFAULT_PORT), portOf(env.HTTPS_PORT, undefined)];
  await Promise.all(
    [...new Set(ports.filter((p): p is number => p !== undefined))].map(
      (port) =>
        new Promise<void>((resolve) => {
          const held: Socket[] = [];
          // Paused: nothing of a connection is read here, so whoever takes it over reads it whole.
          const server = createServer({ pauseOnConnect: true }, (socket) => {
            if (held.length >= EARLY_CONNECTIONS_MAX) {
              socket.destroy();
              return;
            }
            held.push(socket);
            socket.on('error', () => {}); // a client that gave up before the backend was ready is nobody's error
          });
          server.once('error', () => resolve());
          server.listen({ host, port }, () => {
            registry().set(keyOf(host, port), { server, held });
            resolve();
          });
        }),
    ),
  );
}

/** The port bound early for exactly this host and port, handed over once: the caller listens on its server's socket. */
export function takeEarly(host: string, port: number): EarlyListener | undefined {
  const key = keyOf(host, port);
  const early = registry().get(key);
  registry().delete(key);
  return early;
}

/** Closes the ports bound early that nobody took, with the connections they held. */
export function releaseEarly(): void {
  for (const [key, { server, held }] of registry()) {
    registry().delete(key);
    server.close();
    for (const socket of held) socket.destroy();
  }
}

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
export const DEFAULT_HOST = '127.0.0.1';
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

/**
 * The default route of this network namespace, from Linux's /proc/net/route: the IPv4 address of its
 * interface and its gateway. In a container on bridge networks that interface is the network the
 * engine delivers the container's published ports through, and the gateway is the host: a connection
 * made to a published port on the host arrives from the gateway's address (docs/adr/0020-https-listeners.md).
 * Null without a default route (or outside Linux).
 */
export function defaultRoute(routeTable?: string, interfaces?: NodeJS.Dict<{ address: string; family: string; internal: boolean }[]>): { address: string; gateway: string } | null {
  let table = routeTable;
  if (table === undefined) {
    try {
      table = process.getBuiltinModule('node:fs').readFileSync('/proc/net/route', 'utf8');
    } catch {
      return null;
    }
  }
  for (const line of table.split('\n').slice(1)) {
    const [iface, destination, gateway, flags, , , , mask] = line.trim().split(/\s+/);
    // RTF_UP (1) and RTF_GATEWAY (2), to 0.0.0.0/0: the default route.
    if (!iface || destination !== '00000000' || mask !== '00000000' || !gateway || (parseInt(flags ?? '0', 16) & 3) !== 3) continue;
    const address = (interfaces ?? process.getBuiltinModule('node:os').networkInterfaces())[iface]?.find((a) => a.family === 'IPv4' && !a.internal)?.address;
    // The table holds the address in the kernel's byte order (little-endian on every host Docker runs on).
    const bytes = gateway.match(/../g)?.map((b) => parseInt(b, 16)).reverse();
    if (!address || bytes?.length !== 4) continue;
    return { address, gateway: bytes.join('.') };
  }
  return null;
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|localhost)$/;

/**
 * The addresses of the plain HTTP listener. PLAIN_HTTP_FROM=anywhere: HOST. PLAIN_HTTP_FROM=host:
 * HOST when it is a loopback address, else 127.0.0.1 (the healthcheck) and the default route's
 * address (the published port), and on that one only its gateway, the host, is answered; HOST is
 * then the HTTPS listener's address alone. Plain HTTP is never bound on another network.
 */
export function plainHttpHosts(host: string, from: string | undefined, route: { address: string; gateway: string } | null = defaultRoute()): { hosts: string[]; gateway: string | null } {
  if (from !== 'host' || LOOPBACK.test(host)) return { hosts: [host], gateway: null };
  return route ? { hosts: ['127.0.0.1', route.address], gateway: route.gateway } : { hosts: ['127.0.0.1'], gateway: null };
}

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
 * Binds HOST:PORT (each address of plainHttpHosts) and, when set, HOST:HTTPS_PORT, as `env` names them, when HOST is an IP address. A
 * port that cannot be bound (taken, or a setting src/config.ts would refuse) and a HOST that is a name
 * are left alone: the backend's own listen then binds them, or fails with its error as it did before.
 */
export async function listenEarly(env: NodeJS.ProcessEnv): Promise<void> {
  const host = env.HOST === undefined || env.HOST === '' ? DEFAULT_HOST : env.HOST;
  const { createServer, isIP } = process.getBuiltinModule('node:net');
  // An address only: a name would be looked up before anything else of the backend ran (a slow or
  // failing resolver would hold its whole start), and may stand for several addresses.
  if (!isIP(host)) return;
  const plain = portOf(env.PORT, DEFAULT_PORT);
  const secure = portOf(env.HTTPS_PORT, undefined);
  const binds = new Map<string, { host: string; port: number }>();
  if (plain !== undefined) for (const h of plainHttpHosts(host, env.PLAIN_HTTP_FROM).hosts) binds.set(keyOf(h, plain), { host: h, port: plain });
  if (secure !== undefined) binds.set(keyOf(host, secure), { host, port: secure });
  await Promise.all(
    [...binds.values()].map(
      ({ host, port }) =>
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

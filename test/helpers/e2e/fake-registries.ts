// Registries that fail in the ways a real one can, on 127.0.0.1 free ports: nothing listening,
// a server that accepts and never answers, and servers answering garbage (a 500 with a non-JSON
// body, a 200 with a body that is not a registry's, bytes that are not HTTP); and a door in front of
// the real registry that a test shuts and opens.
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { connect, createServer as createTcpServer, type Server as TcpServer, type Socket } from 'node:net';
import { freePort } from './rig.ts';
import { ownIPv4 } from '../shared/own-address.ts';

export interface FakeRegistry {
  kind: string;
  /** `127.0.0.1:<port>`: what INSTALLER_REGISTRY takes. */
  address: string;
  /** Connections the server accepted (0 for the closed port). */
  connections(): number;
  close(): Promise<void>;
}

function listen(server: HttpServer | TcpServer): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve((server.address() as { port: number }).port));
  });
}

function tracked(server: HttpServer | TcpServer, kind: string, port: number): FakeRegistry {
  const sockets = new Set<Socket>();
  let count = 0;
  server.on('connection', (s: Socket) => {
    count++;
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
  });
  return {
    kind,
    address: `127.0.0.1:${port}`,
    connections: () => count,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A free port nobody listens on: connection refused. */
export async function closedRegistry(): Promise<FakeRegistry> {
  const port = await freePort();
  return { kind: 'closed port', address: `127.0.0.1:${port}`, connections: () => 0, close: async () => {} };
}

/** Accepts every connection and never sends a byte. */
export async function silentRegistry(): Promise<FakeRegistry> {
  const server = createTcpServer(() => {});
  const r = tracked(server, 'accepts, never answers', 0);
  const port = await listen(server);
  return { ...r, address: `127.0.0.1:${port}` };
}

/** An HTTP server whose every answer is `status` with `body`. */
async function httpRegistry(kind: string, status: number, body: string, contentType: string): Promise<FakeRegistry> {
  const server = createHttpServer((_req, res) => {
    res.writeHead(status, { 'content-type': contentType, 'docker-distribution-api-version': 'registry/2.0' });
    res.end(body);
  });
  const r = tracked(server, kind, 0);
  const port = await listen(server);
  return { ...r, address: `127.0.0.1:${port}` };
}

export const errorStatusRegistry = () => httpRegistry('HTTP 500, not JSON', 500, '<html>upstream exploded</html>', 'text/html');
export const badJsonRegistry = () => httpRegistry('HTTP 200, not a registry answer', 200, '{"this is": not json', 'application/json');

/** Bytes that are neither HTTP nor TLS, the same on every run. */
const GARBAGE = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 151 + 7) % 256));

/** Answers every connection with garbage bytes instead of HTTP (or TLS), then hangs up. */
export async function garbageRegistry(): Promise<FakeRegistry> {
  const server = createTcpServer((s) => {
    s.end(GARBAGE);
  });
  const r = tracked(server, 'garbage bytes', 0);
  const port = await listen(server);
  return { ...r, address: `127.0.0.1:${port}` };
}

/**
 * A door in front of a real registry (`target`, the rig's): a TCP relay on a port of its own that
 * the test shuts (connections refused, as from a registry that went away) and opens again on the
 * same port. What passes through is the real registry's, byte for byte.
 */
export interface RegistryDoor {
  /** `<host>:<port>` (127.0.0.1 unless asked otherwise): a registry host for INSTALLER_REGISTRY and image references. */
  address: string;
  shut(): Promise<void>;
  open(): Promise<void>;
}

/**
 * A door on one of the machine's own addresses, for a backend in a container: the rig's registry
 * listens on the host's loopback, which a container does not reach.
 */
export const registryDoorForContainers = (target: string) => registryDoor(target, ownIPv4('a backend in a container cannot reach a relay'));

/** `host`: the address it listens on, e.g. one of the machine's own that containers reach. */
export async function registryDoor(target: string, host = '127.0.0.1'): Promise<RegistryDoor> {
  const [targetHost, targetPort] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  const port = await freePort();
  let server: TcpServer | null = null;
  const sockets = new Set<Socket>();
  const track = (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => {});
  };
  const door: RegistryDoor = {
    address: `${host}:${port}`,
    async open() {
      if (server) return;
      const relay = createTcpServer((client) => {
        const upstream = connect(targetPort, targetHost);
        track(client);
        track(upstream);
        client.pipe(upstream).pipe(client);
        client.on('close', () => upstream.destroy());
        upstream.on('close', () => client.destroy());
      });
      await new Promise<void>((resolve, reject) => {
        relay.once('error', reject);
        relay.listen(port, host, () => resolve());
      });
      server = relay;
    },
    async shut() {
      const s = server;
      server = null;
      if (!s) return;
      for (const c of sockets) c.destroy();
      await new Promise<void>((resolve) => s.close(() => resolve()));
    },
  };
  await door.open();
  return door;
}

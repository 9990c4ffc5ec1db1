// A unix socket in the data directory through which the `user` CLI hands a change to the running
// installer when the embedded database is in use by it (docs/adr/0016-user-management.md). The
// socket is mode 0600 in a directory the installer owns: only its own user (root) can connect.
// One JSON request line in, one JSON answer line out; a request is at most 64 KiB.
import net from 'node:net';
import { chmodSync, lstatSync, unlinkSync } from 'node:fs';
import path from 'node:path';

/** The socket's file name in the data directory. */
export const LOCAL_SOCKET_NAME = 'installer.sock';
const MAX_REQUEST_BYTES = 64 * 1024;
const IDLE_MS = 30_000;

export function localSocketPath(dataDir: string): string {
  return path.resolve(dataDir, LOCAL_SOCKET_NAME);
}

export type LocalHandler = (request: unknown) => Promise<unknown>;

/** Listens on the socket (replacing a file left by an earlier run); returns a function that closes it. */
export async function serveLocalSocket(socketPath: string, handle: LocalHandler, onError: (err: Error) => void): Promise<() => Promise<void>> {
  try {
    if (lstatSync(socketPath).isSocket()) unlinkSync(socketPath);
  } catch {
    /* absent */
  }
  const server = net.createServer((conn) => {
    conn.setTimeout(IDLE_MS, () => conn.destroy());
    let buffered = '';
    let done = false;
    conn.setEncoding('utf8');
    conn.on('error', () => {});
    conn.on('data', (chunk: string) => {
      if (done) return;
      buffered += chunk;
      const nl = buffered.indexOf('\n');
      if (nl < 0) {
        if (buffered.length > MAX_REQUEST_BYTES) {
          done = true;
          conn.end(`${JSON.stringify({ ok: false, error: 'request too large' })}\n`);
        }
        return;
      }
      done = true;
      let request: unknown;
      try {
        request = JSON.parse(buffered.slice(0, nl));
      } catch {
        conn.end(`${JSON.stringify({ ok: false, error: 'the request is not JSON' })}\n`);
        return;
      }
      handle(request).then(
        (answer) => conn.end(`${JSON.stringify(answer)}\n`),
        (err: unknown) => {
          onError(err as Error);
          conn.end(`${JSON.stringify({ ok: false, error: 'the installer could not do it; see its log' })}\n`);
        },
      );
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    // Created with no permission for anyone else from the start, then pinned to 0600.
    const mask = process.umask(0o177);
    try {
      server.listen(socketPath, () => {
        server.off('error', reject);
        resolve();
      });
    } finally {
      process.umask(mask);
    }
  });
  chmodSync(socketPath, 0o600);
  server.on('error', onError);
  return () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      try {
        unlinkSync(socketPath);
      } catch {
        /* already gone */
      }
    });
}

/** Sends one request to the running installer and waits for its answer. */
export function askLocalSocket(socketPath: string, request: unknown, timeoutMs = 30_000): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const conn = net.createConnection(socketPath);
    let answer = '';
    conn.setEncoding('utf8');
    conn.setTimeout(timeoutMs, () => conn.destroy(new Error(`no answer from the installer on ${socketPath} in ${timeoutMs / 1000} s`)));
    conn.on('connect', () => conn.write(`${JSON.stringify(request)}\n`));
    conn.on('data', (c: string) => (answer += c));
    conn.on('error', reject);
    conn.on('end', () => {
      try {
        resolve(JSON.parse(answer.trim()));
      } catch {
        reject(new Error('the installer gave no readable answer'));
      }
    });
  });
}

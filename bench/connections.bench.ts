// How long the real server (src/main.ts, defaults, the embedded database, HTTP and HTTPS on
// loopback) holds a client that dribbles its headers (one line a second) and an idle kept-alive
// connection, on each listener (docs/adr/0040-bounded-connections.md). A connection still open
// after 40 s is reported as 40 s.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import net from 'node:net';
import tls from 'node:tls';
import type { Bench } from './run.ts';
import { runEntry } from '../test/helpers/shared/process.ts';
import { eventually } from '../test/helpers/shared/eventually.ts';

const GIVE_UP_MS = 40_000;

/** ms from the first header line (or from the answer, for `idle`) until the server closed the connection. */
function held(kind: 'dribble' | 'idle', scheme: 'http' | 'https', port: number): Promise<number> {
  return new Promise((resolve) => {
    const s = scheme === 'http' ? net.connect({ host: '127.0.0.1', port }) : tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false });
    let from = 0;
    let drip: NodeJS.Timeout | undefined;
    let data = '';
    s.setEncoding('utf8');
    s.on('data', (d: string) => {
      data += d;
      if (kind === 'idle' && !from && data.includes('"status"')) from = Date.now();
    });
    s.on('error', () => {});
    const guard = setTimeout(() => s.destroy(), GIVE_UP_MS);
    s.once('close', () => {
      clearTimeout(guard);
      clearInterval(drip);
      resolve(Math.min(GIVE_UP_MS, Date.now() - from));
    });
    s.once(scheme === 'http' ? 'connect' : 'secureConnect', () => {
      if (kind === 'dribble') {
        from = Date.now();
        s.write('GET /api/health HTTP/1.1\r\nHost: installer\r\n');
        drip = setInterval(() => s.write('X-Drip: x\r\n'), 1_000);
      } else s.write('GET /api/health HTTP/1.1\r\nHost: installer\r\n\r\n');
    });
  });
}

const bench: Bench = async (log) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'installer-bench-connections-'));
  const proc = runEntry('src/main.ts', { HOST: '127.0.0.1', PORT: '0', HTTPS_PORT: '0', DATA_DIR: dataDir });
  try {
    await proc.url;
    const ports = await eventually(() => {
      const h = /"address":"http:\/\/[^"]+:(\d+)"/.exec(proc.output());
      const s = /"httpsAddress":"https:\/\/[^"]+:(\d+)"/.exec(proc.output());
      return h && s ? { http: Number(h[1]), https: Number(s[1]) } : null;
    }, 'both listeners');
    log(`server on ${ports.http} (HTTP) and ${ports.https} (HTTPS); holding four sockets`);
    const [dh, ds, ih, is] = await Promise.all([held('dribble', 'http', ports.http), held('dribble', 'https', ports.https), held('idle', 'http', ports.http), held('idle', 'https', ports.https)]);
    const fig = (name: string, ms: number, goalMs: number) => ({ name, value: ms / 1000, unit: 's', goal: `<= ${goalMs / 1000} s`, ok: ms <= goalMs });
    return [
      fig('headers dribbled, HTTP: cut after', dh, 12_000),
      fig('headers dribbled, HTTPS: cut after', ds, 12_000),
      fig('idle kept-alive, HTTP: closed after', ih, 12_000),
      fig('idle kept-alive, HTTPS: closed after', is, 12_000),
    ];
  } finally {
    await proc.stop();
  }
};
export default bench;

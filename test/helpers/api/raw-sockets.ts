// Clients for the connection-bound tests, below what fetch offers: a GET kept open that shows its
// body as it comes, and raw sockets (plain or TLS) that write what the test says and report what
// the server sent and when it closed the connection.
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';

export interface Opened {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** Everything received so far. */
  received(): string;
  /** Resolves with the whole body once the server ends the response. */
  ended: Promise<string>;
  close(): void;
}

/** A GET kept open: resolves once the answer's head has come, then collects its body. */
export function open(url: string, headers: Record<string, string>, ca?: string): Promise<Opened> {
  return new Promise((resolve, reject) => {
    const mod = url.startsWith('https:') ? https : http;
    const req = mod.request(url, { headers: { accept: 'text/event-stream', ...headers }, agent: false, ...(ca ? { ca, checkServerIdentity: () => undefined } : {}) }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      const ended = new Promise<string>((done, fail) => {
        res.on('end', () => done(body));
        res.on('error', fail);
      });
      ended.catch(() => {});
      resolve({ status: res.statusCode ?? 0, headers: res.headers, received: () => body, ended, close: () => req.destroy() });
    });
    req.on('error', reject);
    req.end();
  });
}

/** Writes `head` on a raw socket; resolves when the server closes it, with what it sent and when. */
export function rawExchange(socket: net.Socket, onReady: (s: net.Socket) => void): Promise<{ data: string; closedAt: number }> {
  return new Promise((resolve) => {
    let data = '';
    socket.setEncoding('utf8');
    socket.on('data', (c: string) => (data += c));
    socket.on('error', () => {});
    // Held past any timeout under test: the server never closed it.
    const guard = setTimeout(() => socket.destroy(), 10_000);
    socket.once('close', () => {
      clearTimeout(guard);
      resolve({ data, closedAt: Date.now() });
    });
    onReady(socket);
  });
}

/** A raw connection to 127.0.0.1:`port`, plain or TLS (trusting `ca`); `ready` writes on it once it is up. */
export function connect(scheme: 'http' | 'https', port: number, ca: string, ready: (s: net.Socket) => void): Promise<{ data: string; closedAt: number }> {
  if (scheme === 'http') {
    const s = net.connect({ host: '127.0.0.1', port });
    return rawExchange(s, (sock) => sock.once('connect', () => ready(sock)));
  }
  const s = tls.connect({ host: '127.0.0.1', port, ca, checkServerIdentity: () => undefined });
  return rawExchange(s, (sock) => sock.once('secureConnect', () => ready(sock)));
}

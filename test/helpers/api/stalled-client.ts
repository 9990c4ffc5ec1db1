// A client of a stream that stops reading: what a slow or frozen browser tab looks like to the server.
import { connect } from 'node:net';

/** A raw HTTP client that reads the response head, then stops reading. */
export function stalledClient(base: string, path: string, token: string): Promise<{ head: string; resume(): Promise<number> }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const sock = connect(Number(url.port), url.hostname);
    let buf = '';
    let total = 0;
    sock.on('error', () => {});
    sock.once('connect', () => sock.write(`GET ${path} HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${token}\r\nAccept: text/event-stream\r\n\r\n`));
    const onData = (d: Buffer) => {
      buf += d.toString('latin1');
      total += d.length;
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      sock.off('data', onData);
      sock.pause();
      resolve({
        head: buf.slice(0, end),
        resume: () =>
          new Promise<number>((res) => {
            sock.on('data', (more: Buffer) => (total += more.length));
            sock.once('close', () => res(total));
            sock.resume();
          }),
      });
    };
    sock.on('data', onData);
    sock.once('close', () => reject(new Error('closed before the response head')));
  });
}

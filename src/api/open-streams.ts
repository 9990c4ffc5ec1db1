// Streams the app ends itself as it closes. A stream that ends only when its subject does (a job's
// events, a container's logs) would otherwise hold a stopping backend until its drain runs out
// (docs/adr/0036-bounded-drain.md), and a self-update's switch with it. Ended, the UI's followers
// reconnect to whichever backend answers and resume where they were.
import type { FastifyInstance } from 'fastify';
import type { ServerResponse } from 'node:http';

/** A set for a route plugin's open streams: each one still in it when the app closes is ended with `end`. */
export function openStreams<T>(app: FastifyInstance, end: (stream: T) => void): Set<T> {
  const open = new Set<T>();
  app.addHook('preClose', async () => {
    for (const stream of open) end(stream);
  });
  return open;
}

/** A client that stopped reading a stream for longer than the bound (LOG_CLIENT_STALL_SECONDS). */
export class ClientStalled extends Error {}

/** Waits for 'drain'; rejects with ClientStalled after `ms`; resolves when the connection closes. */
export function drained(raw: ServerResponse, ms: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (err?: Error) => {
      clearTimeout(timer);
      raw.off('drain', onDrain);
      raw.off('close', onDrain);
      if (err) reject(err);
      else resolve();
    };
    const onDrain = () => done();
    const timer = setTimeout(() => done(new ClientStalled()), ms);
    raw.once('drain', onDrain);
    raw.once('close', onDrain);
  });
}

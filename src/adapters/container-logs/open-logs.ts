// Opening one of the engine's log endpoints (a container's, a Swarm service's or task's) into a
// line source, and following the engine's event stream for new sources to read. Over a unix socket
// the body is read directly (engine-http.ts); otherwise through dockerode as a stream, since
// dockerode would buffer a read that does not follow whole.
import type Docker from 'dockerode';
import type { Readable } from 'node:stream';
import { openEngineStream } from './engine-http.ts';
import type { LineSource } from './line-source.ts';

interface DialModem {
  dial(opts: Record<string, unknown>, cb: (err: Error | null, res?: unknown) => void): void;
}

export type LogParams = Record<string, string | number | boolean>;

/**
 * Opens `GET <path>` (e.g. `/containers/{id}/logs`) with stdout, stderr and timestamps and `params`
 * into `sink`; false when the engine answers 404 (the container, service or task no longer exists).
 */
export async function openLogStream(docker: Docker, path: string, params: LogParams, sink: LineSource): Promise<boolean> {
  const modem = docker.modem as unknown as DialModem & { socketPath?: unknown };
  if (typeof modem.socketPath === 'string') {
    const query = new URLSearchParams({ stdout: '1', stderr: '1', timestamps: '1' });
    for (const [k, v] of Object.entries(params)) query.set(k, typeof v === 'boolean' ? (v ? '1' : '0') : String(v));
    try {
      sink.attach(await openEngineStream(modem.socketPath, `${path}?${query}`, sink));
      return true;
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return false;
      throw err;
    }
  }
  const stream = await new Promise<Readable | null>((resolve, reject) => {
    modem.dial(
      {
        path: `${path}?`,
        method: 'GET',
        isStream: true,
        statusCodes: { 200: true, 404: 'not found', 500: 'server error', 503: 'node is not part of a swarm' },
        options: { stdout: true, stderr: true, timestamps: true, ...params },
      },
      (err, res) => {
        if (err) {
          if ((err as { statusCode?: number }).statusCode === 404) resolve(null);
          else reject(err);
        } else resolve(res as Readable);
      },
    );
  });
  if (!stream) return false;
  stream.on('data', (d: Buffer) => {
    if (!sink.bytes(d)) stream.pause();
  });
  stream.once('end', () => sink.end(null));
  stream.once('error', (err: Error) => sink.end(err));
  stream.once('close', () => sink.end(stream.readableEnded ? null : new Error('the engine closed the log stream before its end')));
  sink.attach({ resume: () => stream.resume(), destroy: () => stream.destroy() });
  return true;
}

/** One event of the engine's event stream, as far as log followers read it. */
export interface EngineEvent {
  id?: string;
  Actor?: { ID?: string; Attributes?: Record<string, string> };
}

/**
 * Reads the engine's event stream line by line and hands each event `pick` names an id for to
 * `joins` (a container started, a service created: a source to follow). The stream's end fails
 * the queue, unless the read was closed on purpose.
 */
export function joinOnEvents(
  events: Readable,
  closer: { readonly closed: boolean },
  joins: { add(id: string): void; fail(err: Error): void },
  pick: (ev: EngineEvent) => string | null | undefined,
): void {
  let rest = '';
  events.on('data', (chunk: Buffer) => {
    rest += chunk.toString('utf8');
    let nl: number;
    while ((nl = rest.indexOf('\n')) >= 0) {
      const text = rest.slice(0, nl);
      rest = rest.slice(nl + 1);
      try {
        const id = pick(JSON.parse(text) as EngineEvent);
        if (id) joins.add(id);
      } catch {
        /* not an event line */
      }
    }
  });
  const lost = () => {
    if (!closer.closed) joins.fail(new Error('the engine closed its event stream'));
  };
  events.once('end', lost);
  events.once('close', lost);
  events.once('error', lost);
}

// Platform container logs: live aggregated streams (all services or one), time windows for admins,
// and a download. Lines come from a ContainerLogsPort already scrubbed of the installer's secrets;
// this file validates, streams with backpressure, and drops clients that stop reading
// (docs/adr/0007-container-logs.md). A service or container name is checked against the platform's
// observed containers (docs/adr/0023-observed-state.md): the streams alone reach the engine. On a
// Swarm (PLATFORM_RUNTIME=swarm) the feed checks them against the stack it lists anyway, and lines
// carry their node and task.
import type { FastifyBaseLogger, FastifyInstance, FastifyReply } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import { z } from 'zod';
import { badRequest, notFound, unavailable } from '../../errors.ts';
import { ClientStalled, drained, openStreams } from '../open-streams.ts';
import type { ContainerLogLine, ContainerLogsPort, ContainerView, LogFeed } from '../../contracts/ports.ts';
import { freshness } from '../observed-reads.ts';

/** Lines per container sent before following, when `tail` is not given. */
export const TAIL_DEFAULT = 100;
/** Largest `tail` accepted. */
export const TAIL_MAX = 10_000;

const NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,254}$/;

const tailQuery = z.object({
  tail: z
    .string()
    .regex(/^\d{1,9}$/, 'must be a whole number of lines')
    .transform(Number)
    .refine((n) => n <= TAIL_MAX, `must be at most ${TAIL_MAX}`)
    .optional()
    .describe(`Lines per container before following (default ${TAIL_DEFAULT}, at most ${TAIL_MAX}; 0 for new lines only)`),
});

const windowQuery = z.object({
  since: z.string().optional().describe('Start of the window, ISO 8601 (inclusive); no offset means UTC'),
  until: z.string().optional().describe('End of the window, ISO 8601 (inclusive); absent: follow live'),
  containerName: z.string().optional().describe('Only this platform container'),
});

// ---------------------------------------------------------------------------------------------
// ISO 8601 to epoch nanoseconds, exactly (Date keeps milliseconds only, and a line stamped at
// 10:00:00.123456789 must fall inside a window that ends at that instant).

const ISO = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?(Z|[+-]\d{2}(?::?\d{2})?)?)?$/i;

export function parseInstant(value: string): bigint | null {
  const m = ISO.exec(value);
  if (!m) return null;
  const [, y, mo, d, h = '00', mi = '00', s = '00', frac = '', zone = 'Z'] = m;
  const year = Number(y);
  const month = Number(mo);
  const day = Number(d);
  const hour = Number(h);
  const minute = Number(mi);
  const second = Number(s);
  if (year < 1970 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 59) return null;
  const ms = Date.UTC(year, month - 1, day, hour, minute, second);
  if (new Date(ms).getUTCDate() !== day) return null; // 31 April and the like
  let offsetMinutes = 0;
  if (zone.toUpperCase() !== 'Z') {
    const z2 = /^([+-])(\d{2}):?(\d{2})?$/.exec(zone)!;
    const oh = Number(z2[2]);
    const om = Number(z2[3] ?? '0');
    if (oh > 23 || om > 59) return null;
    offsetMinutes = (z2[1] === '-' ? -1 : 1) * (oh * 60 + om);
  }
  return (BigInt(ms) - BigInt(offsetMinutes) * 60_000n) * 1_000_000n + BigInt(frac.padEnd(9, '0'));
}

function instant(name: 'since' | 'until', value: string | undefined): bigint | undefined {
  if (value === undefined) return undefined;
  const ns = parseInstant(value);
  if (ns === null) throw badRequest(`${name}: must be an ISO 8601 date-time such as 2024-05-01T10:00:00Z (got "${value.slice(0, 64)}")`);
  return ns;
}

const sseEvent = (l: ContainerLogLine) => `data: ${JSON.stringify(l)}\n\n`;
// On a Swarm the container is followed by its node, as `docker service logs` writes it: `<container>@<node> | …`.
const downloadLine = (l: ContainerLogLine) => `${l.container}${l.node !== undefined ? `@${l.node}` : ''} | ${l.timestamp} ${l.stream} ${l.line}\n`;

interface StreamContext {
  log: FastifyBaseLogger;
  stallMs: number;
  active: Set<LogFeed>;
}

async function streamSse(reply: FastifyReply, feed: LogFeed, ctx: StreamContext, sendEnd: boolean): Promise<void> {
  const raw = reply.raw;
  let gone = false;
  const onClose = () => {
    gone = true;
    feed.close();
  };
  raw.once('close', onClose);
  ctx.active.add(feed);
  let lines = 0;
  try {
    reply.sse.sendHeaders();
    // Commit the 200 now: a quiet platform would otherwise leave the client without an answer
    // until the first line or heartbeat.
    reply.raw.flushHeaders();
    for await (const batch of feed) {
      if (gone) break;
      let chunk = '';
      for (const l of batch) chunk += sseEvent(l);
      lines += batch.length;
      if (!raw.write(chunk)) await drained(raw, ctx.stallMs);
    }
    if (!gone && sendEnd) raw.write(`event: end\ndata: ${JSON.stringify({ lines })}\n\n`);
  } catch (err) {
    if (err instanceof ClientStalled) {
      ctx.log.warn({ stalledSeconds: ctx.stallMs / 1000, lines }, 'dropped a log stream client that stopped reading');
      raw.destroy();
      return;
    }
    ctx.log.error({ err }, 'log stream failed');
    if (!gone) raw.write(`event: error\ndata: ${JSON.stringify({ message: 'reading the container logs failed; reconnect to resume' })}\n\n`);
  } finally {
    raw.off('close', onClose);
    feed.close();
    ctx.active.delete(feed);
  }
}

/** The download as a byte stream that pulls from the feed only when the client has taken the previous chunk. */
function downloadStream(feed: LogFeed, raw: ServerResponse, ctx: StreamContext): Readable {
  const it = feed[Symbol.asyncIterator]();
  let reading = false;
  let lastProgress = Date.now();
  ctx.active.add(feed);
  const watchdog = setInterval(() => {
    if (!raw.writableNeedDrain) lastProgress = Date.now();
    else if (Date.now() - lastProgress > ctx.stallMs) {
      ctx.log.warn({ stalledSeconds: ctx.stallMs / 1000 }, 'dropped a log download client that stopped reading');
      out.destroy();
      raw.destroy();
    }
  }, Math.min(1000, ctx.stallMs));
  watchdog.unref();
  // Object mode, so that string chunks reach the socket as strings: no Buffer per chunk waiting for
  // a garbage collection (V8 counts those late, and a gigabyte download makes many of them).
  const out = new Readable({
    objectMode: true,
    highWaterMark: 2,
    read() {
      lastProgress = Date.now();
      if (reading) return;
      reading = true;
      it.next().then(
        (r) => {
          reading = false;
          if (r.done) {
            out.push(null);
            return;
          }
          let chunk = '';
          for (const l of r.value) chunk += downloadLine(l);
          out.push(chunk);
        },
        (err: unknown) => {
          reading = false;
          ctx.log.error({ err }, 'log download failed');
          out.destroy(err as Error);
        },
      );
    },
    destroy(err, cb) {
      clearInterval(watchdog);
      feed.close();
      ctx.active.delete(feed);
      cb(err);
    },
  });
  out.once('end', () => {
    clearInterval(watchdog);
    ctx.active.delete(feed);
  });
  return out;
}

// ---------------------------------------------------------------------------------------------

function port(logs: ContainerLogsPort | undefined): ContainerLogsPort {
  if (!logs) throw unavailable('container logs are not available: this installer has no Docker engine connection');
  return logs;
}

const ENGINE_DOWN = 'the Docker engine did not answer; try again shortly';

/**
 * The platform's containers as the observer saw them (docs/adr/0023-observed-state.md), to check a
 * name against: no engine call. A row observed before the latest job ended is read again, as the
 * status page does. 503 when the engine did not answer the observer, or nothing was observed.
 */
async function observedContainers(app: FastifyInstance, log: FastifyBaseLogger): Promise<ContainerView[]> {
  const row = await app.reads.observed.sinceLastJob('platform', freshness(app.settings).fast);
  if (!row?.data) throw unavailable('the platform has not been observed yet: no observer answered in time; try again shortly');
  if (row.data.engineError) {
    log.error({ reason: row.data.engineError }, 'the Docker engine did not answer the observer');
    throw unavailable(ENGINE_DOWN);
  }
  return row.data.containers;
}

/**
 * Waits until the feed has asked the engine for what it reads: 503 before the stream starts when it
 * did not answer; on a Swarm, 404 (service) or 400 (containerName) when the stack has no such name.
 */
async function opened(log: FastifyBaseLogger, feed: LogFeed): Promise<LogFeed> {
  try {
    await feed.opened;
    return feed;
  } catch (err) {
    feed.close();
    const e = err as { code?: unknown; parameter?: unknown; message: string };
    if (e.code === 'log-selection-unknown') throw e.parameter === 'service' ? notFound(e.message) : badRequest(e.message);
    log.error({ err }, 'the Docker engine did not answer');
    throw unavailable(ENGINE_DOWN);
  }
}

/** `logs`: the engine's container logs, the one port a route reads the engine through; absent, the routes answer 503. */
export const logRoutes: FastifyPluginAsyncZod<{ logs?: ContainerLogsPort }> = async (app, { logs: logsPort }) => {
  const project = app.settings.PLATFORM_PROJECT;
  // A Swarm stack's names are checked by the feed, against the stack it lists before it reads.
  const namesFromFeed = app.settings.PLATFORM_RUNTIME === 'swarm';
  const platformKind = namesFromFeed ? 'stack' : 'compose project';
  const active = openStreams<LogFeed>(app, (feed) => feed.close());
  const ctx = (log: FastifyBaseLogger): StreamContext => ({ log, stallMs: app.settings.LOG_CLIENT_STALL_SECONDS * 1000, active });

  const liveDescription =
    'Server-sent events, one per line: `{container, service, stream, timestamp, line}` (on a Swarm also `node` and `task`). First the last `tail` lines of each container in timestamp order, then new lines as they come; containers that start later join.';

  app.get(
    '/api/deployment/logs',
    {
      config: { access: 'viewer' },
      sse: 'manual',
      schema: { tags: ['logs'], summary: 'Live aggregated logs of all platform containers (SSE)', description: liveDescription, querystring: tailQuery },
    },
    async (req, reply) => {
      // An engine that is down answers 503 here, before the stream is committed with a 200.
      const feed = await opened(req.log, port(logsPort).live({ project }, { tail: req.query.tail ?? TAIL_DEFAULT }));
      await streamSse(reply, feed, ctx(req.log), false);
    },
  );

  app.get(
    '/api/deployment/logs/:service',
    {
      config: { access: 'viewer' },
      sse: 'manual',
      schema: {
        tags: ['logs'],
        summary: "Live logs of one platform service's containers (SSE)",
        description: liveDescription,
        params: z.object({ service: z.string() }),
        querystring: tailQuery,
      },
    },
    async (req, reply) => {
      const logs = port(logsPort);
      const { service } = req.params;
      const known = NAME.test(service) && (namesFromFeed || (await observedContainers(app, req.log)).some((c) => c.service === service));
      if (!known) throw notFound(`service "${service.slice(0, 64)}" is not a service of the platform (${platformKind} ${project})`);
      const feed = await opened(req.log, logs.live({ project, service }, { tail: req.query.tail ?? TAIL_DEFAULT }));
      await streamSse(reply, feed, ctx(req.log), false);
    },
  );

  async function windowArgs(q: z.infer<typeof windowQuery>, log: FastifyBaseLogger) {
    const since = instant('since', q.since);
    const until = instant('until', q.until);
    if (since !== undefined && until !== undefined && since > until) throw badRequest('since: must not be later than until');
    if (q.containerName !== undefined) {
      const name = q.containerName;
      const exists = NAME.test(name) && (namesFromFeed || (await observedContainers(app, log)).some((c) => c.name === name));
      if (!exists) throw badRequest(`containerName: no platform container is named "${name.slice(0, 64)}" (${platformKind} ${project})`);
    }
    return {
      selection: { project, ...(q.containerName !== undefined ? { containerName: q.containerName } : {}) },
      ...(since !== undefined ? { since } : {}),
      ...(until !== undefined ? { until } : {}),
    };
  }

  app.get(
    '/api/deployment-log',
    {
      sse: 'manual',
      config: { access: 'admin' },
      schema: {
        tags: ['logs'],
        summary: 'Platform container logs over a time window, in timestamp order (SSE)',
        description:
          'One event per line, `{container, service, stream, timestamp, line}`, in timestamp order across containers; then `event: end` with `{lines}` and the stream closes. Without `until` it keeps following new lines.',
        querystring: windowQuery,
      },
    },
    async (req, reply) => {
      const logs = port(logsPort);
      const { selection, ...window } = await windowArgs(req.query, req.log);
      const feed = await opened(req.log, logs.window(selection, { ...window, follow: true }));
      await streamSse(reply, feed, ctx(req.log), true);
    },
  );

  app.get(
    '/api/deployment-log/download',
    {
      // A long response holding the engine's logs open: it takes a stream slot (src/api/stream-limits.ts).
      config: { access: 'admin', stream: true },
      schema: {
        tags: ['logs'],
        summary: 'Download platform container logs over a time window as text',
        description:
          '`text/plain` attachment `logs-<ISO timestamp>.txt`, one line per log line: `<container> | <timestamp> <stream> <line>` (on a Swarm `<container>@<node> | …`), in timestamp order. `until` defaults to the time of the request.',
        // The schema says since is required, so a missing one is refused before anything else.
        querystring: windowQuery.extend({
          since: z
            .string({ error: (issue) => (issue.input === undefined ? 'is required, an ISO 8601 date-time such as 2024-05-01T10:00:00Z' : undefined) })
            .describe('Start of the window, ISO 8601 (inclusive); no offset means UTC'),
        }),
      },
    },
    async (req, reply) => {
      const logs = port(logsPort);
      const { selection, ...window } = await windowArgs(req.query, req.log);
      const feed = await opened(req.log, logs.window(selection, { ...window, follow: false }));
      const name = `logs-${new Date().toISOString()}.txt`;
      return reply
        .header('content-type', 'text/plain; charset=utf-8')
        .header('content-disposition', `attachment; filename="${name}"`)
        .header('cache-control', 'no-store')
        .header('x-content-type-options', 'nosniff')
        .send(downloadStream(feed, reply.raw, ctx(req.log)));
    },
  );
};

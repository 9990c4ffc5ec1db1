// A job's events as a server-sent stream: replayed from the log, then followed live until `finished`.
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { JobEventRecord } from '../../state/job-events.ts';
import { badRequest, notFound } from '../../errors.ts';
import { ClientStalled, drained, openStreams } from '../open-streams.ts';
import { jobIdParams } from './job-view.ts';

function parseSeq(raw: string | undefined, name: string): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (!/^\d{1,15}$/.test(raw)) throw badRequest(`${name}: must be a non-negative integer event sequence number`);
  return Number(raw);
}

/**
 * One event as the SSE frame @fastify/sse writes for `{ id, event, data }`: the plugin sets up the
 * stream (headers, heartbeats, the end when the handler returns) and the route writes whole pages.
 * An event's type is one of a fixed set and its data is JSON, so neither holds a line break.
 */
const frame = (e: JobEventRecord) => `id: ${e.seq}\nevent: ${e.type}\ndata: ${JSON.stringify({ seq: e.seq, type: e.type, at: e.at.toISOString(), ...e.payload })}\n\n`;

/** How often a job stream reads the log without being woken: covers notifications lost while the listener reconnects. */
const STREAM_POLL_MS = 2_000;

export const jobStreamRoutes: FastifyPluginAsyncZod = async (app) => {
  const { get: getJob, events } = app.reads.jobs;
  // Open job streams, each by the function that ends it: a self-update's job ends only once the
  // next backend is up, so its stream would hold the stopping one for the whole drain.
  const jobStreams = openStreams<() => void>(app, (end) => end());

  app.get(
    '/api/deployment/jobs/:jobId/logs',
    {
      config: { access: 'viewer' },
      sse: 'only',
      schema: {
        tags: ['deployment'],
        summary: "SSE stream of a job's events: replays from the start, after `after=<seq>` or after Last-Event-ID, then follows live; ends after `finished`",
        params: jobIdParams,
        querystring: z.object({ after: z.string().optional().describe('Replay events after this sequence number (a non-negative integer)') }),
        // Loose: the validated object replaces request.headers, and every other header must stay.
        headers: z.looseObject({ 'last-event-id': z.string().optional().describe('Resume after this sequence number (as `after`)') }),
      },
    },
    async (req, reply) => {
      const jobId = req.params.jobId;
      const after = parseSeq(req.query.after, 'after');
      const lastId = parseSeq(req.headers['last-event-id'], 'Last-Event-ID');
      if (!(await getJob(jobId))) throw notFound(`no job ${jobId}`);
      // Commit the stream now: the client knows it is connected, and heartbeats start even
      // while a job is quiet (the plugin starts them with the headers).
      reply.sse.sendHeaders();
      reply.raw.flushHeaders();
      let cursor = Math.max(after ?? 0, lastId ?? 0);

      // Woken when the job's events are stored (here or, through NOTIFY, in the controllers'
      // process); rows are always read from the log after the cursor, so nothing is skipped or sent
      // twice. A slow poll covers notifications missed while the listener reconnects.
      let signalled = false;
      let wake: (() => void) | null = null;
      let closed = false;
      const unsubscribe = events.subscribe(jobId, (seq) => {
        if (seq <= cursor) return;
        signalled = true;
        wake?.();
      });
      const end = () => {
        closed = true;
        wake?.();
      };
      jobStreams.add(end);
      reply.sse.onClose(() => {
        jobStreams.delete(end);
        end();
      });
      const raw = reply.raw;
      const stallMs = app.settings.LOG_CLIENT_STALL_SECONDS * 1000;
      try {
        while (!closed) {
          signalled = false;
          const page = await events.read(jobId, cursor);
          // A page is written as one chunk: one write per event (a replay of 100,000 events) spent
          // more time in the writes and their promises than in reading the events.
          let chunk = '';
          let finished = false;
          for (const e of page) {
            cursor = e.seq;
            chunk += frame(e);
            if (e.type === 'finished') {
              finished = true;
              break;
            }
          }
          if (chunk && !closed && !raw.write(chunk)) await drained(raw, stallMs);
          if (finished) return;
          if (page.length || signalled || closed) continue;
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, STREAM_POLL_MS);
            wake = () => {
              clearTimeout(timer);
              resolve();
            };
          });
          wake = null;
        }
      } catch (err) {
        if (!(err instanceof ClientStalled)) throw err;
        req.log.warn({ stalledSeconds: stallMs / 1000, jobId, cursor }, 'dropped a job stream client that stopped reading');
        raw.destroy();
      } finally {
        unsubscribe();
      }
    },
  );
};

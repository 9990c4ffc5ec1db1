// GET /api/health needs no token: the update overlay polls it while the backend restarts and
// the container healthcheck calls it (docs/adr/0003-health-without-auth.md). Every answer names
// the process that gave it (a random id, nothing about the build): the overlay knows the backend
// was replaced even when the gap fell between two of its polls, or before its first one, since the
// answer that started the update names its process too (docs/adr/0034-restart-seen-by-instance.md).
// Healthy means serving and reconciling: until the process's controllers run, it answers 503
// `starting`, so that no healthcheck passes a backend whose start may still fail
// (docs/adr/0043-healthy-means-reconciling.md).
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { INSTANCE_HEADER } from '../../contracts/instance.ts';


export const healthSchema = z.object({ status: z.enum(['ok', 'starting', 'error']), db: z.enum(['up', 'down']) });

/** `reconciling`: whether the process runs what its role runs; absent, from the start. */
export const healthRoutes: FastifyPluginAsyncZod<{ reconciling?: () => boolean }> = async (app, { reconciling }) => {
  const probe = app.reads.health.probe;
  app.get(
    '/api/health',
    {
      config: { access: 'public' },
      // Polled every few seconds by the container healthcheck and the update overlay: only its
      // warnings and errors are worth a log line.
      logLevel: 'warn',
      schema: {
        tags: ['system'],
        summary: 'Liveness, database reachability, and whether the controllers run',
        response: { 200: healthSchema, 503: healthSchema },
      },
    },
    async (_req, reply) => {
      void reply.header(INSTANCE_HEADER, app.instance);
      const up = await probe.up();
      if (!up) return reply.status(503).send({ status: 'error', db: 'down' });
      if (reconciling && !reconciling()) return reply.status(503).send({ status: 'starting', db: 'up' });
      return { status: 'ok' as const, db: 'up' as const };
    },
  );
};

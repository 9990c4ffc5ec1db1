// GET /api/health needs no token: the update overlay polls it while the backend restarts and
// the container healthcheck calls it (docs/adr/0003-health-without-auth.md).
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { databaseUp } from '../../state/health.ts';

export const healthSchema = z.object({ status: z.enum(['ok', 'error']), db: z.enum(['up', 'down']) });

export const healthRoutes: FastifyPluginAsyncZod = async (app) => {
  app.get(
    '/api/health',
    {
      config: { access: 'public' },
      schema: {
        tags: ['system'],
        summary: 'Liveness and database reachability',
        response: { 200: healthSchema, 503: healthSchema },
      },
    },
    async (_req, reply) => {
      const up = await databaseUp(app.deps.database.db);
      if (up) return { status: 'ok' as const, db: 'up' as const };
      return reply.status(503).send({ status: 'error', db: 'down' });
    },
  );
};

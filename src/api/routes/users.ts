import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { listUsers } from '../../state/users.ts';

export const userRoutes: FastifyPluginAsyncZod = async (app) => {
  app.get(
    '/api/users',
    {
      config: { access: 'admin' },
      schema: {
        tags: ['auth'],
        summary: 'Local users and their roles (add users with the `user` CLI)',
        response: { 200: z.array(z.object({ username: z.string(), role: z.string(), createdAt: z.string() })) },
      },
    },
    async () =>
      (await listUsers(app.deps.database.db)).map((u) => ({
        username: u.username,
        role: u.role,
        createdAt: new Date(u.created_at).toISOString(),
      })),
  );
};

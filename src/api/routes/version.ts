import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';

export const versionSchema = z.object({
  inContainer: z.boolean(),
  image: z.string().nullable().describe('Image reference the running container was started from'),
  tag: z.string().nullable().describe('Tag part of the reference; tags move, so this is informative only'),
  digest: z.string().nullable().describe('Registry digest of the running image: the exact build identity'),
  imageId: z.string().nullable(),
  containerId: z.string().nullable(),
  note: z.string().optional(),
});

export const versionRoutes: FastifyPluginAsyncZod = async (app) => {
  app.get(
    '/api/version',
    { schema: { tags: ['system'], summary: 'Running image reference and digest', response: { 200: versionSchema } } },
    async () => app.deps.runtime.version(),
  );
};

import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ageFields, freshness } from '../observed-reads.ts';
import { ageOf } from '../../state/observed.ts';

export const versionSchema = z.object({
  inContainer: z.boolean(),
  image: z.string().nullable().describe('Image reference the running container was started from'),
  tag: z.string().nullable().describe('Tag part of the reference; tags move, so this is informative only'),
  digest: z.string().nullable().describe('Registry digest of the running image: the exact build identity'),
  imageId: z.string().nullable(),
  containerId: z.string().nullable(),
  note: z.string().optional(),
});

const versionAnswer = versionSchema.extend(ageFields);

export const versionRoutes: FastifyPluginAsyncZod = async (app) => {
  app.get(
    '/api/version',
    { config: { access: 'viewer' }, schema: { tags: ['system'], summary: 'Running image reference and digest, as the observer last saw them', response: { 200: versionAnswer } } },
    async () => {
      const row = await app.reads.observed.fresh('installer', freshness(app.settings).fast);
      const info = row?.data ?? { inContainer: false, image: null, tag: null, digest: null, imageId: null, containerId: null, note: 'the installer has not been observed yet: no observer answered in time' };
      return { ...info, ...ageOf(row) };
    },
  );
};

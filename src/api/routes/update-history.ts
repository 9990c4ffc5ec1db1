// The history of self-updates with their figures (docs/adr/0031-update-history.md): from and to
// digests, actor, outcome and the downtime the installer measured itself. Read from the database
// only; paged like the audit trail, with a `Link: rel="next"` header naming the next older page.
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { UpdateHistoryEntry } from '../../contracts/update-history.ts';
import { badRequest } from '../../errors.ts';
import { limitParam } from '../limit-param.ts';
import { conditionSchema } from '../condition-schema.ts';

export const HISTORY_LIMIT = { default: 20, max: 200 };


const entrySchema = z.object({
  requestId: z.string(),
  actor: z.object({ id: z.string(), email: z.string().nullable() }),
  from: z.object({ reference: z.string().nullable(), digest: z.string().nullable() }).describe('The build that ran before the update'),
  to: z.object({ tag: z.string().nullable(), digest: z.string().nullable() }).describe('The build the update moved to'),
  outcome: z.string().describe('helper-running while in flight, then completed, rolled-back, neither or undecided'),
  detail: z.string().nullable(),
  downtimeMs: z.number().int().nullable().describe("From the old backend's last answer to the new backend's first readiness; null when either end is unknown"),
  downtimeNote: z.string().nullable().describe('Why downtimeMs is null'),
  lastAnswerAt: z.string().nullable(),
  firstReadyAt: z.string().nullable(),
  startedAt: z.string(),
  finishedAt: z.string().nullable(),
  conditions: z.array(conditionSchema).describe("The update's status conditions: the runtime's Reconciled once an attempt failed"),
}) satisfies z.ZodType<UpdateHistoryEntry>;

export const updateHistoryRoutes: FastifyPluginAsyncZod = async (app) => {
  const history = app.reads.updateHistory;

  app.get(
    '/api/system/self-update/history',
    {
      config: { access: 'viewer' },
      schema: {
        tags: ['system'],
        summary: `Self-updates that ran their helper, newest first, with the downtime the installer measured (limit default ${HISTORY_LIMIT.default}, at most ${HISTORY_LIMIT.max})`,
        description: 'When older updates exist, a `Link: <…>; rel="next"` header gives the URL of the next page (`before` = the requestId of the last entry); follow it until it is absent.',
        querystring: z.object({
          limit: limitParam(HISTORY_LIMIT, 'Updates'),
          before: z.uuid({ error: 'must be the requestId of an update (a UUID)' }).optional().describe('Cursor: only updates older than this one (as the `Link: rel="next"` header gives it)'),
        }),
        response: { 200: z.array(entrySchema) },
      },
    },
    async (req, reply) => {
      const { limit, before } = req.query;
      if (before !== undefined && !(await history.exists(before))) throw badRequest(`before: no self-update in the history has requestId ${before}`);
      const rows = await history.list({ ...(before !== undefined ? { before } : {}), limit: limit + 1 });
      const page = rows.slice(0, limit);
      if (rows.length > limit) {
        const params = new URLSearchParams({ limit: String(limit), before: page.at(-1)!.requestId });
        void reply.header('link', `</api/system/self-update/history?${params.toString()}>; rel="next"`);
      }
      return page;
    },
  );
};

// The declarative self-update policy (docs/update-policy.md): read by any signed-in caller, set by
// an admin or the control plane (the service token). The API writes the desired row only; the
// policy reconciler decides and starts updates. Beside the spec's endpoints, which it leaves as they are.
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { UPDATE_POLICY_MODES } from '../../db/schema.ts';
import { DAY_NAMES, type UpdatePolicyView } from '../../state/update-policy.ts';

const iso = (d: Date | null) => (d ? d.toISOString() : null);

const windowSchema = z.strictObject({
  days: z
    .array(z.enum(DAY_NAMES, { error: `each day must be one of ${DAY_NAMES.join(', ')}` }))
    .max(7)
    .refine((d) => new Set(d).size === d.length, 'a day is named twice')
    .describe('Days the window opens on (UTC), sun … sat'),
  startHour: z.number({ error: 'startHour must be a whole hour from 0 to 23' }).int('startHour must be a whole hour from 0 to 23').min(0, 'startHour must be a whole hour from 0 to 23').max(23, 'startHour must be a whole hour from 0 to 23').describe('Hour the window opens, UTC, 0-23'),
  endHour: z.number({ error: 'endHour must be a whole hour from 1 to 24' }).int('endHour must be a whole hour from 1 to 24').min(1, 'endHour must be a whole hour from 1 to 24').max(24, 'endHour must be a whole hour from 1 to 24').describe('Hour the window closes (exclusive), UTC, 1-24; at or before startHour: the next day'),
});

const putSchema = z
  .strictObject({
    mode: z.enum(UPDATE_POLICY_MODES, { error: `mode must be one of ${UPDATE_POLICY_MODES.join(', ')}` }),
    window: windowSchema.optional().describe('Required for auto; kept as it is when left out'),
  })
  .superRefine((b, ctx) => {
    if (b.window && b.window.startHour === b.window.endHour) {
      ctx.addIssue({ code: 'custom', path: ['window'], message: 'the window is empty: startHour and endHour are the same hour' });
    }
    if (b.mode === 'auto' && (!b.window || b.window.days.length === 0)) {
      ctx.addIssue({ code: 'custom', path: ['window', 'days'], message: 'mode auto needs a maintenance window with at least one day' });
    }
  });

const policySchema = z.object({
  mode: z.enum(UPDATE_POLICY_MODES),
  window: z.object({ days: z.array(z.enum(DAY_NAMES)), startHour: z.number(), endHour: z.number() }),
  generation: z.number(),
  updatedBy: z.string().nullable(),
  updatedAt: z.string(),
  status: z.object({
    observedGeneration: z.number(),
    decision: z.string().nullable().describe("the policy reconciler's last decision: manual, upToDate, quarantined, notifying, outsideWindow, busy, triedThisWindow, starting"),
    detail: z.string().nullable(),
    decidedAt: z.string().nullable(),
    availableDigest: z.string().nullable().describe('the newest build the policy announced (modes notify and auto)'),
    availableSince: z.string().nullable(),
    lastAttempt: z.object({ digest: z.string(), at: z.string(), requestId: z.string().nullable() }).nullable(),
  }),
});

const quarantineSchema = z.object({
  digest: z.string(),
  outcome: z.string().describe('how its update ended: rolled-back, neither or undecided'),
  detail: z.string().nullable(),
  requestId: z.string().nullable(),
  since: z.string(),
  liftedAt: z.string().nullable(),
  liftedBy: z.string().nullable(),
});

const out = (p: UpdatePolicyView) => ({
  mode: p.mode,
  window: p.window,
  generation: p.generation,
  updatedBy: p.updatedBy,
  updatedAt: p.updatedAt.toISOString(),
  status: {
    ...p.status,
    decidedAt: iso(p.status.decidedAt),
    availableSince: iso(p.status.availableSince),
    lastAttempt: p.status.lastAttempt ? { ...p.status.lastAttempt, at: p.status.lastAttempt.at.toISOString() } : null,
  },
});

export const updatePolicyRoutes: FastifyPluginAsyncZod = async (app) => {
  const { reads, requests } = app;

  app.get(
    '/api/system/update-policy',
    { config: { access: 'viewer' }, schema: { tags: ['system'], summary: 'The self-update policy (manual, notify, or auto in a weekly UTC window) and what it last decided', response: { 200: policySchema } } },
    async () => out(await reads.updatePolicy.get()),
  );

  app.put(
    '/api/system/update-policy',
    {
      config: { access: 'admin-or-service' },
      schema: {
        tags: ['system'],
        summary: 'Set the self-update policy (an admin, or the control plane with the service token); audited',
        body: putSchema,
        response: { 200: policySchema },
      },
    },
    async (req) => {
      const current = await reads.updatePolicy.get();
      const actor = req.actor();
      const policy = await requests.updatePolicy.put({ mode: req.body.mode, window: req.body.window ?? current.window }, actor);
      req.log.info({ actor: actor.id, mode: policy.mode, window: policy.window, generation: policy.generation }, 'update policy changed');
      return out(policy);
    },
  );

  app.get(
    '/api/system/quarantine',
    {
      config: { access: 'viewer' },
      schema: {
        tags: ['system'],
        summary: 'Builds whose update rolled back or failed: the policy never starts them; a manual POST /api/system/self-update lifts one',
        querystring: z.strictObject({ lifted: z.enum(['true', 'false']).optional().describe('also list lifted entries') }),
        response: { 200: z.array(quarantineSchema) },
      },
    },
    async (req) =>
      (await reads.updatePolicy.quarantine({ includeLifted: req.query.lifted === 'true' })).map((q) => ({
        ...q, since: q.since.toISOString(), liftedAt: iso(q.liftedAt),
      })),
  );
};

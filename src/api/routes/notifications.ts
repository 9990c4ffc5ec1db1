// Webhook notifications (docs/notifications.md), admins only: endpoints added, changed (URL,
// enabled), removed and tested, and the recent deliveries of the outbox with their status. The
// signing secret is answered once, when the endpoint is added, and never logged. The API only
// writes and reads rows: the notifications reconciler sends. A URL whose host is an IP literal a
// webhook may not reach (loopback, link-local, private, the installer's own networks) is refused
// with a 400 naming the rule unless the admin sets allowPrivateNetwork; a host name is judged at
// delivery, after it is resolved, on every connection.
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import {
  urlForAudit, type DeliveryView, type EndpointView,
} from '../../state/notifications.ts';
import type { DeliveryJson, WebhookJson } from '../../contracts/notifications.ts';

export const WEBHOOK_URL_MAX = 2000;

/** A webhook URL: absolute http(s), no credentials in it (the signature authenticates the installer). */
export const webhookUrlSchema = z
  .string({ error: 'url must be a string' })
  .max(WEBHOOK_URL_MAX, `url must be at most ${WEBHOOK_URL_MAX} characters`)
  .superRefine((value, ctx) => {
    let u: URL;
    try {
      u = new URL(value);
    } catch {
      ctx.addIssue({ code: 'custom', message: 'url must be an absolute URL such as https://hooks.example.com/installer' });
      return;
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') ctx.addIssue({ code: 'custom', message: `url must use http or https, not ${u.protocol.replace(/:$/, '')}` });
    else if (u.username || u.password) ctx.addIssue({ code: 'custom', message: 'url must not hold a user name or password: deliveries are signed with the endpoint secret instead' });
    else if (u.hash) ctx.addIssue({ code: 'custom', message: 'url must not have a #fragment' });
  });

const allowPrivateNetworkSchema = z
  .boolean({ error: 'allowPrivateNetwork must be true or false' })
  .describe("Let this endpoint reach loopback, link-local, private and reserved addresses and the installer's own networks (default false)");

const endpointSchema = z.object({
  id: z.string(),
  url: z.string(),
  enabled: z.boolean(),
  allowPrivateNetwork: z.boolean(),
  createdBy: z.string(),
  createdAt: z.string(),
  updatedAt: z.string(),
});

const deliverySchema = z.object({
  id: z.string(),
  endpointId: z.string(),
  endpointUrl: z.string(),
  eventId: z.string(),
  eventType: z.string(),
  idempotencyKey: z.string(),
  status: z.enum(['pending', 'delivered', 'failed']),
  attempts: z.number(),
  nextAttemptAt: z.string().nullable(),
  lastAttemptAt: z.string().nullable(),
  lastStatus: z.number().nullable(),
  lastError: z.string().nullable(),
  deliveredAt: z.string().nullable(),
  failedAt: z.string().nullable(),
  createdAt: z.string(),
});

const params = z.strictObject({ id: z.uuid({ error: 'id must be a webhook endpoint id (a UUID)' }) });

const iso = (d: Date | null) => (d ? d.toISOString() : null);
const out = (e: EndpointView): WebhookJson => ({ id: e.id, url: e.url, enabled: e.enabled, allowPrivateNetwork: e.allowPrivateNetwork, createdBy: e.createdBy, createdAt: e.createdAt.toISOString(), updatedAt: e.updatedAt.toISOString() });
const outDelivery = (d: DeliveryView): DeliveryJson => ({
  ...d, nextAttemptAt: iso(d.nextAttemptAt), lastAttemptAt: iso(d.lastAttemptAt), deliveredAt: iso(d.deliveredAt), failedAt: iso(d.failedAt), createdAt: d.createdAt.toISOString(),
});

export const notificationRoutes: FastifyPluginAsyncZod = async (app) => {
  const { reads, requests } = app;
  /** One line per change, naming who did it; never the secret. */
  const logged = (req: FastifyRequest, endpoint: string, change: Record<string, unknown>) => {
    req.log.info({ actor: req.actor().id, endpoint, ...change }, 'webhook changed');
  };

  app.get(
    '/api/notifications/webhooks',
    {
      config: { access: 'admin' },
      schema: { tags: ['notifications'], summary: 'Webhook endpoints (never their secrets)', response: { 200: z.array(endpointSchema) } },
    },
    async () => (await reads.notifications.endpoints()).map(out),
  );

  app.post(
    '/api/notifications/webhooks',
    {
      config: { access: 'admin' },
      schema: {
        tags: ['notifications'],
        summary: 'Add a webhook endpoint, enabled; the answer holds its signing secret, shown this once',
        body: z.strictObject({ url: webhookUrlSchema, allowPrivateNetwork: allowPrivateNetworkSchema.optional() }),
        response: { 201: endpointSchema.extend({ secret: z.string().describe('HMAC-SHA256 key of x-installer-signature; not shown again') }) },
      },
    },
    async (req, reply) => {
      const { endpoint, secret } = await requests.notifications.add({ url: req.body.url, allowPrivateNetwork: req.body.allowPrivateNetwork ?? false, actor: req.actor() });
      logged(req, endpoint.id, { change: 'added', url: urlForAudit(endpoint.url), ...(endpoint.allowPrivateNetwork ? { allowPrivateNetwork: true } : {}) });
      return reply.status(201).send({ ...out(endpoint), secret });
    },
  );

  app.patch(
    '/api/notifications/webhooks/:id',
    {
      config: { access: 'admin' },
      schema: {
        tags: ['notifications'],
        summary: "Change a webhook endpoint's URL, disable or enable it (a disabled one keeps what it is owed until enabled again), or allow it private networks",
        params,
        body: z
          .strictObject({ url: webhookUrlSchema.optional(), enabled: z.boolean({ error: 'enabled must be true or false' }).optional(), allowPrivateNetwork: allowPrivateNetworkSchema.optional() })
          .refine((b) => b.url !== undefined || b.enabled !== undefined || b.allowPrivateNetwork !== undefined, 'give url or enabled or allowPrivateNetwork'),
        response: { 200: endpointSchema },
      },
    },
    async (req) => {
      const after = await requests.notifications.change(req.params.id, req.body, req.actor());
      logged(req, after.id, { change: 'changed', ...(req.body.url !== undefined ? { url: urlForAudit(req.body.url) } : {}), ...(req.body.enabled !== undefined ? { enabled: req.body.enabled } : {}), ...(req.body.allowPrivateNetwork !== undefined ? { allowPrivateNetwork: req.body.allowPrivateNetwork } : {}) });
      return out(after);
    },
  );

  app.delete(
    '/api/notifications/webhooks/:id',
    {
      config: { access: 'admin' },
      schema: { tags: ['notifications'], summary: 'Remove a webhook endpoint and the deliveries it is still owed', params, response: { 200: z.object({ removed: z.string() }) } },
    },
    async (req) => {
      await requests.notifications.remove(req.params.id, req.actor());
      logged(req, req.params.id, { change: 'removed' });
      return { removed: req.params.id };
    },
  );

  app.post(
    '/api/notifications/webhooks/:id/test',
    {
      config: { access: 'admin' },
      schema: {
        tags: ['notifications'],
        summary: 'Queue a `test` event for this endpoint; follow it in the deliveries',
        params,
        response: { 202: z.object({ eventId: z.string(), idempotencyKey: z.string() }) },
      },
    },
    async (req, reply) => {
      const queued = await requests.notifications.test(req.params.id, req.actor());
      logged(req, req.params.id, { change: 'test', delivery: queued.idempotencyKey });
      return reply.status(202).send(queued);
    },
  );

  app.get(
    '/api/notifications/deliveries',
    {
      config: { access: 'admin' },
      schema: {
        tags: ['notifications'],
        summary: 'Recent deliveries, newest first: pending (with the next attempt), delivered, or failed (gave up)',
        // Like every read, unknown parameters are ignored.
        querystring: z.object({
          // Decimal digits only: Number() would also take ' 5', '5.0', '0x10' and '1e2'.
          limit: z
            .string()
            .regex(/^\d{1,9}$/, 'limit must be a whole number')
            .transform(Number)
            .pipe(z.number().min(1, 'limit must be at least 1').max(500, 'limit must be at most 500'))
            .default(100)
            .describe('Rows to return (default 100, at most 500)'),
          endpointId: z.uuid({ error: 'endpointId must be a webhook endpoint id (a UUID)' }).optional(),
          status: z.enum(['pending', 'delivered', 'failed'], { error: 'status must be pending, delivered or failed' }).optional(),
        }),
        response: { 200: z.array(deliverySchema) },
      },
    },
    async (req) => (await reads.notifications.deliveries({ limit: req.query.limit, ...(req.query.endpointId ? { endpointId: req.query.endpointId } : {}), ...(req.query.status ? { status: req.query.status } : {}) })).map(outDelivery),
  );
};

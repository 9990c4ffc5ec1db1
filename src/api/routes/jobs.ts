// Platform actions as desired-state requests: a job is queued (or a cancel of one), and read back.
// Routes write requests and read state; the jobs controller does the work (architecture.md).
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { freshness } from '../observed-reads.ts';
import { JOB_KINDS, REQUESTABLE_KINDS } from '../../contracts/job-kinds.ts';
import { badRequest, notFound, unavailable } from '../../errors.ts';
import { LIST_LIMIT, limitParam } from '../limit-param.ts';
import { accepted, jobIdParams, jobSchema, viewJob } from './job-view.ts';

const SERVICE_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$/;
const limitQuery = limitParam(LIST_LIMIT, 'Rows');

export const jobRoutes: FastifyPluginAsyncZod = async (app) => {
  const { reads, requests } = app;

  async function checkServices(services: string[] | undefined): Promise<string[]> {
    if (!services?.length) return [];
    // The service list as the observer last read it from the compose file (refreshed when stale).
    const row = await reads.observed.fresh('platform', freshness(app.settings).fast);
    const known = row?.data?.services;
    if (!known) {
      throw unavailable(`cannot read the platform's services: ${row?.data?.servicesError ?? 'the platform has not been observed yet'}`);
    }
    const unknown = services.filter((s) => !known.includes(s));
    if (unknown.length) {
      throw badRequest(`unknown service${unknown.length > 1 ? 's' : ''}: ${unknown.join(', ')} (the platform has: ${known.join(', ') || 'none'})`);
    }
    return [...new Set(services)];
  }

  app.post(
    '/api/deployment/jobs',
    {
      config: { access: 'operator' },
      schema: {
        tags: ['deployment'],
        summary: 'Request a platform action; answered 202 with the jobId to follow',
        // Strict: a misspelled field (`service` for `services`) must not act on the whole platform.
        body: z.strictObject({
          action: z.enum(REQUESTABLE_KINDS),
          services: z.array(z.string().regex(SERVICE_NAME, 'must be a compose service name')).max(50).optional(),
        }),
        response: { 202: accepted },
      },
    },
    async (req, reply) => {
      const { action } = req.body;
      if (req.body.services?.length && !JOB_KINDS[action].takesServices) throw badRequest(`services: ${action} acts on the whole platform and takes no services`);
      const services = await checkServices(req.body.services);
      const jobId = await requests.jobs.create({ kind: action, params: services.length ? { services } : {}, actor: req.actor() });
      return reply.status(202).send({ jobId, kind: action, status: 'queued' as const });
    },
  );

  app.post(
    '/api/deployment/jobs/:jobId/cancel',
    {
      config: { access: 'operator' },
      schema: {
        tags: ['deployment'],
        summary: 'Cancel a queued or running job (a cancel-job request; the cancelled job ends failed)',
        params: jobIdParams,
        response: { 202: accepted.extend({ targetJobId: z.string() }) },
      },
    },
    async (req, reply) => {
      const jobId = await requests.jobs.cancel(req.params.jobId, req.actor());
      return reply.status(202).send({ jobId, kind: 'cancel-job', status: 'queued' as const, targetJobId: req.params.jobId });
    },
  );

  app.get(
    '/api/deployment/jobs',
    {
      config: { access: 'viewer' },
      schema: {
        tags: ['deployment'],
        summary: 'Recent jobs, newest first',
        querystring: z.object({ limit: limitQuery }),
        response: { 200: z.array(jobSchema) },
      },
    },
    async (req) => (await reads.jobs.list({ limit: req.query.limit })).map(viewJob),
  );

  app.get(
    '/api/deployment/jobs/:jobId',
    { config: { access: 'viewer' }, schema: { tags: ['deployment'], summary: 'One job and its status', params: jobIdParams, response: { 200: jobSchema } } },
    async (req) => {
      const job = await reads.jobs.get(req.params.jobId);
      if (!job) throw notFound(`no job ${req.params.jobId}`);
      return viewJob(job);
    },
  );
};

// Host migration: the VM user that deploys substitute for <USER>, and the one-off run of
// migrate-host.sh on the host as a job (followed through the job log stream).
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { AppError } from '../../errors.ts';

/** POSIX portable user name, as useradd accepts it by default. */
export const VM_USER = /^[a-z_][a-z0-9_-]{0,31}$/;
export const VM_USER_RULE = 'must be a POSIX user name: lower-case letters, digits, _ and -, starting with a letter or _, at most 32 characters';

export const migrateRoutes: FastifyPluginAsyncZod = async (app) => {
  const { reads, requests, settings } = app;

  app.get(
    '/api/migrate',
    {
      config: { access: 'admin' },
      schema: {
        tags: ['migrate'],
        summary: 'What a host migration would use, and the last one',
        response: {
          200: z.object({
            vmUser: z.string().nullable(),
            platformUrlSet: z.boolean(),
            scriptPath: z.string(),
            lastJob: z.object({ jobId: z.string(), phase: z.string(), detail: z.string().nullable(), createdAt: z.string() }).nullable(),
          }),
        },
      },
    },
    async () => {
      const last = await reads.hostMigration.lastJob();
      return {
        vmUser: await reads.hostMigration.vmUser(),
        platformUrlSet: Boolean(settings.PLATFORM_URL),
        scriptPath: settings.MIGRATE_HOST_SCRIPT_PATH,
        lastJob: last ? { jobId: last.jobId, phase: last.phase, detail: last.detail, createdAt: last.createdAt.toISOString() } : null,
      };
    },
  );

  app.post(
    '/api/migrate/vm-user',
    {
      config: { access: 'admin' },
      preValidation: async (req) => {
        const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
        if (type !== 'application/json') throw new AppError('unsupported_media_type', 'send the body as application/json: {"vmUser": "<name>"}');
      },
      schema: {
        tags: ['migrate'],
        summary: 'Set the SSH/OS user of the VM, substituted for <USER> in generated .env values',
        body: z.object({ vmUser: z.string().regex(VM_USER, VM_USER_RULE) }).strict(),
        response: { 200: z.object({ vmUser: z.string(), updatedBy: z.string() }) },
      },
    },
    async (req) => {
      const actor = req.actor();
      await requests.hostMigration.setVmUser(req.body.vmUser, actor.id);
      req.log.info({ vmUser: req.body.vmUser, actor: actor.id }, 'VM user set');
      return { vmUser: req.body.vmUser, updatedBy: actor.id };
    },
  );

  app.post(
    '/api/migrate/run-host',
    {
      config: { access: 'admin' },
      schema: {
        tags: ['migrate'],
        summary: 'Run migrate-host.sh on the host (destructive, one-way: read its dry run first); follow the job log stream',
        response: { 202: z.object({ jobId: z.string() }) },
      },
    },
    async (req, reply) => {
      const jobId = await requests.hostMigration.request({ actor: req.actor(), platformUrlSet: Boolean(settings.PLATFORM_URL) });
      return reply.status(202).send({ jobId });
    },
  );
};

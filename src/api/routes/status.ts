// The platform at a glance: its containers as last observed, the jobs running and queued, and the
// last action of each kind.
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ageFields, freshness } from '../observed-reads.ts';
import { ageOf } from '../../state/observed.ts';
import type { ActionKind } from '../../contracts/audit.ts';
import { jobSchema, viewJob } from './job-view.ts';

export const statusRoutes: FastifyPluginAsyncZod = async (app) => {
  const { reads, settings } = app;

  app.get(
    '/api/deployment/status',
    {
      config: { access: 'viewer' },
      schema: {
        tags: ['deployment'],
        summary: "The platform's containers, running and queued jobs, and the last action of each kind",
        response: {
          200: z.object({
            project: z.string(),
            containers: z.array(z.object({ name: z.string(), service: z.string(), state: z.string(), health: z.string().nullable(), image: z.string(), digest: z.string().nullable(), since: z.string().nullable() })),
            engineError: z.string().optional(),
            running: z.array(jobSchema),
            queued: z.array(jobSchema),
            lastActions: z.record(z.string(), z.object({ status: z.string(), actor: z.string(), at: z.string(), exitCode: z.number().nullable(), detail: z.string().nullable() })),
            ...ageFields,
          }),
        },
      },
    },
    async () => {
      // The containers as the observer last saw them; a row observed before the latest job ended is
      // stale too, so a client that waited for its job then reads the job's result.
      const row = await reads.observed.sinceLastJob('platform', freshness(settings).fast);
      const containers = row?.data?.containers ?? [];
      const engineError = row ? row.data?.engineError : 'the platform has not been observed yet: no observer answered in time';
      const active = await reads.jobs.list({ limit: 200, phases: ['queued', 'running'] });
      const last = await reads.audit.lastOfEachKind();
      return {
        project: settings.PLATFORM_PROJECT,
        containers,
        ...(engineError ? { engineError } : {}),
        running: active.filter((j) => j.phase === 'running').map(viewJob),
        queued: active.filter((j) => j.phase === 'queued').reverse().map(viewJob),
        lastActions: Object.fromEntries(
          last.map((a) => [a.kind as ActionKind, { status: a.status, actor: a.actor, at: new Date(a.created_at).toISOString(), exitCode: a.exit_code, detail: a.detail }]),
        ),
        ...ageOf(row),
      };
    },
  );
};

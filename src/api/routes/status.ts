// The platform at a glance: its containers as last observed, the jobs running and queued, and the
// last action of each kind.
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { ageFields, freshness } from '../observed-reads.ts';
import { ageOf, type ObservedData } from '../../state/observed.ts';
import type { ActionKind } from '../../contracts/audit.ts';
import { jobSchema, viewJob } from './job-view.ts';
import { platformRuntimeSchema, swarmSchema } from '../swarm-schema.ts';

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
            runtime: platformRuntimeSchema,
            swarm: swarmSchema.optional().describe('With runtime swarm: the nodes, and the stack\'s services and tasks (containers are its current tasks then)'),
            swarmError: z.string().optional().describe('With runtime swarm: why the Swarm could not be read (the engine is no manager, say)'),
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
      const runtime = settings.PLATFORM_RUNTIME;
      const swarm = runtime === 'swarm' ? swarmPart(row?.data) : {};
      const active = await reads.jobs.list({ limit: 200, phases: ['queued', 'running'] });
      const last = await reads.audit.lastOfEachKind();
      return {
        project: settings.PLATFORM_PROJECT,
        containers,
        ...(engineError ? { engineError } : {}),
        runtime,
        ...swarm,
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

/** The Swarm as the platform's row holds it, or why it holds none (a row observed under the Compose runtime says nothing of it). */
function swarmPart(data: ObservedData['platform'] | null | undefined): Pick<ObservedData['platform'], 'swarm' | 'swarmError'> {
  if (!data) return { swarmError: 'the Swarm has not been observed yet: no observer answered in time' };
  if (data.runtime !== 'swarm') return { swarmError: 'the Swarm has not been observed yet: the platform was last observed as a Compose project' };
  return data.swarm ? { swarm: data.swarm } : { swarmError: data.swarmError ?? 'the Swarm could not be read' };
}

// The state charts the controllers run, drawn by the operator UI: each chart's graph
// (toDirectedGraph, flattened) and the state its recent actors are in. Read only.
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { unavailable } from '../../errors.ts';
import type { MachinesPort } from '../../contracts/ports.ts';

const node = z.object({
  id: z.string(),
  key: z.string(),
  parent: z.string().nullable(),
  type: z.enum(['atomic', 'compound', 'parallel', 'final', 'history']),
  initial: z.string().nullable(),
});
const edge = z.object({ id: z.string(), source: z.string(), target: z.string(), event: z.string(), label: z.string(), guard: z.string().nullable() });
const instance = z.object({
  id: z.string(),
  label: z.string(),
  phase: z.string(),
  state: z.string().nullable(),
  stateIds: z.array(z.string()),
  at: z.string(),
  note: z.string().optional(),
});
const chart = z.object({
  id: z.string(),
  title: z.string(),
  description: z.string(),
  version: z.string(),
  rootId: z.string(),
  nodes: z.array(node),
  edges: z.array(edge),
  instances: z.array(instance).describe('Recent actors of the chart, newest first, with the state each is in'),
});

/** `machines`: the charts and their actors; absent, the route answers 503. */
export const machineRoutes: FastifyPluginAsyncZod<{ machines?: MachinesPort }> = async (app, { machines }) => {
  app.get(
    '/api/machines',
    {
      config: { access: 'viewer' },
      schema: {
        tags: ['system'],
        summary: "Each state chart's graph (xstate/graph toDirectedGraph, flattened) and the current state of its recent actors",
        response: { 200: z.object({ charts: z.array(chart) }) },
      },
    },
    async () => {
      if (!machines) throw unavailable('the state charts are not wired into this installer');
      return { charts: await machines.charts() };
    },
  );
};

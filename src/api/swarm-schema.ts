// The platform's runtime and, on a Swarm, its nodes, the stack's services and tasks as the API
// serves them (src/contracts/swarm.ts): in the platform status, named in the update check.
import { z } from 'zod';
import type { PlatformRuntime, SwarmNodeView, SwarmObservation, SwarmServiceView, SwarmTaskView } from '../contracts/swarm.ts';

export const platformRuntimeSchema = z
  .enum(['compose', 'swarm'])
  .describe('Where the platform runs (PLATFORM_RUNTIME): a Compose project on this host, or a stack on the Swarm this host\'s engine manages') satisfies z.ZodType<PlatformRuntime>;

const nodeSchema = z.object({
  id: z.string(),
  hostname: z.string(),
  role: z.enum(['manager', 'worker']),
  leader: z.boolean(),
  state: z.string().describe('ready, down, disconnected, unknown'),
  availability: z.string().describe('active, pause, drain'),
  managerReachability: z.string().nullable(),
  engineVersion: z.string().nullable(),
  address: z.string().nullable(),
  message: z.string().nullable(),
}) satisfies z.ZodType<SwarmNodeView>;

const serviceSchema = z.object({
  id: z.string(),
  name: z.string().describe('The Swarm\'s name, <stack>_<service>'),
  service: z.string().describe('The compose service'),
  mode: z.enum(['replicated', 'global', 'replicated-job', 'global-job']),
  desiredReplicas: z.number().nullable(),
  runningReplicas: z.number().nullable(),
  image: z.string(),
  digest: z.string().nullable(),
  updateState: z.string().nullable().describe('The last rolling update\'s state; null if never updated'),
  updateMessage: z.string().nullable(),
}) satisfies z.ZodType<SwarmServiceView>;

const taskSchema = z.object({
  id: z.string(),
  serviceId: z.string(),
  service: z.string(),
  slot: z.number().nullable().describe('null for a global service\'s task (one per node)'),
  nodeId: z.string().nullable(),
  node: z.string().nullable().describe('The node\'s hostname'),
  state: z.string(),
  desiredState: z.string(),
  error: z.string().nullable(),
  message: z.string().nullable(),
  timestamp: z.string().nullable(),
  createdAt: z.string().nullable(),
  containerId: z.string().nullable(),
  image: z.string(),
  digest: z.string().nullable(),
  current: z.boolean().describe('The newest task of its slot; false for an earlier failed one kept as its history'),
}) satisfies z.ZodType<SwarmTaskView>;

export const swarmSchema = z
  .object({ nodes: z.array(nodeSchema), services: z.array(serviceSchema), tasks: z.array(taskSchema) })
  .describe('The Swarm\'s nodes and the stack\'s services and tasks (each slot\'s current task and its most recent failed ones)') satisfies z.ZodType<SwarmObservation>;

// A job as the API shows it: the schema every job route answers with, and the view of a stored job.
import { z } from 'zod';
import type { JobView } from '../../state/jobs.ts';
import { JOB_KIND_NAMES } from '../../contracts/job-kinds.ts';
import { conditionSchema } from '../condition-schema.ts';

export const jobSchema = z.object({
  jobId: z.string(),
  kind: z.enum(JOB_KIND_NAMES),
  services: z.array(z.string()),
  targetJobId: z.string().optional(),
  actor: z.string(),
  phase: z.enum(['queued', 'running', 'completed', 'failed']),
  state: z.string().nullable().describe('Current state of the job chart'),
  detail: z.string().nullable(),
  exitCode: z.number().nullable(),
  createdAt: z.string(),
  startedAt: z.string().nullable(),
  finishedAt: z.string().nullable(),
  hungDeadline: z.string().nullable(),
  cancelRequestedBy: z.string().nullable(),
  generation: z.number().int().describe('The request\'s generation: 1, bumped by a cancel'),
  observedGeneration: z.number().int().nullable().describe('The generation the jobs controller last acted on; below `generation` while a cancel is not yet seen; null until the controller looked'),
  conditions: z.array(conditionSchema).describe('Progressing and Succeeded (how the job ended), and the runtime\'s Reconciled once an attempt failed'),
});

const iso = (d: Date | null) => (d ? d.toISOString() : null);
export const viewJob = (j: JobView): z.infer<typeof jobSchema> => ({
  jobId: j.jobId,
  kind: j.kind,
  services: j.params.services ?? [],
  ...(j.params.targetJobId ? { targetJobId: j.params.targetJobId } : {}),
  actor: j.actor,
  phase: j.phase,
  state: j.state,
  detail: j.detail,
  exitCode: j.exitCode,
  createdAt: j.createdAt.toISOString(),
  startedAt: iso(j.startedAt),
  finishedAt: iso(j.finishedAt),
  hungDeadline: iso(j.hungDeadline),
  cancelRequestedBy: j.cancelRequestedBy,
  generation: j.generation,
  observedGeneration: j.observedGeneration,
  conditions: j.conditions,
});

export const jobIdParams = z.object({ jobId: z.uuid({ error: 'must be a job id (a UUID)' }) });
export const accepted = z.object({ jobId: z.string(), kind: z.string(), status: z.literal('queued') });

// A condition as the API serves it (src/contracts/conditions.ts): on a job, on an update of the
// history, and in the diagnostics bundle's observed parts.
import { z } from 'zod';
import type { Condition } from '../contracts/conditions.ts';

export const conditionSchema = z.object({
  type: z.string().describe('Progressing, Succeeded, Reconciled, … (observed rows: EngineReachable, UpdateAvailable, …)'),
  status: z.enum(['True', 'False', 'Unknown']),
  reason: z.string(),
  message: z.string(),
  observedAt: z.string().describe('When its writer saw it hold (ISO 8601)'),
}) satisfies z.ZodType<Condition>;

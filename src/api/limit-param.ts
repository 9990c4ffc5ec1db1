// The `limit` query parameter of the paged lists (the audit trail, the update history).
import { z } from 'zod';

/**
 * `limit`: decimal digits only (Number() would also take ' 5', '5.0', '0x10' and '1e2'), from 1 to
 * `bounds.max`, `bounds.default` when absent; `rows` names what is counted in its description.
 */
export const limitParam = (bounds: { default: number; max: number }, rows: string) =>
  z
    .string()
    .regex(/^\d{1,9}$/, 'must be an integer')
    .transform(Number)
    .pipe(z.number().min(1, 'must be at least 1').max(bounds.max, `must be at most ${bounds.max}`))
    .default(bounds.default)
    .describe(`${rows} to return (default ${bounds.default}, at most ${bounds.max})`);

/** The bounds of the job list and the audit trail pages. */
export const LIST_LIMIT = { default: 50, max: 500 };

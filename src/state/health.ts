import { sql, type Kysely } from 'kysely';
import type { DB } from '../db/schema.ts';

/** True when the database answers a trivial query within the timeout. */
export async function databaseUp(db: Kysely<DB>, timeoutMs = 2_000): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  try {
    return await Promise.race([sql`select 1`.execute(db).then(() => true, () => false), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The database check behind GET /api/health: callers at the same moment share one query, and an
 * answer is reused for `maxAgeMs`. Health is polled by the container healthcheck, the update
 * overlay and load balancers; a quarter-second-old answer serves them all as well, without one
 * query per poll (docs/adr/0003-health-without-auth.md).
 */
/** How long GET /api/health reuses an answer about the database. */
export const HEALTH_MAX_AGE_MS = 250;

export class DatabaseProbe {
  private inflight: Promise<boolean> | null = null;
  private last: { at: number; up: boolean } | null = null;

  constructor(
    private readonly db: Kysely<DB>,
    private readonly maxAgeMs = HEALTH_MAX_AGE_MS,
    private readonly timeoutMs = 2_000,
  ) {}

  up(): Promise<boolean> {
    if (this.last && Date.now() - this.last.at < this.maxAgeMs) return Promise.resolve(this.last.up);
    this.inflight ??= databaseUp(this.db, this.timeoutMs)
      .then((up) => {
        this.last = { at: Date.now(), up };
        return up;
      })
      .finally(() => {
        this.inflight = null;
      });
    return this.inflight;
  }
}

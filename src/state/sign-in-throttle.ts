// Sign-in attempts counted in the database, so that every API process on it shares the counters
// (docs/adr/0016-user-management.md). An attempt is counted before its password is checked, in one
// statement whose row locks order concurrent attempts: of N at once, only those that find room
// under every limit go on to the check. A successful one is given back, so the counters hold the
// failures and the attempts in flight. Each key has a one-minute window that starts at its first
// attempt.
import { sql, type Kysely } from 'kysely';
import type { DB } from '../db/schema.ts';

export const WINDOW_SECONDS = 60;

/** A counter and its limit per window. */
export interface CounterLimit {
  key: string;
  limit: number;
}

export interface CountedAttempt {
  key: string;
  attempts: number;
  /** The window this attempt was counted in (exact, for giving it back). */
  window: string;
  /** Seconds until the window ends (at least 1). */
  retryAfter: number;
  /** Whether this counter is past its limit. */
  over: boolean;
}

/**
 * Counts one attempt on every counter, atomically. The caller checks the password only when no
 * counter is past its limit. A refused attempt is given back on the counters that had room, so
 * that a limit reached on one (say, the address) does not use up another (the user name).
 */
export async function countAttempt(db: Kysely<DB>, counters: readonly CounterLimit[]): Promise<{ counted: CountedAttempt[]; refusedBy: CountedAttempt[] }> {
  // Sorted: two attempts lock the rows of the keys they share in the same order.
  const sorted = [...counters].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const window = sql`make_interval(secs => ${WINDOW_SECONDS})`;
  const rows = await sql<{ key: string; attempts: number; window: string; retry_after: number }>`
    insert into sign_in_counters as c (key, window_start, attempts)
    values ${sql.join(sorted.map((c) => sql`(${c.key}, now(), 1)`))}
    on conflict (key) do update set
      window_start = case when c.window_start <= now() - ${window} then now() else c.window_start end,
      attempts = case when c.window_start <= now() - ${window} then 1 else c.attempts + 1 end
    returning c.key, c.attempts, c.window_start::text as window,
      greatest(1, ceil(extract(epoch from (c.window_start + ${window} - now()))))::int as retry_after`.execute(db);
  const limitOf = new Map(sorted.map((c) => [c.key, c.limit]));
  const counted = rows.rows.map((r) => ({ key: r.key, attempts: r.attempts, window: r.window, retryAfter: r.retry_after, over: r.attempts > limitOf.get(r.key)! }));
  const refusedBy = counted.filter((c) => c.over);
  if (refusedBy.length) await giveBack(db, counted.filter((c) => !c.over));
  return { counted, refusedBy };
}

/** Takes back attempts counted before (a successful sign-in, or one refused elsewhere), in the same window only. */
export async function giveBack(db: Kysely<DB>, counted: readonly Pick<CountedAttempt, 'key' | 'window'>[]): Promise<void> {
  if (!counted.length) return;
  await sql`
    update sign_in_counters as c set attempts = greatest(c.attempts - 1, 0)
    from (values ${sql.join(counted.map((x) => sql`(${x.key}, ${x.window}::timestamptz)`))}) as g(key, window_start)
    where c.key = g.key and c.window_start = g.window_start`.execute(db);
}

/** Removes counters whose window ended a while ago. */
export async function pruneCounters(db: Kysely<DB>): Promise<number> {
  const res = await sql`delete from sign_in_counters where window_start < now() - make_interval(secs => ${WINDOW_SECONDS * 2})`.execute(db);
  return Number(res.numAffectedRows ?? 0);
}

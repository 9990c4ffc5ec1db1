// The history of self-updates with their figures (docs/adr/0031-update-history.md): who moved the
// installer from which build to which, how it ended, and the downtime the installer measured
// itself, from the old backend's last answer to the new backend's first readiness.
import { sql, type Kysely, type Transaction } from 'kysely';
import type { DB, SelfUpdatePhase } from '../db/schema.ts';
import { SPAWNED } from './self-update.ts';
import type { UpdateHistoryEntry } from '../contracts/update-history.ts';
import { conditionsOf } from '../contracts/conditions.ts';

type Conn = Kysely<DB> | Transaction<DB>;

export interface Downtime {
  /** Milliseconds from the old backend's last answer to the new backend's first readiness; null when unknown. */
  ms: number | null;
  /** Why `ms` is null; null when it is known. */
  note: string | null;
}

export const NO_LAST_ANSWER = 'the backend that ran before the switch did not record its last answer (it was killed without a graceful stop, or its build does not measure)';
export const NO_FIRST_READY = 'no backend recorded being ready after the switch while the update was in flight';

/**
 * The downtime from its two ends. Either end unknown, or the ends out of order (a clock that
 * stepped back), gives null with the reason: never a made-up number.
 */
export function downtimeOf(lastAnswerAt: Date | null, firstReadyAt: Date | null): Downtime {
  if (!lastAnswerAt && !firstReadyAt) return { ms: null, note: `${NO_LAST_ANSWER}; ${NO_FIRST_READY}` };
  if (!lastAnswerAt) return { ms: null, note: NO_LAST_ANSWER };
  if (!firstReadyAt) return { ms: null, note: NO_FIRST_READY };
  const ms = firstReadyAt.getTime() - lastAnswerAt.getTime();
  if (ms < 0) {
    return { ms: null, note: `the new backend was ready (${firstReadyAt.toISOString()}) before the old one's last answer (${lastAnswerAt.toISOString()}): the clock moved, the figure is not trusted` };
  }
  return { ms, note: null };
}

/** Writes one end of the downtime on the update whose helper runs; only the first such time counts. */
async function recordEnd(db: Conn, end: 'last_answer_at' | 'first_ready_at', at: Date): Promise<boolean> {
  const res = await db.updateTable('self_update_status').set({ [end]: at }).where('phase', '=', 'helper-running').where(end, 'is', null).executeTakeFirst();
  return Number(res.numUpdatedRows) > 0;
}

/** Written by a backend as it stops: the time of its last answer (the helper's switch is what stops it). */
export const recordLastAnswer = (db: Conn, at: Date): Promise<boolean> => recordEnd(db, 'last_answer_at', at);

/** Written by a backend once it listens: the first backend ready while an update's helper runs is the one the switch started. */
export const recordFirstReady = (db: Conn, at: Date): Promise<boolean> => recordEnd(db, 'first_ready_at', at);

/** Stores the downtime of an update from the two ends recorded on its row (the outcome reconciliation calls it). */
export async function settleDowntime(db: Conn, requestId: string): Promise<Downtime> {
  const row = await db
    .selectFrom('self_update_status')
    .select(['last_answer_at', 'first_ready_at'])
    .where('request_id', '=', requestId)
    .executeTakeFirst();
  if (!row) return { ms: null, note: 'no such update' };
  const d = downtimeOf(row.last_answer_at ? new Date(row.last_answer_at) : null, row.first_ready_at ? new Date(row.first_ready_at) : null);
  await db.updateTable('self_update_status').set({ downtime_ms: d.ms, downtime_note: d.note }).where('request_id', '=', requestId).execute();
  return d;
}

export type HistoryEntry = UpdateHistoryEntry;

const iso = (d: Date | string | null) => (d === null ? null : new Date(d).toISOString());

/** Updates that ran their helper (an aborted preflight changed nothing), newest first; `before` is a request id. */
export async function listUpdateHistory(db: Conn, page: { before?: string; limit: number }): Promise<HistoryEntry[]> {
  let q = db
    .selectFrom('self_update_status as s')
    .innerJoin('self_update_requests as r', 'r.request_id', 's.request_id')
    .select([
      's.request_id', 'r.actor', 'r.actor_email', 's.phase', 's.detail', 's.previous_reference', 's.previous_digest', 's.target_tag', 's.target_digest',
      's.downtime_ms', 's.downtime_note', 's.last_answer_at', 's.first_ready_at', 's.created_at', 's.finished_at', 's.conditions',
    ])
    .where('s.action_id', 'is not', null)
    .where('s.phase', 'in', SPAWNED);
  if (page.before !== undefined) {
    const before = page.before;
    q = q.where(({ eb, refTuple, selectFrom }) =>
      eb(refTuple('s.created_at', 's.request_id'), '<', selectFrom('self_update_status as cursor').select(['cursor.created_at', 'cursor.request_id']).where('cursor.request_id', '=', before).$asTuple('created_at', 'request_id')),
    );
  }
  const rows = await q.orderBy('s.created_at', 'desc').orderBy('s.request_id', 'desc').limit(page.limit).execute();
  return rows.map((r) => ({
    requestId: r.request_id,
    actor: { id: r.actor, email: r.actor_email },
    from: { reference: r.previous_reference, digest: r.previous_digest },
    to: { tag: r.target_tag, digest: r.target_digest },
    outcome: r.phase,
    detail: r.detail,
    downtimeMs: r.downtime_ms,
    downtimeNote: r.downtime_ms !== null ? null : r.phase === 'helper-running' ? 'the update is still in flight' : (r.downtime_note ?? 'not measured'),
    lastAnswerAt: iso(r.last_answer_at),
    firstReadyAt: iso(r.first_ready_at),
    startedAt: iso(r.created_at)!,
    finishedAt: iso(r.finished_at),
    conditions: conditionsOf(r.conditions),
  }));
}

/** Whether a self-update with this request id is in the history (a cursor must name one). */
export async function historyEntryExists(db: Conn, requestId: string): Promise<boolean> {
  const r = await db.selectFrom('self_update_status').select('request_id').where('request_id', '=', requestId).where('action_id', 'is not', null).where('phase', 'in', SPAWNED).executeTakeFirst();
  return r !== undefined;
}

/** For /metrics: finished updates by outcome, and the downtime of the last completed one (null when not measured). */
export async function updateHistoryFigures(db: Conn): Promise<{ outcomes: { outcome: SelfUpdatePhase; count: number }[]; lastCompleted: { requestId: string; downtimeMs: number | null } | null }> {
  const [outcomes, last] = await Promise.all([
    db
      .selectFrom('self_update_status')
      .select(['phase', (eb) => eb.fn.countAll<string>().as('count')])
      .where('action_id', 'is not', null)
      .where('phase', 'in', ['completed', 'rolled-back', 'neither', 'undecided'])
      .groupBy('phase')
      .execute(),
    db
      .selectFrom('self_update_status')
      .select(['request_id', 'downtime_ms'])
      .where('phase', '=', 'completed')
      .where('action_id', 'is not', null)
      .orderBy(sql`finished_at desc nulls last`)
      .orderBy('created_at', 'desc')
      .limit(1)
      .executeTakeFirst(),
  ]);
  return {
    outcomes: outcomes.map((o) => ({ outcome: o.phase, count: Number(o.count) })),
    lastCompleted: last ? { requestId: last.request_id, downtimeMs: last.downtime_ms } : null,
  };
}

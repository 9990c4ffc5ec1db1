// Retention, applied in batches (docs/adr/0043-healthy-means-reconciling.md): each batch is one
// short statement of its own, deleting at most `batchRows` rows found through an index, under its own
// statement and lock timeouts, and followed by a pause as long as it took. No statement ever holds
// months of rows, so none reaches the backend's statement timeout, and the API's queries run between
// batches.
import { setTimeout as wait } from 'node:timers/promises';
import { sql, type Kysely, type Transaction } from 'kysely';
import type { DB } from '../db/schema.ts';
import { OUTBOX_RETENTION_DAYS } from './notifications.ts';
import { WINDOW_SECONDS } from './sign-in-throttle.ts';

export interface RetentionLimits {
  /** Job events older than this many days go (JOB_EVENT_RETENTION_DAYS). */
  jobEventDays: number;
  /** Rows per statement. */
  batchRows: number;
  /** Each statement's timeout (its lock wait included), ms. */
  batchTimeoutMs: number;
}

/** What one pass deleted, per table. */
export interface Pruned {
  jobEvents: number;
  deliveries: number;
  signInCounters: number;
}

type Batch = (tx: Transaction<DB>, limit: number) => Promise<bigint | number | undefined>;

/**
 * Events older than the cutoff, oldest first by their index on `at`. The order is what keeps the
 * planner on the index: without it, a limited sequential scan looks cheaper, and reads the whole
 * table when the old rows lie at its end.
 */
const jobEventsBatch = (days: number): Batch => async (tx, limit) =>
  (await sql`delete from deployment_job_events where ctid = any(array(
      select ctid from deployment_job_events where at < now() - make_interval(days => ${days}) order by at limit ${limit}))`.execute(tx)).numAffectedRows;

/**
 * Delivered and failed outbox rows past their retention. The rows of `update.available` stay: they
 * are what makes that event once per digest (src/state/notifications.ts).
 */
const deliveriesBatch: Batch = async (tx, limit) =>
  (await sql`delete from notification_outbox where id = any(array(
      select id from notification_outbox
      where created_at < now() - make_interval(days => ${OUTBOX_RETENTION_DAYS})
        and (delivered_at is not null or failed_at is not null) and event_type <> 'update.available'
      order by created_at limit ${limit}))`.execute(tx)).numAffectedRows;

/** Sign-in counters whose window ended a while ago (sign-ins prune them too, as they go). */
const signInCountersBatch: Batch = async (tx, limit) =>
  (await sql`delete from sign_in_counters where key = any(array(
      select key from sign_in_counters where window_start < now() - make_interval(secs => ${WINDOW_SECONDS * 2}) order by window_start limit ${limit}))`.execute(tx)).numAffectedRows;

/** The longest pause between two batches, ms. */
export const MAX_BATCH_PAUSE_MS = 1_000;

/**
 * Waits between two batches as long as the last one took (at most MAX_BATCH_PAUSE_MS): a pass uses
 * at most half of the database's time, and the API's queries run in the other half instead of
 * queueing behind months of deletes. Resolves early when the pass is stopped.
 */
const pauseAfter = (tookMs: number, signal: AbortSignal) =>
  wait(Math.min(tookMs, MAX_BATCH_PAUSE_MS), undefined, { signal }).catch(() => undefined);

/** Runs `batch` until a batch deletes fewer than `batchRows` rows; returns how many went in all. */
async function drain(db: Kysely<DB>, batch: Batch, limits: RetentionLimits, signal: AbortSignal): Promise<number> {
  let total = 0;
  while (!signal.aborted) {
    const began = performance.now();
    const n = await db.transaction().execute(async (tx) => {
      // `set local`: the limits end with the batch's transaction, whatever connection it ran on.
      await sql`select set_config('statement_timeout', ${String(limits.batchTimeoutMs)}, true), set_config('lock_timeout', ${String(limits.batchTimeoutMs)}, true)`.execute(tx);
      return Number((await batch(tx, limits.batchRows)) ?? 0);
    });
    total += n;
    if (n < limits.batchRows) break;
    await pauseAfter(performance.now() - began, signal);
  }
  return total;
}

/**
 * One pass of retention over every table that has one. A failed batch throws (what went before it
 * stays deleted); the next pass goes on from there.
 */
export async function pruneExpired(db: Kysely<DB>, limits: RetentionLimits, signal: AbortSignal): Promise<Pruned> {
  const jobEvents = await drain(db, jobEventsBatch(limits.jobEventDays), limits, signal);
  const deliveries = await drain(db, deliveriesBatch, limits, signal);
  const signInCounters = await drain(db, signInCountersBatch, limits, signal);
  return { jobEvents, deliveries, signInCounters };
}

// Retention as a keyless reconciler on the shared runtime (docs/adr/0043-healthy-means-reconciling.md):
// each pass prunes every table with a retention in batches (src/state/retention.ts). The queue's
// poll runs a pass at start (never awaited) and then at every interval. A pass that fails (a batch
// past its timeout, the database away) throws: the runtime logs it, retries it with its bounded
// backoff, and the next interval runs it again; nothing ends the process.
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DB } from '../src/db/schema.ts';
import { pruneExpired, type RetentionLimits } from '../src/state/retention.ts';
import { done, type Backoff, type Reconciler, type ReconcileResult, type RowStatus } from './runtime/reconcile.ts';
import { WorkQueue } from './runtime/work-queue.ts';

export interface RetentionDeps {
  db: Kysely<DB>;
  logger: Logger;
  limits: RetentionLimits;
  /** Between two passes, ms. */
  intervalMs: number;
  backoff?: Backoff;
}

export class RetentionReconciler implements Reconciler<null> {
  readonly name = 'retention';

  constructor(private readonly d: Pick<RetentionDeps, 'db' | 'logger' | 'limits'>) {}

  async reconcile(_key: null, signal: AbortSignal): Promise<ReconcileResult> {
    const pruned = await pruneExpired(this.d.db, this.d.limits, signal);
    if (pruned.jobEvents || pruned.deliveries || pruned.signInCounters) {
      this.d.logger.info({ pruned, jobEventRetentionDays: this.d.limits.jobEventDays }, 'pruned rows past their retention');
    }
    // The queue's poll is the interval: nothing to requeue.
    return done();
  }
}

/** Retention owns no row: what the runtime would write on one goes to the log. */
function retentionStatus(logger: Logger): RowStatus<null> {
  return {
    recordError: async (_key, condition) => {
      logger.warn({ reason: condition.message }, 'retention: the pass failed; it runs again later');
    },
    fail: async (_key, detail) => {
      logger.warn({ reason: detail }, 'retention: the pass failed again; it runs at the next interval');
    },
  };
}

/** The retention passes: a keyless work queue polled at the interval. */
export function retentionQueue(d: RetentionDeps): WorkQueue<null> {
  return new WorkQueue<null>({
    reconciler: new RetentionReconciler(d),
    status: retentionStatus(d.logger),
    logger: d.logger,
    pollMs: d.intervalMs,
    ...(d.backoff ? { backoff: d.backoff } : {}),
  });
}

// Retention as a keyless reconciler (docs/adr/0043-healthy-means-reconciling.md): each pass prunes
// every table with a retention in batches (src/state/retention.ts) and asks to run again after the
// interval. A pass that fails (a batch past its timeout, the database away) throws: the error is
// logged, the pass runs again after a backoff and the interval, and nothing ends the process.
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DB } from '../src/db/schema.ts';
import { pruneExpired, type RetentionLimits } from '../src/state/retention.ts';
import { backoffDelay, DEFAULT_BACKOFF, requeueAfter, type Backoff, type Reconciler, type ReconcileResult } from './runtime/reconcile.ts';

export interface RetentionDeps {
  db: Kysely<DB>;
  logger: Logger;
  limits: RetentionLimits;
  /** Between two passes, ms. */
  intervalMs: number;
}

export class RetentionReconciler implements Reconciler<null> {
  readonly name = 'retention';

  constructor(private readonly d: RetentionDeps) {}

  async reconcile(_key: null, signal: AbortSignal): Promise<ReconcileResult> {
    const pruned = await pruneExpired(this.d.db, this.d.limits, signal);
    if (pruned.jobEvents || pruned.deliveries || pruned.signInCounters) {
      this.d.logger.info({ pruned, jobEventRetentionDays: this.d.limits.jobEventDays }, 'pruned rows past their retention');
    }
    return requeueAfter(this.d.intervalMs, 'the next retention pass');
  }
}

/**
 * Runs a keyless reconciler in the background: at once on `start` (never awaited by it), then
 * whenever its result asks; a throw is retried with the bounded backoff, then at the interval.
 * Stands in for the shared runtime's keyless driver until this reconciler runs on it.
 */
export class KeylessSchedule {
  private readonly abort = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private failures = 0;

  constructor(
    private readonly reconciler: Reconciler<null>,
    private readonly o: { logger: Logger; intervalMs: number; backoff?: Backoff },
  ) {}

  start(): void {
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.abort.abort();
    clearTimeout(this.timer);
    await this.running;
  }

  private schedule(ms: number): void {
    if (this.abort.signal.aborted) return;
    this.timer = setTimeout(() => {
      this.running = this.runOnce().finally(() => {
        this.running = undefined;
      });
    }, ms);
    this.timer.unref();
  }

  private async runOnce(): Promise<void> {
    let next = this.o.intervalMs;
    try {
      const result = await this.reconciler.reconcile(null, this.abort.signal);
      this.failures = 0;
      if (result.outcome === 'requeue') next = result.afterMs;
      else if (result.outcome === 'terminal') this.o.logger.error({ reconciler: this.reconciler.name, reason: result.error.message }, `${this.reconciler.name}: the pass cannot succeed; trying again at the next one`);
    } catch (err) {
      this.failures++;
      const retry = backoffDelay(this.o.backoff ?? DEFAULT_BACKOFF, this.failures);
      if (retry === null) this.failures = 0;
      next = Math.min(retry ?? this.o.intervalMs, this.o.intervalMs);
      if (!this.abort.signal.aborted) {
        this.o.logger.warn({ reconciler: this.reconciler.name, reason: (err as Error).message, attempt: this.failures || undefined, retryInMs: next }, `${this.reconciler.name}: the pass failed; it runs again later`);
      }
    }
    this.schedule(next);
  }
}

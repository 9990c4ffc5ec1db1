// The runtime every reconciler runs on (docs/adr/0042-reconcile-contract.md). Keys come from claims
// (woken by NOTIFY and a slow poll), from `requeueAfter` timers and from retries; a keyless
// reconciler has the one key `null`, run at every wake. Per key, one reconcile at a time. What a
// reconcile returns decides what comes next: `done` lets the key go, `requeueAfter` looks again
// later, `terminal` ends the row failed, and a throw is recorded on the row and retried with a
// bounded backoff until the row is ended failed. A watchdog ends the rows past their deadline.
import type { Logger } from 'pino';
import type { Condition } from '../../src/contracts/conditions.ts';
import { backoffDelay, DEFAULT_BACKOFF, errorCondition, type Backoff, type ReconcileResult, type Reconciler, type RowStatus } from './reconcile.ts';
import type { Listen } from './shared-listen.ts';

/** A row in flight past its deadline, and the detail it ends with. */
export interface Overdue<K> {
  key: K;
  detail: string;
}

export interface WorkQueueOptions<K> {
  reconciler: Reconciler<K>;
  status: RowStatus<K>;
  logger: Logger;
  listen?: Listen;
  /** Channels whose notifications wake the queue. */
  channels?: string[];
  pollMs?: number;
  /** Claims the next key in the database; absent: the queue is keyless and every wake runs `null`. */
  claim?(): Promise<K | null | undefined>;
  /** How a key is told apart (default: String(key)). */
  idOf?(key: K): string;
  /** Keys in flight at once (claimed and not yet done); a key waiting for a retry holds its place. */
  concurrency?: number;
  backoff?: Backoff;
  /** Called at every wake besides claiming: re-reading the rows of work already running. */
  onWake?(): Promise<void>;
  /** Whether stopping aborts the signal of the reconciles in progress (default true). */
  stopAborts?: boolean;
  /** Rows past their deadline, looked for at start and every `everyMs`. */
  watchdog?: { everyMs: number; overdue(): Promise<Overdue<K>[]> };
  /**
   * Standing keys (a thing observed for as long as the process runs, not a request that ends): when
   * a key's retries run out it is not let go, but looked at again after this many ms.
   */
  restAfterGivingUp?(key: K): number;
}

interface Entry<K> {
  key: K;
  /** Failed attempts in a row. */
  attempt: number;
  running: Promise<void> | null;
  /** Woken while running: run once more when this run ends. */
  again: boolean;
  /** Waiting for a retry: a wake does not cut the backoff short. */
  backingOff: boolean;
  timer: NodeJS.Timeout | undefined;
  abort: AbortController;
  /** Ended by the watchdog: what the interrupted reconcile returns is ignored. */
  ended: boolean;
}

/** The condition a success after failed attempts leaves on the row. */
export function recoveredCondition(reconciler: string, attempts: number, at: Date = new Date()): Condition {
  return { type: 'Reconciled', status: 'True', reason: 'Recovered', message: `${reconciler}: reconciled after ${attempts} failed attempt${attempts === 1 ? '' : 's'}`, observedAt: at.toISOString() };
}

const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

export class WorkQueue<K> {
  private readonly entries = new Map<string, Entry<K>>();
  private readonly stopping = new AbortController();
  private unlisten: (() => Promise<void>)[] = [];
  private timers: NodeJS.Timeout[] = [];
  private claiming: Promise<void> | null = null;
  private claimAgain = false;
  private watching: Promise<void> | null = null;
  private checking: Promise<void> | null = null;
  private stopped = true;
  private readonly name: string;

  constructor(private readonly o: WorkQueueOptions<K>) {
    this.name = o.reconciler.name;
  }

  private idOf(key: K): string {
    return this.o.idOf ? this.o.idOf(key) : String(key);
  }

  async start(): Promise<void> {
    if (!this.stopped) return;
    this.stopped = false;
    for (const channel of this.o.channels ?? []) this.unlisten.push(await this.o.listen!(channel, () => this.wake()));
    this.every(this.o.pollMs ?? 5_000, () => this.wake());
    if (this.o.watchdog) {
      this.every(this.o.watchdog.everyMs, () => void this.watchdog());
      await this.watchdog();
    }
    this.wake();
  }

  /** Stops claiming, retrying and requeueing; reconciles in progress run on (see `idle`). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.o.stopAborts !== false) this.stopping.abort();
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    for (const e of this.entries.values()) clearTimeout(e.timer);
    await Promise.all(this.unlisten.map((u) => u()));
    this.unlisten = [];
  }

  /** Resolves once no reconcile, claim or watchdog pass is in progress. */
  async idle(): Promise<void> {
    await Promise.allSettled([this.claiming, this.checking, ...[...this.entries.values()].map((e) => e.running)]);
  }

  /** Keys held: running, waiting for a requeue or for a retry. */
  get inFlight(): number {
    return this.entries.size;
  }

  private every(ms: number, fn: () => void): void {
    const t = setInterval(fn, ms);
    t.unref();
    this.timers.push(t);
  }

  /** A notification, a poll, a timer of the reconciler: claim what waits (keyless: run `null`). */
  wake(): void {
    if (this.stopped) return;
    if (this.o.onWake) {
      this.watching ??= this.o.onWake()
        .catch((err) => this.o.logger.error({ err }, `${this.name}: watching running work failed`))
        .finally(() => {
          this.watching = null;
        });
    }
    if (this.o.claim) this.fill();
    else this.enqueue(null as K);
  }

  private entry(key: K): { id: string; e: Entry<K> } {
    const id = this.idOf(key);
    let e = this.entries.get(id);
    if (!e) {
      e = { key, attempt: 0, running: null, again: false, backingOff: false, timer: undefined, abort: new AbortController(), ended: false };
      this.entries.set(id, e);
    }
    return { id, e };
  }

  /** Runs `key` after `ms`, unless something runs it sooner; a key already held keeps its own timer. */
  enqueueAfter(key: K, ms: number): void {
    if (this.stopped || this.entries.has(this.idOf(key))) return;
    const { id, e } = this.entry(key);
    this.later(id, e, ms);
  }

  /** Runs `key` now, or once more after its run in progress; a key waiting for a retry keeps waiting. */
  enqueue(key: K): void {
    if (this.stopped) return;
    const { id, e } = this.entry(key);
    if (e.running) {
      e.again = true;
      return;
    }
    if (e.backingOff) return;
    clearTimeout(e.timer);
    this.run(id, e);
  }

  private fill(): void {
    if (this.claiming) {
      // A notification during a claim may name work the claim has already looked past.
      this.claimAgain = true;
      return;
    }
    this.claiming = (async () => {
      while (!this.stopped && this.entries.size < (this.o.concurrency ?? Infinity)) {
        this.claimAgain = false;
        const key = await this.o.claim!();
        if (key === null || key === undefined) return;
        this.enqueue(key);
      }
    })()
      .catch((err) => this.o.logger.error({ err }, `${this.name}: claiming failed`))
      .finally(() => {
        this.claiming = null;
        if (this.claimAgain && !this.stopped) {
          this.claimAgain = false;
          this.fill();
        }
      });
  }

  private run(id: string, e: Entry<K>): void {
    e.backingOff = false;
    e.timer = undefined;
    const signal = AbortSignal.any([this.stopping.signal, e.abort.signal]);
    e.running = this.o.reconciler
      .reconcile(e.key, signal)
      .then(
        (result) => this.settle(id, e, result),
        (err: unknown) => this.failed(id, e, err),
      )
      .catch((err) => this.o.logger.error({ err, key: id }, `${this.name}: the runtime could not record a reconcile's end`))
      .finally(() => {
        e.running = null;
        if (e.ended || this.entries.get(id) !== e) return;
        if (this.stopped) return;
        if (e.again && !e.backingOff) {
          e.again = false;
          clearTimeout(e.timer);
          this.run(id, e);
        }
      });
  }

  private release(id: string, e: Entry<K>): void {
    clearTimeout(e.timer);
    if (this.entries.get(id) === e) this.entries.delete(id);
    // A place is free: claim what waits.
    if (this.o.claim && !this.stopped) this.fill();
  }

  private later(id: string, e: Entry<K>, ms: number): void {
    clearTimeout(e.timer);
    if (this.stopped) return;
    e.timer = setTimeout(() => {
      if (this.stopped || this.entries.get(id) !== e) return;
      if (e.running) e.again = true;
      else this.run(id, e);
    }, ms);
    e.timer.unref();
  }

  private async settle(id: string, e: Entry<K>, result: ReconcileResult): Promise<void> {
    if (e.ended) return;
    if (e.attempt > 0 && result.outcome !== 'terminal') {
      const failed = e.attempt;
      e.attempt = 0;
      this.o.logger.info({ key: id }, `${this.name}: reconciled after ${failed} failed attempt(s)`);
      await this.o.status.recordRecovered?.(e.key, recoveredCondition(this.name, failed)).catch((err: unknown) =>
        this.o.logger.warn({ err, key: id }, `${this.name}: the recovered condition was not stored`),
      );
    }
    if (result.outcome === 'done') {
      if (e.again) return; // woken meanwhile: the `finally` of this run runs it once more
      this.release(id, e);
    } else if (result.outcome === 'requeue') {
      this.later(id, e, result.afterMs);
    } else {
      this.o.logger.error({ key: id, error: result.error.message }, `${this.name}: ${result.error.message}`);
      await this.end(id, e, result.error.message);
    }
  }

  private async failed(id: string, e: Entry<K>, err: unknown): Promise<void> {
    if (e.ended) return;
    // Stopping: the row is left for the next start (the boot closes what a restart interrupted).
    if (this.stopped && this.stopping.signal.aborted) return;
    e.attempt += 1;
    const delay = backoffDelay(this.o.backoff ?? DEFAULT_BACKOFF, e.attempt);
    this.o.logger.error({ err, key: id, attempt: e.attempt, retryInMs: delay }, `${this.name}: reconcile failed${delay === null ? '; retries ran out' : ''}`);
    await this.o.status.recordError(e.key, errorCondition(this.name, err, e.attempt)).catch((recordErr: unknown) =>
      this.o.logger.warn({ err: recordErr, key: id }, `${this.name}: the error condition was not stored`),
    );
    if (delay === null && this.o.restAfterGivingUp) {
      // A standing key: recorded as failed, and looked at again after its rest.
      await this.o.status.fail(e.key, messageOf(err)).catch((failErr: unknown) => this.o.logger.warn({ err: failErr, key: id }, `${this.name}: the failure was not stored`));
      // The attempts still count: the next success writes the recovered condition.
      e.again = false;
      this.later(id, e, this.o.restAfterGivingUp(e.key));
      return;
    }
    if (delay === null) {
      await this.end(id, e, messageOf(err));
      return;
    }
    e.backingOff = true;
    e.again = false;
    this.later(id, e, delay);
  }

  /** Ends the key's row failed and lets the key go; a failure to write that is left to the watchdog. */
  private async end(id: string, e: Entry<K>, detail: string): Promise<void> {
    e.ended = true;
    try {
      await this.o.status.fail(e.key, detail);
    } finally {
      this.release(id, e);
    }
  }

  /** Ends every overdue row: a reconcile of it in progress here is aborted and awaited first. */
  watchdog(): Promise<void> {
    if (!this.o.watchdog || this.stopped) return Promise.resolve();
    const wd = this.o.watchdog;
    this.checking ??= (async () => {
      for (const { key, detail } of await wd.overdue()) {
        const id = this.idOf(key);
        const e = this.entries.get(id);
        if (e) {
          e.ended = true;
          clearTimeout(e.timer);
          e.abort.abort();
          await e.running;
        }
        this.o.logger.error({ key: id }, `${this.name}: ${detail}`);
        try {
          await this.o.status.fail(key, detail);
        } finally {
          if (e) this.release(id, e);
        }
      }
    })()
      .catch((err) => this.o.logger.error({ err }, `${this.name}: the watchdog failed`))
      .finally(() => {
        this.checking = null;
      });
    return this.checking;
  }
}

// The installer updating itself, as the interface handles it (spec "Interface behavior during an
// update", "Limits"): the update check on load and every 30 minutes (one that failed again after
// 5 s), and, once an update has
// started, an overlay that polls GET /api/health every 3 s, reloads after a real downtime gap
// (health failing at least once, then answering again, or answered by another process than the
// one that answered before: a gap that fell between two polls) or after about 20 s of answers
// without one, and gives up after 10 minutes. Plain classes with an injectable clock and timing, so tests run
// them on a fake clock; the production values are these constants.
import { INSTANCE_HEADER } from '../../contracts/instance.ts';
import { documentVisibility, type PageVisibility } from './visibility.ts';

export const UPDATE_TIMING = {
  /** The update check: on load, then every 30 minutes. */
  checkEveryMs: 30 * 60_000,
  /** Health polling while the installer restarts. */
  pollEveryMs: 3_000,
  /** Without a downtime gap seen, reload after this long (the restart may fall between two polls unseen: a backend that does not name itself, or one replaced before the first poll). */
  settleMs: 20_000,
  /** While the last update's outcome is not decided yet (its helper still runs), or after a check failed, check this often. */
  followEveryMs: 5_000,
  /** Give up waiting after this long. */
  giveUpMs: 10 * 60_000,
  /** One health request may take this long before it counts as failed. */
  requestTimeoutMs: 2_500,
} as const;

export type UpdateTiming = { -readonly [K in keyof typeof UPDATE_TIMING]: number };

export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** The global timers, looked up at each call (so a clock a test installs later is the one used). */
export const globalClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => globalThis.setTimeout(fn, ms),
  clearTimeout: (h) => globalThis.clearTimeout(h as Parameters<typeof globalThis.clearTimeout>[0]),
};

// ---------------------------------------------------------------------------------------------

export class UpdateChecker<T> {
  private timer: unknown = null;
  private followTimer: unknown = null;
  /** The last result said to follow (and no later result said otherwise). */
  private following = false;
  private stopped = false;
  private readonly everyMs: number;
  private readonly clock: Clock;
  private readonly visibility: PageVisibility;
  /** A check was skipped while the tab was hidden: it runs when the tab is shown. */
  private owed = false;
  private unsubscribe = () => {};

  constructor(
    private readonly o: {
      check: () => Promise<T>;
      onResult: (result: T) => void;
      onError?: (err: unknown) => void;
      everyMs?: number;
      /**
       * Checks again after `followEveryMs` while this holds of the last result: after the reload
       * that ends an update, the new backend answers before its boot reconciliation has decided
       * the outcome, and the page should show that outcome without another reload.
       */
      followWhile?: (result: T) => boolean;
      followEveryMs?: number;
      clock?: Clock;
      visibility?: PageVisibility;
    },
  ) {
    this.everyMs = o.everyMs ?? UPDATE_TIMING.checkEveryMs;
    this.clock = o.clock ?? globalClock;
    this.visibility = o.visibility ?? documentVisibility;
  }

  /** Checks now, then every `everyMs`; a check due while the tab is hidden waits until it is shown. */
  start(): this {
    this.stopped = false;
    this.unsubscribe = this.visibility.onChange(() => {
      if (this.stopped || this.visibility.hidden() || !this.owed) return;
      this.owed = false;
      void this.once();
    });
    void this.tick();
    return this;
  }

  stop(): void {
    this.stopped = true;
    this.unsubscribe();
    if (this.timer !== null) this.clock.clearTimeout(this.timer);
    if (this.followTimer !== null) this.clock.clearTimeout(this.followTimer);
    this.timer = null;
    this.followTimer = null;
  }

  /** An extra check now (after an update finished, say); the schedule is unchanged. */
  async refresh(): Promise<void> {
    await this.once();
  }

  private async once(): Promise<void> {
    let failed = false;
    try {
      const r = await this.o.check();
      if (this.stopped) return;
      this.o.onResult(r);
      this.following = this.o.followWhile?.(r) ?? false;
    } catch (err) {
      if (this.stopped) return;
      this.o.onError?.(err);
      // A check that fails (the installer restarting, as when a page reloaded onto a build that a
      // rollback then stops) is tried again soon rather than in 30 minutes; while following, the
      // following goes on: the outcome is still to come.
      failed = true;
    }
    if ((this.following || failed) && this.followTimer === null) {
      this.followTimer = this.clock.setTimeout(() => {
        this.followTimer = null;
        if (this.visibility.hidden()) this.owed = true;
        else void this.once();
      }, this.o.followEveryMs ?? UPDATE_TIMING.followEveryMs);
    }
  }

  private async tick(): Promise<void> {
    // Scheduled before the check runs, so a slow registry does not stretch the interval.
    this.timer = this.clock.setTimeout(() => void this.tick(), this.everyMs);
    if (this.visibility.hidden()) {
      this.owed = true;
      return;
    }
    await this.once();
  }
}

// ---------------------------------------------------------------------------------------------

export type WatchPhase = 'waiting' | 'reloading' | 'gave-up';

export interface WatchState {
  phase: WatchPhase;
  startedAt: number;
  elapsedMs: number;
  polls: number;
  failures: number;
  /** Health failed at least once, or another process answered: the old backend went away. */
  sawDown: boolean;
  /** The process that answered health last (its `x-installer-instance`), when it named itself. */
  instance: string | null;
  last: { ok: boolean; at: number } | null;
}

export interface RestartWatcherOptions {
  /** One health check. May reject; rejects count as down. */
  probe: (signal: AbortSignal) => Promise<HealthAnswer>;
  reload: () => void;
  /**
   * The process that accepted the update, when it named itself: a healthy answer from another one
   * is the switch done, even at the first poll (a switch finished within one poll interval).
   */
  replacing?: string | null;
  onChange?: (s: WatchState) => void;
  timing?: Partial<UpdateTiming>;
  clock?: Clock;
}

export class RestartWatcher {
  private readonly t: UpdateTiming;
  private readonly clock: Clock;
  private s: WatchState;
  private pollTimer: unknown = null;
  private giveUpTimer: unknown = null;

  constructor(private readonly o: RestartWatcherOptions) {
    this.t = { ...UPDATE_TIMING, ...o.timing };
    this.clock = o.clock ?? globalClock;
    this.s = { phase: 'waiting', startedAt: 0, elapsedMs: 0, polls: 0, failures: 0, sawDown: false, instance: o.replacing ?? null, last: null };
  }

  get state(): WatchState {
    return { ...this.s, elapsedMs: this.clock.now() - this.s.startedAt };
  }

  /** Starts waiting: the first poll after one interval (the old backend is still answering now). */
  start(): this {
    this.s = { ...this.s, startedAt: this.clock.now() };
    this.pollTimer = this.clock.setTimeout(() => void this.poll(), this.t.pollEveryMs);
    this.giveUpTimer = this.clock.setTimeout(() => this.finish('gave-up'), this.t.giveUpMs);
    this.emit();
    return this;
  }

  stop(): void {
    if (this.pollTimer !== null) this.clock.clearTimeout(this.pollTimer);
    if (this.giveUpTimer !== null) this.clock.clearTimeout(this.giveUpTimer);
    this.pollTimer = this.giveUpTimer = null;
  }

  private emit() {
    this.o.onChange?.(this.state);
  }

  private finish(phase: 'reloading' | 'gave-up') {
    if (this.s.phase !== 'waiting') return;
    this.stop();
    this.s = { ...this.s, phase };
    this.emit();
    if (phase === 'reloading') this.o.reload();
  }

  private async probeOnce(): Promise<HealthAnswer> {
    const abort = new AbortController();
    const timer = this.clock.setTimeout(() => abort.abort(), this.t.requestTimeoutMs);
    try {
      return await this.o.probe(abort.signal);
    } catch {
      return { ok: false, instance: null };
    } finally {
      this.clock.clearTimeout(timer);
    }
  }

  private async poll(): Promise<void> {
    if (this.s.phase !== 'waiting') return;
    const began = this.clock.now();
    const { ok, instance } = await this.probeOnce();
    if (this.s.phase !== 'waiting') return;
    const now = this.clock.now();
    // A healthy answer from another process than the last one that answered: the old backend was
    // replaced between two polls (a switch faster than the poll interval).
    const replaced = ok && instance !== null && this.s.instance !== null && instance !== this.s.instance;
    this.s = {
      ...this.s,
      polls: this.s.polls + 1,
      failures: this.s.failures + (ok ? 0 : 1),
      sawDown: this.s.sawDown || !ok || replaced,
      instance: ok && instance !== null ? instance : this.s.instance,
      last: { ok, at: now },
    };
    if (ok && (this.s.sawDown || now - this.s.startedAt >= this.t.settleMs)) {
      this.finish('reloading');
      return;
    }
    this.emit();
    // Every pollEveryMs from the start of the previous poll, however long it took.
    this.pollTimer = this.clock.setTimeout(() => void this.poll(), Math.max(0, began + this.t.pollEveryMs - now));
  }
}

/** One answer of GET /api/health: healthy or not, and which process gave it. */
export interface HealthAnswer {
  /** Answered `{status: "ok"}`. */
  ok: boolean;
  /** The answering process's `x-installer-instance`; null when it sent none. */
  instance: string | null;
}

export async function healthProbe(signal: AbortSignal): Promise<HealthAnswer> {
  const res = await fetch('/api/health', { cache: 'no-store', signal });
  const instance = res.headers.get(INSTANCE_HEADER);
  if (!res.ok) return { ok: false, instance };
  const body = (await res.json()) as { status?: string };
  return { ok: body.status === 'ok', instance };
}

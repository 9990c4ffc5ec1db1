// The loop every request-driven reconciler runs on: wake on NOTIFY and on a slow poll, claim the
// next piece of work inside the database (FOR UPDATE SKIP LOCKED, in the state repositories), hand
// it to the reconciler, and go on until nothing is left. One drain at a time per loop. It imports
// no reconciler: it calls the `claim` and `reconcile` it is given.
import type { Logger } from 'pino';

export type Listen = (channel: string, onNotify: (payload: string) => void) => Promise<() => Promise<void>>;

export interface ClaimLoopOptions<T> {
  /** For log lines: `jobs`, `self-update`, … */
  name: string;
  listen: Listen;
  /** Channels whose notifications wake the loop. */
  channels: string[];
  pollMs?: number;
  logger: Logger;
  /** Claims the next piece of work in one transaction, or nothing when none is waiting. */
  claim(): Promise<T | undefined | null>;
  /** Brings the claimed work to its end; a throw is logged and the loop goes on. */
  reconcile(work: T): Promise<void>;
  /** Called at every wake besides claiming: re-reading the rows of work already running. */
  onWake?(): Promise<void>;
}

export class ClaimLoop<T> {
  private draining: Promise<void> | null = null;
  private again = false;
  private watching: Promise<void> | null = null;
  private unlisten: (() => Promise<void>)[] = [];
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly o: ClaimLoopOptions<T>) {}

  async start(): Promise<void> {
    for (const channel of this.o.channels) this.unlisten.push(await this.o.listen(channel, () => this.wake()));
    this.timer = setInterval(() => this.wake(), this.o.pollMs ?? 5_000);
    this.timer.unref();
    this.wake();
  }

  /** Stops claiming; work already claimed runs on until the reconciler ends it (see `idle`). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await Promise.all(this.unlisten.map((u) => u()));
    this.unlisten = [];
  }

  /** Resolves once the current drain (if any) has ended. */
  async idle(): Promise<void> {
    await this.draining;
  }

  wake(): void {
    if (this.stopped) return;
    if (this.o.onWake) {
      this.watching ??= this.o.onWake()
        .catch((err) => this.o.logger.error({ err }, `${this.o.name}: watching running work failed`))
        .finally(() => {
          this.watching = null;
        });
    }
    if (this.draining) {
      // A notification during a drain may name work the drain has already looked past.
      this.again = true;
      return;
    }
    this.draining = this.drain()
      .catch((err) => this.o.logger.error({ err }, `${this.o.name} loop failed`))
      .finally(() => {
        this.draining = null;
        if (this.again && !this.stopped) {
          this.again = false;
          this.wake();
        }
      });
  }

  private async drain(): Promise<void> {
    while (!this.stopped) {
      this.again = false;
      const work = await this.o.claim();
      if (!work) return;
      try {
        await this.o.reconcile(work);
      } catch (err) {
        this.o.logger.error({ err }, `${this.o.name}: reconciling claimed work failed`);
      }
    }
  }
}

/** One LISTEN connection per channel, shared by every loop in the process that wakes on it. */
export function sharedListen(listen: Listen): Listen {
  const channels = new Map<string, { subscribers: Set<(payload: string) => void>; ready: Promise<() => Promise<void>> }>();
  return async (channel, onNotify) => {
    let c = channels.get(channel);
    if (!c) {
      const subscribers = new Set<(payload: string) => void>();
      const entry = { subscribers, ready: listen(channel, (payload) => { for (const s of subscribers) s(payload); }) };
      channels.set(channel, entry);
      entry.ready.catch(() => channels.delete(channel));
      c = entry;
    }
    const unlistenAll = await c.ready;
    c.subscribers.add(onNotify);
    const entry = c;
    return async () => {
      entry.subscribers.delete(onNotify);
      if (entry.subscribers.size === 0 && channels.get(channel) === entry) {
        channels.delete(channel);
        await unlistenAll();
      }
    };
  };
}

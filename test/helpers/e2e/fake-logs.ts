// A ContainerLogsPort whose lines are pushed by the caller, for browser tests and benchmarks of the
// logs viewer: the real log routes and SSE framing, with no Docker engine behind them.
import type { ContainerLogLine, ContainerLogsPort, LogFeed, PlatformContainer } from '../../../src/contracts/ports.ts';

interface OpenFeed {
  queue: ContainerLogLine[][];
  wake: (() => void) | null;
  closed: boolean;
}

export class PushedLogs implements ContainerLogsPort {
  private feeds = new Set<OpenFeed>();
  /** Lines already pushed, replayed (the last `tail` of them) to a feed that opens later. */
  private history: ContainerLogLine[] = [];

  /** `containers`: the platform's containers these lines come from (give them to the observer too). */
  constructor(readonly containers: PlatformContainer[]) {}

  /** Feeds open now. */
  get open(): number {
    return this.feeds.size;
  }

  /** Sends a batch to every open feed. */
  push(lines: ContainerLogLine[]): void {
    this.history.push(...lines);
    if (this.history.length > 10_000) this.history.splice(0, this.history.length - 10_000);
    for (const f of this.feeds) {
      f.queue.push(lines);
      f.wake?.();
    }
  }

  private feed(initial: ContainerLogLine[]): LogFeed {
    const f: OpenFeed = { queue: initial.length ? [initial] : [], wake: null, closed: false };
    this.feeds.add(f);
    const close = () => {
      f.closed = true;
      this.feeds.delete(f);
      f.wake?.();
    };
    return {
      opened: Promise.resolve(),
      close,
      async *[Symbol.asyncIterator]() {
        try {
          while (!f.closed) {
            const batch = f.queue.shift();
            if (batch) {
              yield batch;
              continue;
            }
            await new Promise<void>((r) => (f.wake = r));
            f.wake = null;
          }
        } finally {
          close();
        }
      },
    };
  }

  live(_selection: unknown, opts: { tail: number }): LogFeed {
    return this.feed(opts.tail ? this.history.slice(-opts.tail) : []);
  }

  window(): LogFeed {
    return this.feed(this.history.slice());
  }
}

/** The engine's timestamp format (RFC 3339, UTC, nanoseconds) for `ms` since the epoch. */
export function stamp(ms: number, nanos = 0): string {
  return `${new Date(ms).toISOString().slice(0, 23)}${String(nanos % 1e6).padStart(6, '0')}Z`;
}

// Feeds and merging: the closable, read-once feed the service hands out, and the merges of line
// sources in timestamp order (strict for history, per batch for live lines).
import type { ContainerLogLine, ContainerLogsPort, LogFeed, LogSelection } from '../../contracts/ports.ts';
import type { LineSource } from './line-source.ts';
import { NS_PER_MS } from './time.ts';

// Batches stay well below V8's large-object size, so that the strings built from them die young
// instead of piling up in the old generation until a full collection.
const BATCH_LINES = 512;
const BATCH_BYTES = 48 * 1024;
const LIVE_PER_SOURCE = 256;

export class Closer {
  closed = false;
  private readonly resources = new Set<{ destroy(): void }>();
  private readonly listeners: (() => void)[] = [];

  track<T extends { destroy(): void }>(r: T): T {
    if (this.closed) r.destroy();
    else this.resources.add(r);
    return r;
  }

  untrack(r: { destroy(): void }): void {
    this.resources.delete(r);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const r of this.resources) r.destroy();
    this.resources.clear();
    for (const l of this.listeners) l();
  }

  onClose(listener: () => void): void {
    this.listeners.push(listener);
  }
}

/**
 * One promise per wait, woken by whoever has news. (Racing long-lived promises instead would add
 * a reaction to each of them on every turn of a loop that may run for days.)
 */
export class Wakeup {
  private resolve: (() => void) | null = null;
  private flagged = false;
  readonly wake = (): void => {
    this.flagged = true;
    const r = this.resolve;
    this.resolve = null;
    r?.();
  };

  wait(): Promise<void> {
    if (this.flagged) {
      this.flagged = false;
      return Promise.resolve();
    }
    return new Promise<void>((r) => {
      this.resolve = () => {
        this.flagged = false;
        r();
      };
    });
  }
}

/**
 * A feed whose `open` step (subscribing and listing what it reads) runs at once, so that `opened`
 * tells a caller whether the engine answered before anything is sent; `body` runs on the first read.
 */
export function makeFeed<T>(open: (closer: Closer) => Promise<T>, body: (closer: Closer, opened: T) => AsyncGenerator<ContainerLogLine[]>): LogFeed {
  const closer = new Closer();
  const opening = open(closer).catch((err: unknown) => {
    closer.close();
    throw err;
  });
  const opened = opening.then(() => undefined);
  opened.catch(() => {}); // a caller that only reads the feed sees the error there
  let started = false;
  return {
    opened,
    close: () => closer.close(),
    [Symbol.asyncIterator]() {
      if (started) throw new Error('a log feed can be read once');
      started = true;
      const gen = (async function* () {
        yield* body(closer, await opening);
      })();
      return {
        next: () => gen.next(),
        return: async (value?: unknown) => {
          closer.close();
          return gen.return(value as undefined);
        },
        throw: async (err?: unknown) => {
          closer.close();
          return gen.throw(err);
        },
      };
    },
  };
}

/** The source with the earliest head line; ties go to the earlier source in the list. */
function earliest(sources: LineSource[]): LineSource | undefined {
  let best: LineSource | undefined;
  let bestTs = '';
  for (const s of sources) {
    const l = s.peek();
    if (l === undefined) continue;
    if (best === undefined || l.timestamp < bestTs) {
      best = s;
      bestTs = l.timestamp;
    }
  }
  return best;
}

// Within one container the engine's order can disagree with the timestamps by a few lines: stdout
// and stderr are copied into the log separately. The history merge puts them back in timestamp
// order through a window of this many lines.
const REORDER_WINDOW = 256;

/** Inserts a line after every line with a timestamp at or before its own (equal ones keep arrival order). */
export function placeInOrder(window: ContainerLogLine[], line: ContainerLogLine): void {
  let lo = 0;
  let hi = window.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (window[mid]!.timestamp <= line.timestamp) lo = mid + 1;
    else hi = mid;
  }
  window.splice(lo, 0, line);
}

/** Strict k-way merge of finite sources by timestamp; lines of one source are put in timestamp order too. */
export async function* mergeOrdered(sources: LineSource[], closer: Closer, emit: boolean): AsyncGenerator<ContainerLogLine[]> {
  const active = sources.slice();
  await Promise.all(active.map((s) => s.settle()));
  let batch: ContainerLogLine[] = [];
  let bytes = 0;
  const window: ContainerLogLine[] = [];
  const drop = (s: LineSource) => {
    if (s.error) throw s.error;
    active.splice(active.indexOf(s), 1);
  };
  for (const s of sources) if (!s.hasLine()) drop(s);
  while (active.length > 0) {
    if (closer.closed) return;
    const best = earliest(active)!;
    const line = best.shift()!;
    if (emit) {
      placeInOrder(window, line);
      while (window.length > REORDER_WINDOW) {
        const out = window.shift()!;
        batch.push(out);
        bytes += out.line.length + 100;
      }
    }
    if (!best.hasLine()) {
      if (!best.ended) {
        if (batch.length) {
          yield batch;
          batch = [];
          bytes = 0;
        }
        await best.settle(); // closing destroys the source, which ends it
        if (closer.closed) return;
      }
      if (!best.hasLine()) drop(best);
    }
    if (batch.length >= BATCH_LINES || bytes >= BATCH_BYTES) {
      yield batch;
      batch = [];
      bytes = 0;
    }
  }
  if (closer.closed) return;
  batch.push(...window);
  if (batch.length) yield batch;
}

/** Takes what the followers hold now (a bounded batch), merged by timestamp; records each container's last line. */
export function gather(sources: LineSource[], lastLine: Map<string, ContainerLogLine>): ContainerLogLine[] {
  const batch: ContainerLogLine[] = [];
  const open = sources.filter((s) => s.hasLine());
  const taken = new Array<number>(open.length).fill(0);
  let bytes = 0;
  while (batch.length < BATCH_LINES * 4 && bytes < BATCH_BYTES) {
    let bi = -1;
    let bestTs = '';
    for (let i = 0; i < open.length; i++) {
      const l = open[i]!.peek();
      if (l === undefined || taken[i]! >= LIVE_PER_SOURCE) continue;
      if (bi < 0 || l.timestamp < bestTs) {
        bi = i;
        bestTs = l.timestamp;
      }
    }
    if (bi < 0) break;
    const src = open[bi]!;
    const line = src.shift()!;
    taken[bi] = taken[bi]! + 1;
    lastLine.set(src.ref.id, line);
    batch.push(line);
    bytes += line.line.length + 100;
  }
  return batch;
}

/** A feed's reading: the last lines then live, or a window of time (followed when it reaches now). */
export type FeedMode = { kind: 'tail'; tail: number } | { kind: 'window'; since?: bigint; until?: bigint; follow: boolean };

/** When a feed began (epoch ns), and whether it goes on past then with new lines. */
export interface FeedStart {
  startNs: bigint;
  follow: boolean;
}

/**
 * `live` and `window` of a log port (the compose project's containers, or a Swarm stack's tasks):
 * each is a feed that opens (subscribes first, when it follows, to what starts later, then lists
 * what it reads) and then runs over what it opened.
 */
export abstract class FeedPort<Opened> implements ContainerLogsPort {
  live(selection: LogSelection, opts: { tail: number }): LogFeed {
    return this.feed(selection, { kind: 'tail', tail: opts.tail });
  }

  window(selection: LogSelection, opts: { since?: bigint; until?: bigint; follow: boolean }): LogFeed {
    return this.feed(selection, { kind: 'window', ...opts });
  }

  private feed(sel: LogSelection, mode: FeedMode): LogFeed {
    const startNs = BigInt(Date.now()) * NS_PER_MS;
    const until = mode.kind === 'window' ? mode.until : undefined;
    // A tail follows; a window follows when asked to, unless it ended before now.
    const follow = mode.kind === 'tail' || (mode.follow && (until === undefined || until > startNs));
    return makeFeed(
      (closer) => this.open(closer, sel, follow),
      (closer, opened) => this.run(closer, sel, mode, { startNs, follow, ...opened }),
    );
  }

  protected abstract open(closer: Closer, sel: LogSelection, follow: boolean): Promise<Opened>;

  protected abstract run(closer: Closer, sel: LogSelection, mode: FeedMode, o: Opened & FeedStart): AsyncGenerator<ContainerLogLine[]>;
}

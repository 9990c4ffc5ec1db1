// Live lines of a Swarm service come on one stream from every node that runs one of its tasks, each
// node's as its agent forwards them: a line of one node can arrive after a later-stamped line of
// another. Followed lines are therefore held back a little: each line waits `holdMs` after it
// arrived, and lines leave in timestamp order, so a line that arrives up to `holdMs` after a
// later-stamped one still goes out before it. Equal timestamps keep their arrival order. Past
// `maxLines` held, the earliest leaves at once (a flood is not held in memory for the order's sake).
import type { ContainerLogLine } from '../../contracts/ports.ts';

export class HoldBack {
  private held: { line: ContainerLogLine; due: number }[] = [];

  constructor(
    private readonly holdMs: number,
    private readonly maxLines = 4096,
  ) {}

  get size(): number {
    return this.held.length;
  }

  /** Holds a line that arrived at `now` (ms). */
  add(line: ContainerLogLine, now: number): void {
    const entry = { line, due: now + this.holdMs };
    const held = this.held;
    const last = held[held.length - 1];
    if (!last || last.line.timestamp <= line.timestamp) {
      held.push(entry);
      return;
    }
    let lo = 0;
    let hi = held.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (held[mid]!.line.timestamp <= line.timestamp) lo = mid + 1;
      else hi = mid;
    }
    held.splice(lo, 0, entry);
  }

  /**
   * The earliest lines whose time is up at `now`, in timestamp order, at most `max`. A line waits
   * for every earlier-stamped one: a late line may hold up a later one, never the other way round.
   */
  take(now: number, max = Number.POSITIVE_INFINITY): ContainerLogLine[] {
    let n = 0;
    while (n < this.held.length && n < max && (this.held[n]!.due <= now || this.held.length - n > this.maxLines)) n++;
    return this.held.splice(0, n).map((e) => e.line);
  }

  /** Every line held, in timestamp order (the end of a window: nothing later will be sent). */
  drain(max = Number.POSITIVE_INFINITY): ContainerLogLine[] {
    return this.held.splice(0, Math.min(max, this.held.length)).map((e) => e.line);
  }

  /** When the earliest held line's time is up (ms), or undefined when nothing is held. */
  nextDue(): number | undefined {
    return this.held[0]?.due;
  }
}

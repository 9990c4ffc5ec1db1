// The logs viewer's lines: a ring of the newest CAPACITY lines (older ones are dropped and counted),
// and a filtered view of it kept up to date as lines arrive (docs/adr/0022-logs-viewer.md).
import Anser from 'anser';

/** Lines the viewer holds; past it the oldest are dropped. */
export const CAPACITY = 100_000;

/** A line as the log endpoints send it (the contract; it needs no DOM types, so plain tests can use it). */
export type { ContainerLogLine as LogLine } from '../../../contracts/ports.ts';
import type { ContainerLogLine as LogLine } from '../../../contracts/ports.ts';

export interface Entry {
  /** Position in the stream since it was opened: 0 for the first line. */
  seq: number;
  timestamp: string;
  container: string;
  /** On a Swarm: the node that ran the line's task, and the task (`web.2`), shown instead of the long container name. */
  node?: string;
  task?: string;
  /** The compose service, or the container's name when it has none: what the service filter lists. */
  source: string;
  stderr: boolean;
  /** As received, ANSI escape sequences included. */
  line: string;
  /** Without escape sequences: what the text filter searches and wrapping measures. */
  plain: string;
}

export class LogStore {
  private ring: (Entry | undefined)[];
  /** Seq of the oldest line held; also how many lines were dropped. */
  first = 0;
  /** Seq the next line gets. */
  next = 0;
  /** Services (or containers) seen, in the order they first appeared. */
  readonly sources = new Set<string>();
  /** Counts clears: a view made before one is stale. */
  generation = 0;

  constructor(readonly capacity = CAPACITY) {
    this.ring = new Array<Entry | undefined>(capacity);
  }

  get size(): number {
    return this.next - this.first;
  }

  push(l: LogLine): void {
    const seq = this.next++;
    const source = l.service || l.container;
    this.sources.add(source);
    const plain = l.line.includes('\x1b') ? Anser.ansiToText(l.line) : l.line;
    const entry: Entry = { seq, timestamp: l.timestamp, container: l.container, source, stderr: l.stream === 'stderr', line: l.line, plain };
    if (l.node !== undefined) entry.node = l.node;
    if (l.task !== undefined) entry.task = l.task;
    this.ring[seq % this.capacity] = entry;
    if (this.next - this.first > this.capacity) this.first = this.next - this.capacity;
  }

  /** Forgets everything held and counts `n` more lines as dropped, unseen (a backlog too long to keep). */
  skip(n: number): void {
    this.next += n;
    this.first = this.next;
  }

  at(seq: number): Entry {
    return this.ring[seq % this.capacity]!;
  }

  clear(): void {
    this.ring = new Array<Entry | undefined>(this.capacity);
    this.first = this.next = 0;
    this.sources.clear();
    this.generation++;
  }
}

export interface Filter {
  /** Substring, case-insensitive; empty for all lines. */
  text: string;
  /** Services (sources) not shown. */
  hidden: ReadonlySet<string>;
  stdout: boolean;
  stderr: boolean;
}

export const NO_FILTER: Filter = { text: '', hidden: new Set(), stdout: true, stderr: true };

/** The test a line must pass, or null when the filter lets every line through. */
export function matcher(f: Filter): ((e: Entry) => boolean) | null {
  const text = f.text.toLowerCase();
  if (!text && !f.hidden.size && f.stdout && f.stderr) return null;
  return (e) => (e.stderr ? f.stderr : f.stdout) && !f.hidden.has(e.source) && (!text || e.plain.toLowerCase().includes(text));
}

/**
 * The seqs of the lines a filter lets through, in order. Without a filter it is the store itself
 * (no list of 100,000 numbers); with one, a list extended as lines arrive and cut as the store drops.
 */
export class FilteredView {
  private seqs: number[] = [];
  private head = 0;
  /** The next seq not yet looked at. */
  private scanned: number;

  constructor(
    private readonly store: LogStore,
    private readonly match: ((e: Entry) => boolean) | null,
  ) {
    this.scanned = store.first;
    this.sync();
  }

  /** Takes in the lines that arrived and forgets the ones the store dropped. */
  sync(): void {
    const s = this.store;
    if (!this.match) return;
    if (this.scanned < s.first) this.scanned = s.first;
    for (; this.scanned < s.next; this.scanned++) if (this.match(s.at(this.scanned))) this.seqs.push(this.scanned);
    while (this.head < this.seqs.length && this.seqs[this.head]! < s.first) this.head++;
    if (this.head > 4096 && this.head * 2 > this.seqs.length) {
      this.seqs = this.seqs.slice(this.head);
      this.head = 0;
    }
  }

  get length(): number {
    return this.match ? this.seqs.length - this.head : this.store.size;
  }

  seqAt(i: number): number {
    return this.match ? this.seqs[this.head + i]! : this.store.first + i;
  }

  /** The index of the first line at or after `seq` (length when none). */
  indexOf(seq: number): number {
    if (!this.match) return Math.max(0, Math.min(this.length, seq - this.store.first));
    let lo = this.head;
    let hi = this.seqs.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.seqs[mid]! < seq) lo = mid + 1;
      else hi = mid;
    }
    return lo - this.head;
  }
}

// One container's lines: an engine connection read into a bounded queue of bytes, parsed into
// lines only as they are taken. Beyond its read-ahead the connection is paused, so a slow consumer
// slows the reading down instead of piling lines up in memory.
import type { ContainerLogLine } from '../../contracts/ports.ts';
import type { ByteSink, EngineConnection } from './engine-http.ts';
import { LogFrameParser, type FrameOptions, type ParsedLine } from './frames.ts';

const PARSE_BYTES = 16 * 1024;

/** Bytes waiting to be parsed, in a few fixed slabs that are reused rather than reallocated. */
class ByteQueue {
  private readonly slabs: { buf: Buffer; r: number; w: number }[] = [];
  private readonly spare: Buffer[] = [];
  size = 0;

  /** `keep`: slabs kept for reuse once read, so that a queue that fills and drains does not reallocate. */
  constructor(
    private readonly keep: number,
    private readonly slabBytes = 64 * 1024,
  ) {}

  write(src: Buffer): void {
    let i = 0;
    while (i < src.length) {
      let tail = this.slabs[this.slabs.length - 1];
      if (!tail || tail.w === tail.buf.length) {
        tail = { buf: this.spare.pop() ?? Buffer.allocUnsafe(this.slabBytes), r: 0, w: 0 };
        this.slabs.push(tail);
      }
      const n = Math.min(src.length - i, tail.buf.length - tail.w);
      src.copy(tail.buf, tail.w, i, i + n);
      tail.w += n;
      i += n;
      this.size += n;
    }
  }

  /** Up to `max` of the next unread bytes; valid until the next write or take. */
  take(max: number): Buffer | undefined {
    for (;;) {
      const head = this.slabs[0];
      if (!head) return undefined;
      if (head.r < head.w) {
        const end = Math.min(head.w, head.r + max);
        const out = head.buf.subarray(head.r, end);
        this.size -= end - head.r;
        head.r = end;
        return out;
      }
      if (head.w < head.buf.length) {
        head.r = head.w = 0; // the last slab, read to its end: start it over
        return undefined;
      }
      this.slabs.shift();
      if (this.spare.length < this.keep) this.spare.push(head.buf);
    }
  }

  clear(): void {
    this.slabs.length = 0;
    this.spare.length = 0;
    this.size = 0;
  }
}

export interface ContainerRef {
  id: string;
  name: string;
  service: string;
  tty: boolean;
}

export interface SourceOptions {
  scrub: (line: string) => string;
  maxBytes: number;
  maxLineBytes: number;
  /** Drop lines until this one (same timestamp, stream and text) has passed; give up after `within` lines. */
  skipThrough?: { line: ContainerLogLine; within: number };
  /** Drop lines stamped after this timestamp. */
  notAfter?: string;
  /**
   * End the read at the first line stamped after this one, keeping what was read before it: for an
   * engine that does not apply `until` itself (a Swarm's logs), lines that late are not wanted.
   */
  stopAfter?: string;
  /** How the engine's messages are framed beyond timestamps (a Swarm's attributes). */
  frames?: FrameOptions;
  /** Makes the line from what was parsed and its scrubbed text, instead of naming it after `ref`; null drops it. */
  makeLine?: (parsed: ParsedLine, text: string) => ContainerLogLine | null;
}

const sameLine = (a: ContainerLogLine, b: ContainerLogLine) => a.timestamp === b.timestamp && a.stream === b.stream && a.line === b.line;

/**
 * One engine connection as a bounded queue. What the engine sent is kept as bytes (outside the
 * JavaScript heap) and parsed into lines only as they are taken, so read-ahead costs no heap objects
 * that would survive collections; beyond `maxBytes` of read-ahead the connection is paused.
 */
export class LineSource implements ByteSink {
  private readonly store: ByteQueue;
  private control: EngineConnection | null = null;
  private lines: ContainerLogLine[] = [];
  private head = 0;
  private paused = false;
  private streamDone = false;
  private flushed = false;
  private waiter: { promise: Promise<void>; resolve: () => void } | null = null;
  private skip: SourceOptions['skipThrough'];
  private skipped = 0;
  private readonly parser: LogFrameParser;
  /** Set when the engine connection failed (not when it was closed here). */
  error: Error | null = null;
  /** The resume line was not found where expected: lines between it and this read are missing. */
  gap = false;
  /** The last line parsed, delivered or not. */
  last: ContainerLogLine | undefined;
  /** Called whenever data arrives or the source ends. */
  onActivity: (() => void) | null = null;
  private destroyed = false;
  private stopped = false;

  constructor(
    readonly ref: ContainerRef,
    private readonly opts: SourceOptions,
  ) {
    this.skip = opts.skipThrough;
    this.store = new ByteQueue(Math.ceil(opts.maxBytes / (64 * 1024)) + 1);
    this.parser = new LogFrameParser(ref.tty, (l) => this.onLine(l), opts.maxLineBytes, opts.frames);
  }

  /** Connects the source to its engine response. */
  attach(control: EngineConnection): void {
    this.control = control;
    if (this.destroyed || this.stopped) control.destroy();
    else if (this.paused && this.store.size <= this.opts.maxBytes / 2) {
      this.paused = false;
      control.resume();
    }
  }

  bytes(buf: Buffer): boolean {
    if (this.destroyed || this.stopped) return false;
    this.store.write(buf);
    this.wake();
    if (this.store.size > this.opts.maxBytes) {
      this.paused = true;
      return false;
    }
    return true;
  }

  end(err: Error | null): void {
    if (this.streamDone) return;
    if (err && !this.destroyed) this.error = err;
    this.streamDone = true;
    this.wake();
  }

  private onLine(p: ParsedLine): void {
    if (this.destroyed || this.stopped) return;
    const text = this.opts.scrub(p.text);
    const line: ContainerLogLine | null = this.opts.makeLine
      ? this.opts.makeLine(p, text)
      : { container: this.ref.name, service: this.ref.service, stream: p.stream, timestamp: p.timestamp, line: text };
    if (line === null) return;
    this.last = line;
    if (this.skip) {
      if (sameLine(line, this.skip.line)) {
        this.skip = undefined;
      } else if (++this.skipped >= this.skip.within) {
        this.gap = true;
        this.skip = undefined;
        this.destroy();
      }
      return;
    }
    if (this.opts.notAfter !== undefined && line.timestamp > this.opts.notAfter) {
      if (this.opts.stopAfter !== undefined && line.timestamp > this.opts.stopAfter) this.stop();
      return;
    }
    this.lines.push(line);
  }

  /** Ends the read here, keeping the lines parsed so far: nothing after them is wanted. */
  private stop(): void {
    this.stopped = true;
    this.end(null); // first, so that closing the connection is not taken for a failure
    this.store.clear();
    this.control?.destroy();
  }

  private wake(): void {
    const w = this.waiter;
    if (w) {
      this.waiter = null;
      w.resolve();
    }
    this.onActivity?.();
  }

  /** Parses stored bytes until a line is ready or nothing is left. */
  private fill(): boolean {
    while (this.head >= this.lines.length) {
      if (this.head > 0) {
        this.lines = [];
        this.head = 0;
      }
      if (this.destroyed) return false;
      // A little at a time: lines parsed ahead of need would outlive young-generation collections.
      const bytes = this.store.take(PARSE_BYTES);
      if (bytes === undefined) {
        if (this.streamDone && !this.flushed) {
          this.flushed = true;
          this.parser.end();
          continue;
        }
        return false;
      }
      this.parser.push(bytes);
      if (this.paused && this.store.size <= this.opts.maxBytes / 2 && this.control) {
        this.paused = false;
        this.control.resume();
      }
    }
    return true;
  }

  /** Nothing more will come: the connection is over and every line was taken. */
  get ended(): boolean {
    return this.streamDone && !this.fill();
  }

  hasLine(): boolean {
    return this.head < this.lines.length || this.fill();
  }

  peek(): ContainerLogLine | undefined {
    return this.hasLine() ? this.lines[this.head] : undefined;
  }

  shift(): ContainerLogLine | undefined {
    if (!this.hasLine()) return undefined;
    const line = this.lines[this.head]!;
    this.lines[this.head] = undefined as unknown as ContainerLogLine;
    this.head++;
    return line;
  }

  /** Waits until a line is ready or the source has ended. */
  async settle(): Promise<void> {
    while (!this.hasLine() && !this.ended) await this.ready();
  }

  /** Resolves when something happened: data arrived (not necessarily a whole line) or the connection ended. */
  ready(): Promise<void> {
    if (this.hasLine() || this.streamDone) return Promise.resolve();
    if (!this.waiter) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.waiter = { promise, resolve };
    }
    return this.waiter.promise;
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.store.clear();
    this.lines = [];
    this.head = 0;
    this.control?.destroy();
    this.end(null);
  }
}

// Platform container logs from the engine through dockerode: demultiplexed, timestamped, scrubbed,
// merged across containers in timestamp order and followed live (docs/adr/0007-container-logs.md).
// Every engine connection is read with a bounded buffer and paused beyond it, so a slow consumer
// slows the reading down instead of piling lines up in memory.
import type Docker from 'dockerode';
import { connect, type Socket } from 'node:net';
import type { Readable } from 'node:stream';
import type { ContainerLogLine, ContainerLogsPort, LogFeed, LogSelection, PlatformContainer } from '../contracts/ports.ts';

export const PROJECT_LABEL = 'com.docker.compose.project';
export const SERVICE_LABEL = 'com.docker.compose.service';

export interface ContainerLogsOptions {
  /** Applied to every line before it leaves the adapter (the installer's secrets). */
  scrub: (line: string) => string;
  /** Lines a resumed follower reads to find the last line already delivered before it falls back to a `since` scan. */
  resumeWindow?: number;
  /**
   * Raw read-ahead per engine connection of a history read; the connection is paused beyond it.
   * Followers use a quarter of it: live lines come slowly, and there may be many followers.
   */
  bufferBytes?: number;
  /** A line longer than this without a newline is cut and delivered in pieces. */
  maxLineBytes?: number;
  /** Grace after `until` before a following window ends, for lines the engine stamped in time but delivers late. */
  untilGraceMs?: number;
  warn?: (details: Record<string, unknown>, message: string) => void;
}

type Stream = ContainerLogLine['stream'];

// ---------------------------------------------------------------------------------------------
// Timestamps. The engine writes RFC 3339 with exactly nine fraction digits in UTC; such strings
// compare correctly as strings, which is what every merge below does.

const FIXED_TS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z$/;
const ANY_TS = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/;
const NS_PER_MS = 1_000_000n;
const NS_PER_S = 1_000_000_000n;

/** Epoch nanoseconds of an engine timestamp (RFC 3339, any offset, up to nine fraction digits). */
export function timestampToNs(ts: string): bigint {
  const m = ANY_TS.exec(ts);
  if (!m) throw new Error(`not an engine timestamp: ${ts}`);
  const ms = Date.parse(`${m[1]}${m[3]}`);
  if (Number.isNaN(ms)) throw new Error(`not an engine timestamp: ${ts}`);
  return BigInt(ms) * NS_PER_MS + BigInt((m[2] ?? '').padEnd(9, '0'));
}

/** `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` for epoch nanoseconds. */
export function nsToTimestamp(ns: bigint): string {
  const ms = ns / NS_PER_MS;
  const iso = new Date(Number(ms)).toISOString(); // …SS.mmmZ
  const frac = (((ns % NS_PER_S) + NS_PER_S) % NS_PER_S).toString().padStart(9, '0');
  return `${iso.slice(0, 19)}.${frac}Z`;
}

function normalizeTimestamp(ts: string): string {
  return FIXED_TS.test(ts) ? ts : nsToTimestamp(timestampToNs(ts));
}

/** The engine's `since`/`until` form: seconds and nanoseconds since the epoch. */
export function engineTime(ns: bigint): string {
  const s = ns / NS_PER_S;
  return `${s}.${(ns % NS_PER_S).toString().padStart(9, '0')}`;
}

// ---------------------------------------------------------------------------------------------
// Frames. Without a TTY the engine multiplexes stdout and stderr: an 8-byte header (stream type,
// three zero bytes, big-endian payload size) before each message. With timestamps on, each message
// is `<timestamp> <text>`; text without a trailing newline is a partial message that the next
// message of the same stream continues (the engine splits lines longer than 16 KiB).

export interface ParsedLine {
  stream: Stream;
  timestamp: string;
  text: string;
}

export class LogFrameParser {
  private carry: Buffer | null = null;
  private readonly partial: Record<Stream, { ts: string; parts: Buffer[]; bytes: number } | null> = { stdout: null, stderr: null };

  constructor(
    private readonly tty: boolean,
    private readonly emit: (line: ParsedLine) => void,
    private readonly maxLineBytes = 1024 * 1024,
  ) {}

  push(chunk: Buffer): void {
    let buf = chunk;
    let off = 0;
    if (this.tty) {
      // A raw stream: `<timestamp> <text>\n` one after another, cut anywhere.
      if (this.carry) {
        buf = Buffer.concat([this.carry, chunk]);
        this.carry = null;
      }
      for (;;) {
        const nl = buf.indexOf(0x0a, off);
        if (nl < 0) break;
        this.message('stdout', buf, off, nl + 1);
        off = nl + 1;
      }
      if (off < buf.length) {
        const rest = buf.length - off;
        if (rest > this.maxLineBytes) {
          this.message('stdout', buf, off, buf.length);
          off = buf.length;
        } else this.carry = Buffer.from(buf.subarray(off));
      }
      return;
    }
    if (this.carry) {
      // Complete the frame cut by the previous chunk without copying the whole new chunk.
      const carry = this.carry;
      this.carry = null;
      const head = carry.length >= 8 ? carry : Buffer.concat([carry, chunk.subarray(0, 8 - carry.length)]);
      if (head.length < 8) {
        this.carry = head;
        return;
      }
      const need = 8 + head.readUInt32BE(4) - carry.length;
      if (chunk.length < need) {
        this.carry = Buffer.concat([carry, chunk]);
        return;
      }
      const frame = Buffer.concat([carry, chunk.subarray(0, need)]);
      const type = frame[0];
      if (type === 1 || type === 2) this.message(type === 2 ? 'stderr' : 'stdout', frame, 8, frame.length);
      buf = chunk;
      off = need;
    }
    while (buf.length - off >= 8) {
      const size = buf.readUInt32BE(off + 4);
      if (buf.length - off - 8 < size) break;
      const type = buf[off];
      if (type === 1 || type === 2) this.message(type === 2 ? 'stderr' : 'stdout', buf, off + 8, off + 8 + size);
      off += 8 + size;
    }
    if (off < buf.length) this.carry = Buffer.from(buf.subarray(off));
  }

  /** Delivers what is left of unterminated lines when the stream ends. */
  end(): void {
    if (this.tty && this.carry) {
      this.message('stdout', this.carry, 0, this.carry.length);
      this.carry = null;
    }
    for (const stream of ['stdout', 'stderr'] as const) this.flushPartial(stream);
  }

  private message(stream: Stream, buf: Buffer, start: number, end: number): void {
    const space = buf.indexOf(0x20, start);
    if (space < 0 || space >= end) return; // not `<timestamp> <text>`: nothing a timestamped read produces
    const ts = buf.toString('latin1', start, space);
    let bodyEnd = end;
    const complete = buf[end - 1] === 0x0a;
    if (complete) bodyEnd--;
    const body = buf.subarray(space + 1, bodyEnd);
    const pending = this.partial[stream];
    if (!complete) {
      if (pending) {
        pending.parts.push(Buffer.from(body));
        pending.bytes += body.length;
        if (pending.bytes >= this.maxLineBytes) this.flushPartial(stream);
      } else if (body.length >= this.maxLineBytes) {
        this.deliver(stream, ts, body.toString('utf8'));
      } else {
        this.partial[stream] = { ts, parts: [Buffer.from(body)], bytes: body.length };
      }
      return;
    }
    if (pending) {
      pending.parts.push(body);
      this.partial[stream] = null;
      this.deliver(stream, pending.ts, Buffer.concat(pending.parts).toString('utf8'));
    } else {
      this.deliver(stream, ts, body.toString('utf8'));
    }
  }

  private flushPartial(stream: Stream): void {
    const pending = this.partial[stream];
    if (!pending) return;
    this.partial[stream] = null;
    this.deliver(stream, pending.ts, Buffer.concat(pending.parts).toString('utf8'));
  }

  private deliver(stream: Stream, ts: string, text: string): void {
    let timestamp: string;
    try {
      timestamp = normalizeTimestamp(ts);
    } catch {
      return;
    }
    if (text.includes('\n')) {
      for (const part of text.split('\n')) this.emit({ stream, timestamp, text: part });
    } else this.emit({ stream, timestamp, text });
  }
}

// ---------------------------------------------------------------------------------------------
// The log endpoint over the engine's socket, read directly. The engine flushes every log message as
// an HTTP chunk of its own; Node's HTTP client turns each into a Buffer and an event, which costs
// more than everything else per line together. Here the socket is read into one reused buffer, the
// chunk framing is removed in place, and the body bytes are copied into a few reused slabs: reading
// a gigabyte allocates almost nothing that would wait for a garbage collection.

/** Removes HTTP/1.1 chunked framing, in place. */
export class ChunkedDecoder {
  private state: 'size' | 'ext' | 'size-lf' | 'data' | 'data-cr' | 'data-lf' | 'trailer' | 'trailer-lf' | 'done' = 'size';
  private size = 0;
  private sizeDigits = 0;
  private remaining = 0;
  private trailerLineEmpty = true;

  get done(): boolean {
    return this.state === 'done';
  }

  /** Body bytes of a copy of `input` (for tests and small reads). */
  push(input: Buffer): Buffer {
    const copy = Buffer.from(input);
    return copy.subarray(0, this.decodeInPlace(copy, 0, copy.length));
  }

  /**
   * Moves the body bytes found in buf[start, end) to buf[start, returned end). Throws on framing that
   * is not chunked encoding. Bytes after the final chunk are ignored.
   */
  decodeInPlace(buf: Buffer, start: number, end: number): number {
    let o = start;
    let i = start;
    while (i < end && this.state !== 'done') {
      switch (this.state) {
        case 'data': {
          const take = Math.min(this.remaining, end - i);
          if (o !== i) buf.copy(buf, o, i, i + take);
          o += take;
          i += take;
          this.remaining -= take;
          if (this.remaining === 0) this.state = 'data-cr';
          break;
        }
        case 'size': {
          const c = buf[i++]!;
          const digit = c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : c >= 65 && c <= 70 ? c - 55 : -1;
          if (digit >= 0) {
            if (++this.sizeDigits > 8) throw new Error('chunk size too large');
            this.size = this.size * 16 + digit;
          } else if (c === 13 && this.sizeDigits > 0) this.state = 'size-lf';
          else if ((c === 59 || c === 32 || c === 9) && this.sizeDigits > 0) this.state = 'ext';
          else throw new Error('bad chunk size');
          break;
        }
        case 'ext':
          if (buf[i++] === 13) this.state = 'size-lf';
          break;
        case 'size-lf':
          if (buf[i++] !== 10) throw new Error('bad chunk size line');
          if (this.size === 0) {
            this.state = 'trailer';
            this.trailerLineEmpty = true;
          } else {
            this.remaining = this.size;
            this.state = 'data';
          }
          this.size = 0;
          this.sizeDigits = 0;
          break;
        case 'data-cr':
          if (buf[i++] !== 13) throw new Error('chunk longer than announced');
          this.state = 'data-lf';
          break;
        case 'data-lf':
          if (buf[i++] !== 10) throw new Error('chunk longer than announced');
          this.state = 'size';
          break;
        case 'trailer': {
          if (buf[i++] === 13) this.state = 'trailer-lf';
          else this.trailerLineEmpty = false;
          break;
        }
        case 'trailer-lf':
          if (buf[i++] !== 10) throw new Error('bad trailer');
          if (this.trailerLineEmpty) this.state = 'done';
          else {
            this.state = 'trailer';
            this.trailerLineEmpty = true;
          }
          break;
      }
    }
    return o;
  }
}

export class EngineError extends Error {
  constructor(
    readonly statusCode: number,
    message: string,
  ) {
    super(message);
  }
}

/** Where a response body goes. */
export interface ByteSink {
  /** Body bytes, valid only during the call (the buffer is reused). False: stop reading for now. */
  bytes(buf: Buffer): boolean;
  /** The body ended (null) or could not be read to its end. */
  end(err: Error | null): void;
}

/** An open engine response. */
export interface EngineConnection {
  resume(): void;
  destroy(): void;
}

const READ_BUFFER_BYTES = 64 * 1024;
const PARSE_BYTES = 16 * 1024;

/**
 * Sends `GET <path>` over the engine's unix socket and streams the body into `sink`. Resolves once the
 * engine answered 200; rejects with an EngineError (with the status) when it answered otherwise.
 */
export function openEngineStream(socketPath: string, path: string, sink: ByteSink): Promise<EngineConnection> {
  return new Promise((resolve, reject) => {
    let phase: 'head' | 'body' | 'error' = 'head';
    let head: Buffer = Buffer.alloc(0);
    let status = 0;
    let decoder: ChunkedDecoder | null = null;
    let remaining: number | null = null;
    const errorBody: Buffer[] = [];
    let settled = false;
    let over = false;

    const answerError = () => {
      let message = `the engine answered ${status}`;
      try {
        message = (JSON.parse(Buffer.concat(errorBody).toString('utf8')) as { message?: string }).message ?? message;
      } catch {
        /* not JSON */
      }
      fail(new EngineError(status, message));
    };
    const fail = (err: Error) => {
      if (over) return;
      over = true;
      socket.destroy();
      if (!settled) {
        settled = true;
        reject(err);
      } else sink.end(err);
    };
    const complete = () => {
      if (over) return;
      if (phase === 'error') return answerError();
      over = true;
      socket.destroy();
      sink.end(null);
    };
    const body = (buf: Buffer, start: number, end: number): boolean => {
      let e = end;
      if (decoder) e = decoder.decodeInPlace(buf, start, end);
      else if (remaining !== null) {
        e = Math.min(end, start + remaining);
        remaining -= e - start;
      }
      let more = true;
      if (e > start) {
        if (phase === 'body') more = sink.bytes(buf.subarray(start, e));
        else if (errorBody.reduce((n, b) => n + b.length, 0) < 64 * 1024) errorBody.push(Buffer.from(buf.subarray(start, e)));
      }
      if (decoder ? decoder.done : remaining !== null && remaining <= 0) {
        complete();
        return false;
      }
      return more;
    };

    const socket: Socket = connect({
      path: socketPath,
      onread: {
        buffer: Buffer.allocUnsafe(READ_BUFFER_BYTES),
        callback: (n: number, buf: Uint8Array): boolean => {
          if (over) return false;
          const data = Buffer.from(buf.buffer, buf.byteOffset, n);
          try {
            if (phase !== 'head') return body(data, 0, n);
            head = Buffer.concat([head, data]); // a copy: the read buffer is reused
            const at = head.indexOf('\r\n\r\n');
            if (at < 0) {
              if (head.length > 64 * 1024) fail(new Error('the engine sent an oversized response head'));
              return !over;
            }
            const lines = head.toString('latin1', 0, at).split('\r\n');
            status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')?.[1] ?? NaN);
            const headers = new Map(lines.slice(1).map((l) => [l.slice(0, l.indexOf(':')).trim().toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
            if (/chunked/i.test(headers.get('transfer-encoding') ?? '')) decoder = new ChunkedDecoder();
            else if (headers.has('content-length')) remaining = Number(headers.get('content-length'));
            phase = status === 200 ? 'body' : 'error';
            const rest = head;
            head = Buffer.alloc(0);
            if (phase === 'body') {
              settled = true;
              resolve({ resume: () => !over && socket.resume(), destroy: () => fail(new Error('closed')) });
            }
            const more = at + 4 < rest.length ? body(rest, at + 4, rest.length) : true;
            if (!over && phase === 'error' && remaining === 0) answerError();
            return more;
          } catch (err) {
            fail(err as Error);
            return false;
          }
        },
      },
    });
    socket.once('connect', () => socket.write(`GET ${path} HTTP/1.1\r\nHost: docker\r\nUser-Agent: installer\r\nConnection: close\r\n\r\n`));
    socket.once('end', () => {
      // A body without length or chunking ends with the connection; any other ending is a cut.
      if (phase !== 'head' && decoder === null && remaining === null) complete();
      else fail(new Error('the engine closed the connection before the end of the response'));
    });
    socket.once('error', (err) => fail(err));
    socket.once('close', () => fail(new Error('the engine closed the connection before the end of the response')));
  });
}

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

// ---------------------------------------------------------------------------------------------
// One engine connection as a bounded queue of lines.

interface ContainerRef {
  id: string;
  name: string;
  service: string;
  tty: boolean;
}

interface SourceOptions {
  scrub: (line: string) => string;
  maxBytes: number;
  maxLineBytes: number;
  /** Drop lines until this one (same timestamp, stream and text) has passed; give up after `within` lines. */
  skipThrough?: { line: ContainerLogLine; within: number };
  /** Drop lines stamped after this timestamp. */
  notAfter?: string;
}

const sameLine = (a: ContainerLogLine, b: ContainerLogLine) => a.timestamp === b.timestamp && a.stream === b.stream && a.line === b.line;

/**
 * One engine connection as a bounded queue. What the engine sent is kept as bytes (outside the
 * JavaScript heap) and parsed into lines only as they are taken, so read-ahead costs no heap objects
 * that would survive collections; beyond `maxBytes` of read-ahead the connection is paused.
 */
class LineSource implements ByteSink {
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

  constructor(
    readonly ref: ContainerRef,
    private readonly opts: SourceOptions,
  ) {
    this.skip = opts.skipThrough;
    this.store = new ByteQueue(Math.ceil(opts.maxBytes / (64 * 1024)) + 1);
    this.parser = new LogFrameParser(ref.tty, (l) => this.onLine(l), opts.maxLineBytes);
  }

  /** Connects the source to its engine response. */
  attach(control: EngineConnection): void {
    this.control = control;
    if (this.destroyed) control.destroy();
    else if (this.paused && this.store.size <= this.opts.maxBytes / 2) {
      this.paused = false;
      control.resume();
    }
  }

  bytes(buf: Buffer): boolean {
    if (this.destroyed) return false;
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
    if (this.destroyed) return;
    const line: ContainerLogLine = {
      container: this.ref.name,
      service: this.ref.service,
      stream: p.stream,
      timestamp: p.timestamp,
      line: this.opts.scrub(p.text),
    };
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
    if (this.opts.notAfter !== undefined && line.timestamp > this.opts.notAfter) return;
    this.lines.push(line);
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

// ---------------------------------------------------------------------------------------------
// Feeds.

// Batches stay well below V8's large-object size, so that the strings built from them die young
// instead of piling up in the old generation until a full collection.
const BATCH_LINES = 512;
const BATCH_BYTES = 48 * 1024;
const LIVE_PER_SOURCE = 256;

class Closer {
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
class Wakeup {
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

function makeFeed(body: (closer: Closer) => AsyncGenerator<ContainerLogLine[]>): LogFeed {
  const closer = new Closer();
  let started = false;
  return {
    close: () => closer.close(),
    [Symbol.asyncIterator]() {
      if (started) throw new Error('a log feed can be read once');
      started = true;
      const gen = body(closer);
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
async function* mergeOrdered(sources: LineSource[], closer: Closer, emit: boolean): AsyncGenerator<ContainerLogLine[]> {
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

interface ResumePoint {
  /** The last line of this container already read: resume right after it. */
  after?: ContainerLogLine;
  /** Otherwise read from this instant (epoch ns), or from the container's first line when absent. */
  since?: bigint;
}

interface DialModem {
  dial(opts: Record<string, unknown>, cb: (err: Error | null, res?: unknown) => void): void;
}

export class ContainerLogs implements ContainerLogsPort {
  private readonly ttyCache = new Map<string, boolean>();
  private readonly opts: Required<Omit<ContainerLogsOptions, 'warn'>> & Pick<ContainerLogsOptions, 'warn'>;

  constructor(
    private readonly docker: Docker,
    opts: ContainerLogsOptions,
  ) {
    this.opts = {
      resumeWindow: 2000,
      bufferBytes: 1024 * 1024,
      maxLineBytes: 1024 * 1024,
      untilGraceMs: 1000,
      ...opts,
    };
  }

  async containers(project: string): Promise<PlatformContainer[]> {
    return (await this.list({ project })).map(({ id, name, service, state }) => ({ id, name, service, state }));
  }

  live(selection: LogSelection, opts: { tail: number }): LogFeed {
    return makeFeed((closer) => this.run(closer, selection, { kind: 'tail', tail: opts.tail }));
  }

  window(selection: LogSelection, opts: { since?: bigint; until?: bigint; follow: boolean }): LogFeed {
    return makeFeed((closer) => this.run(closer, selection, { kind: 'window', ...opts }));
  }

  private async list(sel: LogSelection): Promise<(PlatformContainer & { labels: Record<string, string> })[]> {
    const label = [`${PROJECT_LABEL}=${sel.project}`];
    if (sel.service !== undefined) label.push(`${SERVICE_LABEL}=${sel.service}`);
    const found = await this.docker.listContainers({ all: true, filters: { label } });
    return found
      .map((c) => ({
        id: c.Id,
        name: (c.Names[0] ?? c.Id).replace(/^\//, ''),
        service: c.Labels[SERVICE_LABEL] ?? '',
        state: c.State,
        labels: c.Labels,
      }))
      .filter((c) => sel.containerName === undefined || c.name === sel.containerName)
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  private async tty(id: string): Promise<boolean> {
    const cached = this.ttyCache.get(id);
    if (cached !== undefined) return cached;
    const info = await this.docker.getContainer(id).inspect();
    const tty = Boolean(info.Config.Tty);
    if (this.ttyCache.size > 1000) this.ttyCache.clear();
    this.ttyCache.set(id, tty);
    return tty;
  }

  /**
   * Opens `GET /containers/{id}/logs` into `sink`; false when the container no longer exists. Over a
   * unix socket it is read directly (openEngineStream); otherwise through dockerode as a stream
   * (dockerode would buffer a non-follow read whole).
   */
  private async openStream(id: string, params: Record<string, string | number | boolean>, sink: LineSource): Promise<boolean> {
    const modem = this.docker.modem as unknown as DialModem & { socketPath?: unknown };
    if (typeof modem.socketPath === 'string') {
      const query = new URLSearchParams({ stdout: '1', stderr: '1', timestamps: '1' });
      for (const [k, v] of Object.entries(params)) query.set(k, typeof v === 'boolean' ? (v ? '1' : '0') : String(v));
      try {
        sink.attach(await openEngineStream(modem.socketPath, `/containers/${encodeURIComponent(id)}/logs?${query}`, sink));
        return true;
      } catch (err) {
        if ((err as { statusCode?: number }).statusCode === 404) return false;
        throw err;
      }
    }
    const stream = await new Promise<Readable | null>((resolve, reject) => {
      modem.dial(
        {
          path: `/containers/${id}/logs?`,
          method: 'GET',
          isStream: true,
          statusCodes: { 200: true, 404: 'no such container', 500: 'server error' },
          options: { stdout: true, stderr: true, timestamps: true, ...params },
        },
        (err, res) => {
          if (err) {
            if ((err as { statusCode?: number }).statusCode === 404) resolve(null);
            else reject(err);
          } else resolve(res as Readable);
        },
      );
    });
    if (!stream) return false;
    stream.on('data', (d: Buffer) => {
      if (!sink.bytes(d)) stream.pause();
    });
    stream.once('end', () => sink.end(null));
    stream.once('error', (err: Error) => sink.end(err));
    stream.once('close', () => sink.end(stream.readableEnded ? null : new Error('the engine closed the log stream before its end')));
    sink.attach({ resume: () => stream.resume(), destroy: () => stream.destroy() });
    return true;
  }

  private async source(
    closer: Closer,
    ref: Omit<ContainerRef, 'tty'>,
    params: Record<string, string | number | boolean>,
    extra: Pick<SourceOptions, 'skipThrough' | 'notAfter'> = {},
  ): Promise<LineSource | null> {
    const maxBytes = params.follow ? Math.ceil(this.opts.bufferBytes / 4) : this.opts.bufferBytes;
    let tty: boolean;
    try {
      tty = await this.tty(ref.id);
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return null; // removed meanwhile
      throw err;
    }
    const src = new LineSource({ ...ref, tty }, { scrub: this.opts.scrub, maxBytes, maxLineBytes: this.opts.maxLineBytes, ...extra });
    closer.track(src);
    if (!(await this.openStream(ref.id, params, src))) {
      closer.untrack(src);
      return null;
    }
    return src;
  }

  private followParams(resume: ResumePoint): { params: Record<string, string | number | boolean>; skip?: SourceOptions['skipThrough'] } {
    if (resume.after) {
      return { params: { follow: true, tail: this.opts.resumeWindow }, skip: { line: resume.after, within: this.opts.resumeWindow } };
    }
    if (resume.since !== undefined) return { params: { follow: true, since: engineTime(resume.since) } };
    return { params: { follow: true, tail: 'all' } };
  }

  private async *run(
    closer: Closer,
    sel: LogSelection,
    mode: { kind: 'tail'; tail: number } | { kind: 'window'; since?: bigint; until?: bigint; follow: boolean },
  ): AsyncGenerator<ContainerLogLine[]> {
    const startNs = BigInt(Date.now()) * NS_PER_MS;
    const until = mode.kind === 'window' ? mode.until : undefined;
    const since = mode.kind === 'window' ? mode.since : undefined;
    const follow = mode.kind === 'tail' || (mode.follow && (until === undefined || until > startNs));

    try {
      // Subscribe to starts before listing, so that a container starting in between is not missed.
      const joins = new JoinQueue();
      if (follow) await this.watchStarts(closer, sel, joins);

      // History: a finite read of each container, merged strictly by timestamp.
      const containers = await this.list(sel);
      const params: Record<string, string | number | boolean> =
        mode.kind === 'tail'
          ? { tail: Math.max(mode.tail, 1) }
          : {
              ...(since !== undefined ? { since: engineTime(since) } : {}),
              // While following, the history ends where the read started; later lines come from the followers.
              ...(follow ? { until: engineTime(startNs) } : until !== undefined ? { until: engineTime(until) } : {}),
            };
      const opened = await Promise.all(containers.map((c) => this.source(closer, c, params)));
      const history = opened.filter((s): s is LineSource => s !== null);
      yield* mergeOrdered(history, closer, mode.kind === 'window' || mode.tail > 0);
      if (!follow || closer.closed) return;

      // Live: one follower per running container, resumed right after the last line the history read.
      const lastLine = new Map<string, ContainerLogLine>();
      for (const s of history) if (s.last) lastLine.set(s.ref.id, s.last);
      const floor = mode.kind === 'window' ? (since !== undefined && since > startNs ? since : startNs + 1n) : undefined;
      for (const c of containers) if (c.state === 'running') joins.add(c.id);
      yield* this.followAll(closer, sel, joins, lastLine, {
        ...(floor !== undefined ? { floor } : {}),
        ...(until !== undefined ? { notAfter: nsToTimestamp(until), deadline: Number(until / NS_PER_MS) + this.opts.untilGraceMs } : {}),
      });
    } finally {
      closer.close();
    }
  }

  private async watchStarts(closer: Closer, sel: LogSelection, joins: JoinQueue): Promise<void> {
    const label = [`${PROJECT_LABEL}=${sel.project}`];
    if (sel.service !== undefined) label.push(`${SERVICE_LABEL}=${sel.service}`);
    const events = (await this.docker.getEvents({ filters: { type: ['container'], event: ['start'], label } })) as unknown as Readable;
    closer.track(events);
    let rest = '';
    events.on('data', (chunk: Buffer) => {
      rest += chunk.toString('utf8');
      let nl: number;
      while ((nl = rest.indexOf('\n')) >= 0) {
        const text = rest.slice(0, nl);
        rest = rest.slice(nl + 1);
        try {
          const ev = JSON.parse(text) as { id?: string; Actor?: { ID?: string; Attributes?: Record<string, string> } };
          const id = ev.Actor?.ID ?? ev.id;
          const name = ev.Actor?.Attributes?.name;
          if (id && (sel.containerName === undefined || name === sel.containerName)) joins.add(id);
        } catch {
          /* not an event line */
        }
      }
    });
    const lost = () => {
      if (!closer.closed) joins.fail(new Error('the engine closed its event stream'));
    };
    events.once('end', lost);
    events.once('close', lost);
    events.once('error', lost);
  }

  private async *followAll(
    closer: Closer,
    sel: LogSelection,
    joins: JoinQueue,
    lastLine: Map<string, ContainerLogLine>,
    opts: { floor?: bigint; notAfter?: string; deadline?: number },
  ): AsyncGenerator<ContainerLogLine[]> {
    const followers = new Map<string, LineSource>();
    const rechecks = new Set<ReturnType<typeof setTimeout>>();
    const wakeup = new Wakeup();
    joins.onSignal = wakeup.wake;
    closer.onClose(wakeup.wake);
    const deadlineTimer = opts.deadline === undefined ? undefined : setTimeout(wakeup.wake, Math.max(0, opts.deadline - Date.now()));
    const extra = opts.notAfter !== undefined ? { notAfter: opts.notAfter } : {};
    const add = (src: LineSource | null) => {
      if (!src) return;
      src.onActivity = wakeup.wake;
      followers.set(src.ref.id, src);
    };
    try {
      while (!closer.closed) {
        if (opts.deadline !== undefined && Date.now() >= opts.deadline) return;
        if (joins.error) throw joins.error;

        for (const id of joins.take()) {
          if (followers.has(id)) continue; // still reading; looked at again when that read ends
          const info = await this.inspectOrNull(id);
          if (!info || !info.State.Running) continue;
          const name = info.Name.replace(/^\//, '');
          if (sel.containerName !== undefined && name !== sel.containerName) continue;
          const ref = { id, name, service: info.Config.Labels?.[SERVICE_LABEL] ?? '' };
          const after = lastLine.get(id);
          const { params, skip } = this.followParams(after ? { after } : opts.floor !== undefined ? { since: opts.floor } : {});
          add(await this.source(closer, ref, params, { ...(skip ? { skipThrough: skip } : {}), ...extra }));
        }

        // Everything buffered now, merged by timestamp, each container kept in engine order.
        const batch = gather([...followers.values()], lastLine);
        if (batch.length) {
          yield batch;
          continue;
        }

        for (const [id, s] of followers) {
          if (!s.ended || s.hasLine()) continue;
          followers.delete(id);
          closer.untrack(s);
          const after = lastLine.get(id);
          if (s.gap && after) {
            // The resume line was pushed out of the re-read window: scan from just after it instead.
            add(await this.source(closer, s.ref, { follow: true, since: engineTime(timestampToNs(after.timestamp) + 1n) }, extra));
            continue;
          }
          if (s.error) this.opts.warn?.({ container: s.ref.name, err: s.error.message }, 'a container log stream failed; it is read again if the container runs');
          // The container stopped (or the read failed): look again shortly, in case it restarted.
          const t = setTimeout(() => {
            rechecks.delete(t);
            joins.add(id);
          }, 250);
          rechecks.add(t);
        }
        await wakeup.wait();
      }
    } finally {
      for (const t of rechecks) clearTimeout(t);
      if (deadlineTimer) clearTimeout(deadlineTimer);
      for (const s of followers.values()) s.destroy();
    }
  }

  private async inspectOrNull(id: string): Promise<Docker.ContainerInspectInfo | null> {
    try {
      return await this.docker.getContainer(id).inspect();
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return null;
      throw err;
    }
  }
}

/** Takes what the followers hold now (a bounded batch), merged by timestamp; records each container's last line. */
function gather(sources: LineSource[], lastLine: Map<string, ContainerLogLine>): ContainerLogLine[] {
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

/** Container ids to (re)start following, with a signal when one arrives. */
class JoinQueue {
  private readonly ids = new Set<string>();
  onSignal: (() => void) | null = null;
  error: Error | null = null;

  add(id: string): void {
    this.ids.add(id);
    this.onSignal?.();
  }

  fail(err: Error): void {
    this.error ??= err;
    this.onSignal?.();
  }

  take(): string[] {
    const ids = [...this.ids];
    this.ids.clear();
    return ids;
  }
}

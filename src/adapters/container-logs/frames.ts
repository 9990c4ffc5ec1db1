// The engine's log frames, parsed into lines. Without a TTY the engine multiplexes stdout and
// stderr: an 8-byte header (stream type, three zero bytes, big-endian payload size) before each
// message. With timestamps on, each message is `<timestamp> <text>`; text without a trailing newline
// is a partial message that the next message of the same stream continues (the engine splits lines
// longer than 16 KiB). Swarm service and task logs read with `details=1` put the message's
// attributes between the two, `<timestamp> <k=v,k=v,...> <text>` (each piece of a split line too):
// with `details` on, the parser hands them on and joins pieces per stream and attributes (per task),
// since a service's stream interleaves the messages of its tasks.
import type { ContainerLogLine } from '../../contracts/ports.ts';
import { normalizeTimestamp } from './time.ts';

type Stream = ContainerLogLine['stream'];

export interface ParsedLine {
  stream: Stream;
  timestamp: string;
  text: string;
  /** The message's attributes, as the engine wrote them (`details` on only). */
  details?: string;
}

export interface FrameOptions {
  /** Messages carry `<attributes> ` after the timestamp (logs read with `details=1`). */
  details?: boolean;
  /** A frame of the engine's own (stream type 3), such as "incomplete log stream" from a Swarm. */
  systemError?: (text: string) => void;
}

type Pending = { ts: string; parts: Buffer[]; bytes: number };

export class LogFrameParser {
  private carry: Buffer | null = null;
  /** Unfinished lines, by stream (and attributes, with `details` on). */
  private readonly partial = new Map<string, Pending & { stream: Stream; details: string | undefined }>();

  constructor(
    private readonly tty: boolean,
    private readonly emit: (line: ParsedLine) => void,
    private readonly maxLineBytes = 1024 * 1024,
    private readonly opts: FrameOptions = {},
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
      else if (type === 3) this.opts.systemError?.(frame.toString('utf8', 8).trimEnd());
      buf = chunk;
      off = need;
    }
    while (buf.length - off >= 8) {
      const size = buf.readUInt32BE(off + 4);
      if (buf.length - off - 8 < size) break;
      const type = buf[off];
      if (type === 1 || type === 2) this.message(type === 2 ? 'stderr' : 'stdout', buf, off + 8, off + 8 + size);
      else if (type === 3) this.opts.systemError?.(buf.toString('utf8', off + 8, off + 8 + size).trimEnd());
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
    for (const key of [...this.partial.keys()]) this.flushPartial(key);
  }

  private message(stream: Stream, buf: Buffer, start: number, end: number): void {
    const space = buf.indexOf(0x20, start);
    if (space < 0 || space >= end) return; // not `<timestamp> <text>`: nothing a timestamped read produces
    const ts = buf.toString('latin1', start, space);
    let textStart = space + 1;
    let details: string | undefined;
    if (this.opts.details) {
      const next = buf.indexOf(0x20, textStart);
      if (next < 0 || next >= end) return;
      details = buf.toString('latin1', textStart, next); // URL-encoded by the engine: ASCII
      textStart = next + 1;
    }
    let bodyEnd = end;
    const complete = buf[end - 1] === 0x0a;
    if (complete) bodyEnd--;
    const body = buf.subarray(textStart, bodyEnd);
    const key = details === undefined ? stream : `${stream} ${details}`;
    const pending = this.partial.get(key);
    if (!complete) {
      if (pending) {
        pending.parts.push(Buffer.from(body));
        pending.bytes += body.length;
        if (pending.bytes >= this.maxLineBytes) this.flushPartial(key);
      } else if (body.length >= this.maxLineBytes) {
        this.deliver(stream, ts, body.toString('utf8'), details);
      } else {
        this.partial.set(key, { stream, details, ts, parts: [Buffer.from(body)], bytes: body.length });
      }
      return;
    }
    if (pending) {
      pending.parts.push(body);
      this.partial.delete(key);
      this.deliver(stream, pending.ts, Buffer.concat(pending.parts).toString('utf8'), details);
    } else {
      this.deliver(stream, ts, body.toString('utf8'), details);
    }
  }

  private flushPartial(key: string): void {
    const pending = this.partial.get(key);
    if (!pending) return;
    this.partial.delete(key);
    this.deliver(pending.stream, pending.ts, Buffer.concat(pending.parts).toString('utf8'), pending.details);
  }

  private deliver(stream: Stream, ts: string, text: string, details?: string): void {
    let timestamp: string;
    try {
      timestamp = normalizeTimestamp(ts);
    } catch {
      return;
    }
    if (details !== undefined) {
      for (const part of text.includes('\n') ? text.split('\n') : [text]) this.emit({ stream, timestamp, text: part, details });
    } else if (text.includes('\n')) {
      for (const part of text.split('\n')) this.emit({ stream, timestamp, text: part });
    } else this.emit({ stream, timestamp, text });
  }
}

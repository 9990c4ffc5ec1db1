// The engine's log frames, parsed into lines. Without a TTY the engine multiplexes stdout and
// stderr: an 8-byte header (stream type, three zero bytes, big-endian payload size) before each
// message. With timestamps on, each message is `<timestamp> <text>`; text without a trailing newline
// is a partial message that the next message of the same stream continues (the engine splits lines
// longer than 16 KiB).
import type { ContainerLogLine } from '../../contracts/ports.ts';
import { normalizeTimestamp } from './time.ts';

type Stream = ContainerLogLine['stream'];

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

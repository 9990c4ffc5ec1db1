// The log endpoint over the engine's socket, read directly. The engine flushes every log message as
// an HTTP chunk of its own; Node's HTTP client turns each into a Buffer and an event, which costs
// more than everything else per line together. Here the socket is read into one reused buffer, the
// chunk framing is removed in place, and the body bytes are handed on while that buffer is valid
// (the line source copies them into a few reused slabs): reading a gigabyte allocates almost nothing
// that would wait for a garbage collection.
import { connect, type Socket } from 'node:net';

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

class EngineError extends Error {
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

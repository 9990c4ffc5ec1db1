// The engine's log framing, taken apart: 8-byte multiplex headers, partial messages, TTY streams,
// chunk boundaries anywhere. Pure functions; the same parser reads the real engine in test/e2e/logs.test.ts.
import { describe, expect, it } from 'vitest';
import { ChunkedDecoder, engineTime, LogFrameParser, nsToTimestamp, timestampToNs, type ParsedLine } from '../../src/adapters/container-logs/index.ts';

const TS = '2024-05-01T10:00:00.123456789Z';

function frame(stream: 1 | 2, payload: string | Buffer): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  const head = Buffer.alloc(8);
  head[0] = stream;
  head.writeUInt32BE(body.length, 4);
  return Buffer.concat([head, body]);
}

function parse(tty: boolean, chunks: Buffer[], maxLineBytes?: number): ParsedLine[] {
  const out: ParsedLine[] = [];
  const p = new LogFrameParser(tty, (l) => out.push(l), maxLineBytes);
  for (const c of chunks) p.push(c);
  p.end();
  return out;
}

/** Cuts a buffer into pieces at the given offsets. */
function cut(buf: Buffer, at: number[]): Buffer[] {
  const pieces: Buffer[] = [];
  let prev = 0;
  for (const a of [...at, buf.length]) {
    pieces.push(buf.subarray(prev, a));
    prev = a;
  }
  return pieces;
}

describe('multiplexed log frames', () => {
  const stream = Buffer.concat([
    frame(1, `${TS} first line\n`),
    frame(2, `2024-05-01T10:00:00.200000000Z on stderr: ünïcödé ✓\n`),
    frame(1, `2024-05-01T10:00:00.300000000Z \n`),
  ]);
  const expected: ParsedLine[] = [
    { stream: 'stdout', timestamp: TS, text: 'first line' },
    { stream: 'stderr', timestamp: '2024-05-01T10:00:00.200000000Z', text: 'on stderr: ünïcödé ✓' },
    { stream: 'stdout', timestamp: '2024-05-01T10:00:00.300000000Z', text: '' },
  ];

  it('splits stdout and stderr and strips timestamps', () => {
    expect(parse(false, [stream])).toEqual(expected);
  });

  it('gives the same lines wherever the chunks are cut', () => {
    for (let i = 1; i < stream.length; i++) {
      expect(parse(false, cut(stream, [i])), `cut at ${i}`).toEqual(expected);
    }
    expect(parse(false, cut(stream, Array.from({ length: stream.length - 1 }, (_, i) => i + 1)))).toEqual(expected);
  });

  it('joins partial messages (lines the engine split) under the first timestamp, even inside a character', () => {
    const text = 'é'.repeat(10);
    const bytes = Buffer.from(text, 'utf8');
    const parts = Buffer.concat([
      frame(1, Buffer.concat([Buffer.from(`${TS} `), bytes.subarray(0, 5)])), // cuts the third é in half
      frame(2, `2024-05-01T10:00:00.150000000Z interleaved\n`),
      frame(1, Buffer.concat([Buffer.from('2024-05-01T10:00:00.160000000Z '), bytes.subarray(5), Buffer.from('\n')])),
    ]);
    expect(parse(false, [parts])).toEqual([
      { stream: 'stderr', timestamp: '2024-05-01T10:00:00.150000000Z', text: 'interleaved' },
      { stream: 'stdout', timestamp: TS, text },
    ]);
  });

  it('cuts an endless line into bounded pieces instead of holding it', () => {
    const chunks = Array.from({ length: 10 }, (_, i) => frame(1, `2024-05-01T10:00:0${i}.000000000Z ${'x'.repeat(100)}`));
    const lines = parse(false, chunks, 250);
    expect(lines.map((l) => l.text.length)).toEqual([300, 300, 300, 100]);
    expect(lines[0]!.timestamp).toBe('2024-05-01T10:00:00.000000000Z');
  });

  it('normalises timestamps with offsets or fewer digits to UTC with nine digits', () => {
    const lines = parse(false, [frame(1, `2024-05-01T12:00:00.5+02:00 shifted\n`)]);
    expect(lines).toEqual([{ stream: 'stdout', timestamp: '2024-05-01T10:00:00.500000000Z', text: 'shifted' }]);
  });

  it('skips stdin frames and frames without a timestamp', () => {
    expect(parse(false, [frame(0 as 1, `${TS} stdin\n`), frame(1, 'no-timestamp-here\n'), frame(1, `${TS} ok\n`)])).toEqual([{ stream: 'stdout', timestamp: TS, text: 'ok' }]);
  });
});

describe('TTY streams (no multiplexing)', () => {
  it('reads every line as stdout, cut anywhere, and delivers an unterminated last line at the end', () => {
    const raw = Buffer.from(`${TS} one\r\n2024-05-01T10:00:01.000000000Z two\n2024-05-01T10:00:02.000000000Z three`);
    for (let i = 1; i < raw.length; i++) {
      expect(parse(true, cut(raw, [i]))).toEqual([
        { stream: 'stdout', timestamp: TS, text: 'one\r' },
        { stream: 'stdout', timestamp: '2024-05-01T10:00:01.000000000Z', text: 'two' },
        { stream: 'stdout', timestamp: '2024-05-01T10:00:02.000000000Z', text: 'three' },
      ]);
    }
  });
});

describe('engine time', () => {
  it('round-trips nanoseconds and writes the since/until form', () => {
    const ns = timestampToNs(TS);
    expect(ns).toBe(1714557600123456789n);
    expect(nsToTimestamp(ns)).toBe(TS);
    expect(nsToTimestamp(ns + 1n)).toBe('2024-05-01T10:00:00.123456790Z');
    expect(engineTime(ns)).toBe('1714557600.123456789');
    expect(engineTime(1714557600000000001n)).toBe('1714557600.000000001');
  });
});

describe('HTTP chunked framing (the engine flushes each log message as a chunk)', () => {
  const body = Buffer.concat([frame(1, `${TS} one\n`), frame(2, `${TS} two on stderr\n`), Buffer.from('x'.repeat(300))]);
  const pieces = [body.subarray(0, 17), body.subarray(17, 18), body.subarray(18, 200), body.subarray(200)];
  const wire = Buffer.concat([
    ...pieces.map((p, i) => Buffer.concat([Buffer.from(`${p.length.toString(16)}${i === 1 ? ';ext=1' : ''}\r\n`), p, Buffer.from('\r\n')])),
    Buffer.from('0\r\nX-Trailer: yes\r\n\r\n'),
  ]);

  it('gives back exactly the body, wherever the socket data is cut, and knows when it is complete', () => {
    for (let i = 1; i < wire.length; i++) {
      const d = new ChunkedDecoder();
      const out = Buffer.concat(cut(wire, [i]).map((c) => d.push(c)));
      expect(out.equals(body), `cut at ${i}`).toBe(true);
      expect(d.done).toBe(true);
    }
    const d = new ChunkedDecoder();
    const out = Buffer.concat(cut(wire, Array.from({ length: wire.length - 1 }, (_, i) => i + 1)).map((c) => d.push(c)));
    expect(out.equals(body)).toBe(true);
  });

  it('is not complete when the connection ends before the last chunk', () => {
    const d = new ChunkedDecoder();
    d.push(wire.subarray(0, wire.length - 10));
    expect(d.done).toBe(false);
  });

  it('refuses framing that is not chunked encoding', () => {
    expect(() => new ChunkedDecoder().push(Buffer.from('zz\r\n'))).toThrow();
    expect(() => new ChunkedDecoder().push(Buffer.from('2\r\nabc\r\n'))).toThrow();
    expect(() => new ChunkedDecoder().push(Buffer.from('fffffffff\r\n'))).toThrow();
  });
});

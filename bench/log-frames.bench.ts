// The container log adapter's hand-written decoding against the libraries that could replace it
// (docs/adr/0007-container-logs.md), on the same bytes, without an engine:
// - the engine's multiplexed frames, cut into 64 KiB reads: LogFrameParser (frames, timestamps,
//   lines) against dockerode's `modem.demuxStream` (frames only, into two streams);
// - a chunked log response over a unix socket, one chunk per message as the engine sends it:
//   openEngineStream (the socket read directly, chunk framing removed in place) against Node's
//   HTTP client (what dockerode uses), both feeding LogFrameParser.
import Docker from 'dockerode';
import http from 'node:http';
import { createServer, type Server } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { performance } from 'node:perf_hooks';
import type { Bench, Figure } from './run.ts';
import { LogFrameParser, openEngineStream } from '../src/adapters/container-logs/index.ts';

const READ = 64 * 1024;

/** `count` timestamped messages of about 100 bytes as the engine frames them; every 7th on stderr. */
function frames(count: number): Buffer[] {
  const text = 'x'.repeat(65);
  const out: Buffer[] = [];
  for (let i = 0; i < count; i++) {
    const payload = Buffer.from(`2024-05-01T10:00:00.${String(i).padStart(9, '0')}Z line ${text}\n`);
    const frame = Buffer.alloc(8 + payload.length);
    frame[0] = i % 7 === 0 ? 2 : 1;
    frame.writeUInt32BE(payload.length, 4);
    payload.copy(frame, 8);
    out.push(frame);
  }
  return out;
}

function reads(wire: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let o = 0; o < wire.length; o += READ) out.push(wire.subarray(o, o + READ));
  return out;
}

async function best(times: number, fn: () => Promise<number>): Promise<number> {
  let ms = Infinity;
  for (let i = 0; i < times; i++) {
    const t0 = performance.now();
    await fn();
    ms = Math.min(ms, performance.now() - t0);
  }
  return ms;
}

function parse(chunks: Buffer[], expect: number): number {
  let lines = 0;
  const p = new LogFrameParser(false, () => lines++);
  for (const c of chunks) p.push(c);
  p.end();
  if (lines !== expect) throw new Error(`LogFrameParser gave ${lines} lines, not ${expect}`);
  return lines;
}

async function demux(modem: Docker['modem'], chunks: Buffer[], expectBytes: number): Promise<number> {
  let bytes = 0;
  const sink = () =>
    new Writable({
      write(c: Buffer, _enc, cb) {
        bytes += c.length;
        cb();
      },
    });
  const src = new PassThrough({ highWaterMark: READ });
  const ended = new Promise((r) => src.once('end', r));
  modem.demuxStream(src, sink(), sink());
  for (const c of chunks) src.write(c);
  src.end();
  await ended;
  if (bytes !== expectBytes) throw new Error(`demuxStream gave ${bytes} bytes, not ${expectBytes}`);
  return bytes;
}

/** Answers every request on a unix socket with `body`, a prebuilt chunked log response. */
async function engineLike(socketPath: string, body: Buffer): Promise<Server> {
  const server = createServer((sock) => {
    let head = '';
    let answered = false;
    sock.on('data', (d: Buffer) => {
      if (answered) return;
      head += d.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      answered = true;
      sock.write('HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\nTransfer-Encoding: chunked\r\n\r\n');
      sock.end(body);
    });
    sock.on('error', () => {});
  });
  await new Promise<void>((r) => server.listen(socketPath, r));
  return server;
}

function chunked(messages: Buffer[]): Buffer {
  const parts: Buffer[] = [];
  for (const m of messages) parts.push(Buffer.from(`${m.length.toString(16)}\r\n`), m, Buffer.from('\r\n'));
  parts.push(Buffer.from('0\r\n\r\n'));
  return Buffer.concat(parts);
}

function readDirect(socketPath: string, expect: number): Promise<number> {
  return new Promise((resolve, reject) => {
    let lines = 0;
    const p = new LogFrameParser(false, () => lines++);
    openEngineStream(socketPath, '/containers/x/logs', {
      bytes: (b) => {
        p.push(b);
        return true;
      },
      end: (err) => {
        p.end();
        if (err) reject(err);
        else if (lines !== expect) reject(new Error(`openEngineStream gave ${lines} lines, not ${expect}`));
        else resolve(lines);
      },
    }).catch(reject);
  });
}

function readNodeHttp(socketPath: string, expect: number): Promise<number> {
  return new Promise((resolve, reject) => {
    let lines = 0;
    const p = new LogFrameParser(false, () => lines++);
    http
      .get({ socketPath, path: '/containers/x/logs', agent: false }, (res) => {
        res.on('data', (b: Buffer) => p.push(b));
        res.on('end', () => {
          p.end();
          if (lines !== expect) reject(new Error(`Node's HTTP client gave ${lines} lines, not ${expect}`));
          else resolve(lines);
        });
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

const bench: Bench = async (log) => {
  const figures: Figure[] = [];

  // demuxStream copies the rest of its buffer for every frame it takes off: a small sample will do.
  const small = frames(50_000);
  const smallReads = reads(Buffer.concat(small));
  const payloadBytes = small.reduce((n, f) => n + f.length - 8, 0);
  const modem = new Docker({ socketPath: '/nonexistent' }).modem;
  const parserMs = await best(3, async () => parse(smallReads, small.length));
  const demuxMs = await best(3, () => demux(modem, smallReads, payloadBytes));
  log(`${small.length} messages in ${smallReads.length} reads: LogFrameParser ${parserMs.toFixed(0)} ms, demuxStream ${demuxMs.toFixed(0)} ms`);
  figures.push({ name: 'LogFrameParser (frames, timestamps, lines)', value: Math.round(small.length / (parserMs / 1000)), unit: 'messages/s' });
  figures.push({ name: 'docker-modem demuxStream (frames only)', value: Math.round(small.length / (demuxMs / 1000)), unit: 'messages/s' });

  const big = frames(500_000);
  const dir = mkdtempSync(path.join(tmpdir(), 'log-frames-bench-'));
  const socketPath = path.join(dir, 'engine.sock');
  const server = await engineLike(socketPath, chunked(big));
  try {
    const directMs = await best(3, () => readDirect(socketPath, big.length));
    const nodeMs = await best(3, () => readNodeHttp(socketPath, big.length));
    log(`${big.length} messages, one chunk each: openEngineStream ${directMs.toFixed(0)} ms, Node's HTTP client ${nodeMs.toFixed(0)} ms`);
    figures.push({ name: 'openEngineStream + LogFrameParser', value: Math.round(big.length / (directMs / 1000)), unit: 'lines/s' });
    figures.push({ name: "Node's HTTP client + LogFrameParser", value: Math.round(big.length / (nodeMs / 1000)), unit: 'lines/s' });
  } finally {
    await new Promise((r) => server.close(r));
    rmSync(dir, { recursive: true, force: true });
  }
  return figures;
};

export default bench;

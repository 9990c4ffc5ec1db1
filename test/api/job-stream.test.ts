// The job stream as a real SSE client sees it: a writer appends events while an EventSource
// disconnects at random points and reconnects with Last-Event-ID. Nothing lost, nothing twice.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventSource } from 'eventsource';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { sql } from 'kysely';
import { createJob } from '../../src/state/jobs.ts';
import { parseSse } from '../helpers/shared/sse.ts';
import { stalledClient } from '../helpers/api/stalled-client.ts';

let t: TestApp;
let base: string;
beforeAll(async () => {
  t = await startTestApp({ env: { LOG_CLIENT_STALL_SECONDS: '1' } });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => t?.close());

const TYPES = ['phase', 'output', 'progress', 'warning', 'finished'];

/** Opens a stream and resolves with the seqs it received before it was closed or finished. */
function session(url: string, token: string, lastId: number | null, closeAfter: number): Promise<{ seqs: number[]; finished: boolean }> {
  return new Promise((resolve, reject) => {
    const seqs: number[] = [];
    const es = new EventSource(url, {
      fetch: (input, init) =>
        fetch(input, { ...init, headers: { ...init?.headers, authorization: `Bearer ${token}`, ...(lastId !== null ? { 'last-event-id': String(lastId) } : {}) } }),
    });
    const done = (finished: boolean) => {
      es.close();
      resolve({ seqs, finished });
    };
    for (const type of TYPES) {
      es.addEventListener(type, (e) => {
        seqs.push(Number((e as MessageEvent).lastEventId));
        if (type === 'finished') done(true);
        else if (seqs.length >= closeAfter) done(false);
      });
    }
    es.onerror = (e) => {
      if (es.readyState === EventSource.CLOSED) reject(new Error(`stream failed: ${(e as { message?: string }).message}`));
    };
  });
}

describe('job stream with a reconnecting client', () => {
  it('loses nothing and repeats nothing across random disconnects while the job writes', async () => {
    const jobId = await createJob(t.db.database.db, { kind: 'restart', params: {}, actor: { id: 'operator' } });
    const total = 2_000;
    await t.wired.events.open(jobId);
    const writer = (async () => {
      for (let i = 1; i < total; i++) {
        void t.wired.events.append(jobId, i % 10 === 0 ? 'progress' : 'output', { stream: 'stdout', line: `line ${i}` });
        if (i % 50 === 0) await new Promise((r) => setTimeout(r, Math.random() * 20));
      }
      await t.wired.events.append(jobId, 'finished', { outcome: 'completed', exitCode: 0 });
    })();

    const token = await t.token('viewer');
    const url = `${base}/api/deployment/jobs/${jobId}/logs`;
    const received: number[] = [];
    let reconnects = 0;
    for (;;) {
      const last = received.length ? received[received.length - 1]! : null;
      const r = await session(url, token, last, 1 + Math.floor(Math.random() * 300));
      received.push(...r.seqs);
      if (r.finished) break;
      reconnects++;
    }
    await writer;
    expect(reconnects).toBeGreaterThan(3);
    expect(received).toEqual(Array.from({ length: total }, (_, i) => i + 1));
  }, 60_000);

  it('a client joining with Last-Event-ID after the job ended gets exactly the rest', async () => {
    const jobId = await createJob(t.db.database.db, { kind: 'restart', params: {}, actor: { id: 'operator' } });
    await t.wired.events.open(jobId);
    for (let i = 1; i < 50; i++) void t.wired.events.append(jobId, 'output', { stream: 'stdout', line: `l${i}` });
    await t.wired.events.append(jobId, 'finished', { outcome: 'completed' });
    expect(t.wired.events.inMemory(jobId)).toBe(true);
    const r = await session(`${base}/api/deployment/jobs/${jobId}/logs`, await t.token('viewer'), 20, 10_000);
    expect(r.seqs).toEqual(Array.from({ length: 30 }, (_, i) => i + 21));
  });

  it('sends a heartbeat comment every 15 seconds while a job is quiet', async () => {
    const jobId = await createJob(t.db.database.db, { kind: 'restart', params: {}, actor: { id: 'operator' } });
    const token = await t.token('viewer');
    const started = Date.now();
    const res = await fetch(`${base}/api/deployment/jobs/${jobId}/logs`, { headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' } });
    // Connected at once, before any event or heartbeat.
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const reader = res.body!.getReader();
    let text = '';
    while (!text.includes(': heartbeat')) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const waited = Date.now() - started;
    await reader.cancel();
    expect(text).toContain(': heartbeat');
    expect(waited).toBeGreaterThan(14_000);
    expect(waited).toBeLessThan(17_000);
  }, 30_000);
});

/** A finished job of `n` stored events (the last one `finished`), written straight to the log table as a long job leaves it. */
async function storedJob(n: number, lineLength: number): Promise<string> {
  const db = t.db.database.db;
  const jobId = await createJob(db, { kind: 'restart', params: {}, actor: { id: 'operator' } });
  await sql`insert into deployment_job_events (job_id, seq, type, payload, at)
    select ${jobId}, g, case when g = ${n} then 'finished' else 'output' end,
      case when g = ${n} then '{"outcome":"completed","exitCode":0}'::jsonb
        else jsonb_build_object('stream', 'stdout', 'line', 'line ' || g || ' ' || repeat('x', ${lineLength})) end,
      now()
    from generate_series(1, ${n}) g`.execute(db);
  return jobId;
}

describe('a long replay', () => {
  it('arrives whole, in order, frame by frame as the SSE plugin writes them, across pages of the log', async () => {
    const n = 12_345; // more than two pages of 5,000
    const jobId = await storedJob(n, 20);
    const res = await fetch(`${base}/api/deployment/jobs/${jobId}/logs`, { headers: { authorization: `Bearer ${await t.token('viewer')}`, accept: 'text/event-stream' } });
    const body = await res.text();
    const events = parseSse(body);
    expect(events.map((e) => Number(e.id))).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    expect(events.at(-1)).toMatchObject({ event: 'finished', data: { seq: n, type: 'finished', outcome: 'completed', exitCode: 0 } });
    expect(events[99]).toMatchObject({ event: 'output', data: { seq: 100, type: 'output', stream: 'stdout', line: `line 100 ${'x'.repeat(20)}` } });
    // The frame of one event, byte for byte.
    const at = (events[0]!.data as { at: string }).at;
    expect(body.slice(0, body.indexOf('\n\n') + 2)).toBe(`id: 1\nevent: output\ndata: {"seq":1,"type":"output","at":"${at}","line":"line 1 ${'x'.repeat(20)}","stream":"stdout"}\n\n`);
  }, 60_000);

  it('drops a client that stops reading after LOG_CLIENT_STALL_SECONDS', async () => {
    const jobId = await storedJob(60_000, 400); // about 27 MB: more than the sockets' buffers hold
    const client = await stalledClient(base, `/api/deployment/jobs/${jobId}/logs`, await t.token('viewer'));
    expect(client.head).toMatch(/^HTTP\/1.1 200/);
    const started = Date.now();
    while (!t.logs.some((l) => l.includes('dropped a job stream client that stopped reading')) && Date.now() - started < 15_000) await new Promise((r) => setTimeout(r, 50));
    const line = t.logs.find((l) => l.includes('dropped a job stream client that stopped reading'));
    expect(line).toBeDefined();
    expect(JSON.parse(line!)).toMatchObject({ level: 'warn', jobId, stalledSeconds: 1 });
    // What reaches the client is what the buffers held when it stopped: far less than the whole job.
    const received = await client.resume();
    expect(received).toBeLessThan(20 * 1024 * 1024);
  }, 60_000);
});

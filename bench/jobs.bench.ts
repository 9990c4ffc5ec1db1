// Job event stream figures, on the machine's Postgres and a real HTTP listener:
// - latency from the moment the backend has a compose output line to an SSE client having it;
// - replay of a 100,000-event job from the database;
// - 100 concurrent clients on one job: every client must see every event exactly once.
import { performance } from 'node:perf_hooks';
import type { Bench, Figure } from './run.ts';
import { startTestApp } from '../test/helpers/api/app.ts';
import { createJob } from '../src/state/jobs.ts';

const now = () => performance.timeOrigin + performance.now();

/** Reads an SSE response, calling onEvent(id, data) for each event; resolves at `finished`. */
async function consume(url: string, token: string, onEvent: (id: number, data: string) => void): Promise<void> {
  const res = await fetch(url, { headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' } });
  if (!res.ok || !res.body) throw new Error(`stream answered ${res.status}`);
  const decoder = new TextDecoder();
  let buf = '';
  for await (const chunk of res.body) {
    buf += decoder.decode(chunk as Uint8Array, { stream: true });
    let cut: number;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      let id = -1;
      let data = '';
      let finished = false;
      for (const line of block.split('\n')) {
        if (line.startsWith('id: ')) id = Number(line.slice(4));
        else if (line.startsWith('data: ')) data = line.slice(6);
        else if (line === 'event: finished') finished = true;
      }
      if (id >= 0) onEvent(id, data);
      if (finished) return;
    }
  }
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

const bench: Bench = async (log) => {
  const figures: Figure[] = [];
  // 100 readers of one job with one token: past the default stream caps (docs/adr/0040-bounded-connections.md),
  // which are raised here so that the figure is the stream's fan-out.
  const t = await startTestApp({ env: { LOG_LEVEL: 'warn', STREAMS_PER_PRINCIPAL: '100', STREAMS_TOTAL: '100' } });
  try {
    const base = await t.app.listen({ host: '127.0.0.1', port: 0 });
    const token = await t.token('viewer');
    const db = t.db.database.db;

    // 1. Latency: 2,000 lines at about 200 a second, each stamped when the backend has it.
    {
      const jobId = await createJob(db, { kind: 'restart', params: {}, actor: { id: 'bench' } });
      await t.wired.events.open(jobId);
      const latencies: number[] = [];
      const reader = consume(`${base}/api/deployment/jobs/${jobId}/logs`, token, (_id, data) => {
        const t0 = (JSON.parse(data) as { t0?: number }).t0;
        if (t0) latencies.push(now() - t0);
      });
      await new Promise((r) => setTimeout(r, 200));
      for (let i = 0; i < 2_000; i++) {
        void t.wired.events.append(jobId, 'output', { stream: 'stdout', line: `line ${i} of a compose run`, t0: now() });
        if (i % 10 === 9) await new Promise((r) => setTimeout(r, 50));
      }
      await t.wired.events.append(jobId, 'finished', { outcome: 'completed' });
      await reader;
      latencies.sort((a, b) => a - b);
      log(`latency over ${latencies.length} lines`);
      figures.push({ name: 'event latency p50', value: pct(latencies, 50), unit: 'ms' });
      figures.push({ name: 'event latency p99', value: pct(latencies, 99), unit: 'ms', goal: '<= 50 ms' });
    }

    // 2. Replay of 100,000 events straight from the database (a log with nothing in memory).
    {
      const jobId = await createJob(db, { kind: 'pull', params: {}, actor: { id: 'bench' } });
      const N = 100_000;
      for (let start = 1; start <= N; start += 5_000) {
        const rows = [];
        for (let seq = start; seq < start + 5_000 && seq <= N; seq++) {
          rows.push({ job_id: jobId, seq, type: seq === N ? 'finished' : 'output', payload: JSON.stringify({ stream: 'stdout', line: `layer ${seq} Downloading [=====>   ] 1.2MB/3.4MB` }) });
        }
        await db.insertInto('deployment_job_events').values(rows).execute();
      }
      // The rows went straight into the table, never through the event log, so nothing of this
      // job is in memory: the stream pages it from the database.
      if (t.wired.events.inMemory(jobId)) throw new Error('expected a cold replay');
      let count = 0;
      let last = 0;
      let ordered = true;
      const t0 = now();
      await consume(`${base}/api/deployment/jobs/${jobId}/logs`, token, (id) => {
        if (id !== last + 1) ordered = false;
        last = id;
        count++;
      });
      const ms = now() - t0;
      log(`replayed ${count} events, in order: ${ordered}`);
      if (count !== N || !ordered) throw new Error(`replay delivered ${count} of ${N} events (ordered: ${ordered})`);
      figures.push({ name: 'replay of 100,000 events from the database', value: ms, unit: 'ms', goal: '<= 2000 ms' });
    }

    // 3. 100 concurrent clients on one job while it writes 2,000 events.
    {
      const jobId = await createJob(db, { kind: 'deploy', params: {}, actor: { id: 'bench' } });
      await t.wired.events.open(jobId);
      const clients = 100;
      const seen: number[][] = Array.from({ length: clients }, () => []);
      const readers = seen.map((list) => consume(`${base}/api/deployment/jobs/${jobId}/logs`, token, (id) => list.push(id)));
      await new Promise((r) => setTimeout(r, 500));
      const t0 = now();
      const total = 2_000;
      for (let i = 1; i < total; i++) {
        void t.wired.events.append(jobId, 'output', { stream: 'stdout', line: `line ${i}` });
        if (i % 100 === 0) await new Promise((r) => setTimeout(r, 5));
      }
      await t.wired.events.append(jobId, 'finished', { outcome: 'completed' });
      await Promise.all(readers);
      const ms = now() - t0;
      let lost = 0;
      let duplicated = 0;
      for (const list of seen) {
        const uniq = new Set(list);
        duplicated += list.length - uniq.size;
        for (let s = 1; s <= total; s++) if (!uniq.has(s)) lost++;
      }
      figures.push({ name: `100 clients x ${total} events: lost`, value: lost, unit: 'events', goal: '0' });
      figures.push({ name: `100 clients x ${total} events: duplicated`, value: duplicated, unit: 'events', goal: '0' });
      figures.push({ name: '100 clients: time to deliver everything to everyone', value: ms, unit: 'ms' });
    }
  } finally {
    await t.app.close();
    await t.close().catch(() => {});
  }
  return figures;
};

export default bench;

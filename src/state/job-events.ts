// Job events: persisted in `deployment_job_events` (by the controllers, one writer per job), kept
// in memory while a job is recent, and announced once durable: with NOTIFY `jobId:seq` in the
// transaction that stores them (so every process hears of them, and never before the rows are
// visible), and to this process's own subscribers directly. Readers (the API's streams) read rows
// after their cursor when woken: a notification carries no event, so none can be lost or repeated.
import { sql, type Kysely, type Transaction } from 'kysely';
import type { DB } from '../db/schema.ts';
import { isDatabaseUnavailable } from '../errors.ts';

/** The channel a batch of stored events is announced on; the payload is `jobId:seq` (the highest seq stored) for each job in it, space-separated. */
export const JOB_EVENTS_CHANNEL = 'job_events';

export interface JobEventRecord {
  jobId: string;
  seq: number;
  type: string;
  payload: Record<string, unknown>;
  at: Date;
}

/** Told the highest seq now stored for the job; the listener reads the rows itself. */
export type JobEventListener = (seq: number) => void;

interface Pending {
  record: JobEventRecord;
  resolve: (r: JobEventRecord) => void;
  reject: (e: unknown) => void;
}

interface JobMemory {
  nextSeq: number;
  /** Newest events, ascending by seq; at most `memoryEventsPerJob` of them. */
  recent: JobEventRecord[];
  finishedAt: number | null;
}

export interface JobEventLogOptions {
  /** Replaces secrets in every string of a payload. */
  scrub?: (s: string) => string;
  memoryRetentionMs: number;
  memoryEventsPerJob?: number;
  /** How long a batch is tried again while the database cannot be reached (default 60 s). */
  storeRetryMs?: number;
  now?: () => number;
}

const PAGE = 5_000;

function scrubPayload(payload: Record<string, unknown>, scrub: (s: string) => string): Record<string, unknown> {
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') return scrub(v);
    if (Array.isArray(v)) return v.map(walk);
    if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
    return v;
  };
  return walk(payload) as Record<string, unknown>;
}

export class JobEventLog {
  private readonly jobs = new Map<string, JobMemory>();
  private readonly listeners = new Map<string, Set<JobEventListener>>();
  private queue: Pending[] = [];
  private flushing: Promise<void> | null = null;
  private readonly scrub: (s: string) => string;
  private readonly memoryEventsPerJob: number;
  private readonly now: () => number;

  constructor(
    private readonly db: Kysely<DB>,
    private readonly opts: JobEventLogOptions,
  ) {
    this.scrub = opts.scrub ?? ((s) => s);
    this.memoryEventsPerJob = opts.memoryEventsPerJob ?? 10_000;
    this.now = opts.now ?? Date.now;
  }

  private async memory(jobId: string): Promise<JobMemory> {
    const known = this.jobs.get(jobId);
    if (known && !Number.isNaN(known.nextSeq)) return known;
    const row = await this.db
      .selectFrom('deployment_job_events')
      .select((eb) => eb.fn.max('seq').as('max'))
      .where('job_id', '=', jobId)
      .executeTakeFirst();
    // Another append may have created it while we read.
    let m = this.jobs.get(jobId);
    if (!m) {
      m = { nextSeq: Number.NaN, recent: [], finishedAt: null };
      this.jobs.set(jobId, m);
    }
    if (Number.isNaN(m.nextSeq)) m.nextSeq = Number(row?.max ?? 0) + 1;
    return m;
  }

  /** Prepares a job for appends (its next seq), so that appends made in a row keep their order. */
  async open(jobId: string): Promise<void> {
    await this.memory(jobId);
  }

  /**
   * Appends an event with the job's next seq. One writer per job (the controller that claimed it).
   * Resolves once the event is stored; concurrent appends are written together in one statement.
   */
  async append(jobId: string, type: string, payload: Record<string, unknown> = {}): Promise<JobEventRecord> {
    const m = await this.memory(jobId);
    const record: JobEventRecord = { jobId, seq: m.nextSeq++, type, payload: scrubPayload(payload, this.scrub), at: new Date(this.now()) };
    const done = new Promise<JobEventRecord>((resolve, reject) => this.queue.push({ record, resolve, reject }));
    this.flushing ??= this.flush();
    return done;
  }

  private async flush(): Promise<void> {
    try {
      while (this.queue.length) {
        const batch = this.queue;
        this.queue = [];
        const newest = new Map<string, number>();
        for (const { record: r } of batch) newest.set(r.jobId, Math.max(newest.get(r.jobId) ?? 0, r.seq));
        try {
          await this.store(batch.map((p) => p.record), newest);
        } catch (err) {
          for (const p of batch) p.reject(err);
          continue;
        }
        for (const p of batch) {
          this.remember(p.record);
          p.resolve(p.record);
        }
        for (const [jobId, seq] of newest) this.announce(jobId, seq);
      }
    } finally {
      this.flushing = null;
    }
  }

  /**
   * Writes a batch in one statement (one round trip): the insert, and the notice Postgres delivers
   * at its commit, so a process that hears it finds the rows. While the database cannot be reached
   * (a restart) the batch is tried again, for up to `storeRetryMs`: its seqs are taken, and a batch
   * dropped would leave a hole in the job's output. A retry after a commit whose answer was lost
   * finds its rows there and writes nothing twice.
   */
  private async store(records: JobEventRecord[], newest: Map<string, number>): Promise<void> {
    const notice = [...newest].map(([jobId, seq]) => `${jobId}:${seq}`).join(' ');
    const until = Date.now() + (this.opts.storeRetryMs ?? 60_000);
    for (let delay = 100; ; delay = Math.min(delay * 2, 5_000)) {
      try {
        await this.db
          .with('stored', (q) =>
            q
              .insertInto('deployment_job_events')
              .values(records.map((r) => ({ job_id: r.jobId, seq: r.seq, type: r.type, payload: JSON.stringify(r.payload), at: r.at })))
              .onConflict((oc) => oc.columns(['job_id', 'seq']).doNothing())
              .returning('seq'),
          )
          .selectNoFrom(sql<string>`pg_notify(${JOB_EVENTS_CHANNEL}, ${notice})`.as('notified'))
          .execute();
        return;
      } catch (err) {
        if (!isDatabaseUnavailable(err) || Date.now() + delay > until) throw err;
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  private remember(r: JobEventRecord): void {
    const m = this.jobs.get(r.jobId);
    if (!m) return;
    m.recent.push(r);
    if (m.recent.length > this.memoryEventsPerJob) m.recent.splice(0, m.recent.length - this.memoryEventsPerJob);
    if (r.type === 'finished') m.finishedAt = this.now();
  }

  private announce(jobId: string, seq: number): void {
    for (const l of this.listeners.get(jobId) ?? []) l(seq);
  }

  /**
   * Hears of events that other processes store (NOTIFY on JOB_EVENTS_CHANNEL): what an API process
   * does so that its streams follow jobs the controllers run elsewhere. Returns the stop function.
   */
  async follow(listen: (channel: string, onNotify: (payload: string) => void) => Promise<() => Promise<void>>): Promise<() => Promise<void>> {
    return listen(JOB_EVENTS_CHANNEL, (payload) => {
      // Empty: the LISTEN connection came back and notices sent meanwhile are lost. Every stream
      // of this process re-reads after its cursor now, rather than at its next poll.
      if (payload === '') {
        for (const jobId of [...this.listeners.keys()]) this.announce(jobId, Number.POSITIVE_INFINITY);
        return;
      }
      for (const part of payload.split(' ')) {
        const m = /^(.+):(\d+)$/.exec(part);
        if (m) this.announce(m[1]!, Number(m[2]));
      }
    });
  }

  /** Told of each batch of the job's events once stored, here or in another process. Returns the unsubscribe function. */
  subscribe(jobId: string, listener: JobEventListener): () => void {
    let set = this.listeners.get(jobId);
    if (!set) {
      set = new Set();
      this.listeners.set(jobId, set);
    }
    set.add(listener);
    const mine = set;
    return () => {
      mine.delete(listener);
      if (mine.size === 0 && this.listeners.get(jobId) === mine) this.listeners.delete(jobId);
    };
  }

  /**
   * Stored events with seq > afterSeq, ascending, at most `limit`. Served from memory when the
   * recent tail covers the request, otherwise from the database.
   */
  async read(jobId: string, afterSeq: number, limit = PAGE): Promise<JobEventRecord[]> {
    const m = this.jobs.get(jobId);
    if (m && m.recent.length && m.recent[0]!.seq <= afterSeq + 1) {
      // Ascending and contiguous: the first event after `afterSeq` is found by arithmetic.
      // (A batch whose insert failed leaves a gap: then the events are searched for.)
      const from = afterSeq + 1 - m.recent[0]!.seq;
      if (m.recent.at(-1)!.seq <= afterSeq) return [];
      if (m.recent[from]?.seq === afterSeq + 1) return m.recent.slice(from, from + limit);
      return m.recent.filter((e) => e.seq > afterSeq).slice(0, limit);
    }
    // Bounded by seq as well as limited: a job's seqs are contiguous, so the page is one range of the
    // primary key. Limited alone, the planner (expecting a few hundred events a job) reads all of a
    // long job's remaining events and sorts them, for every page of a replay. A range that came
    // short holds a gap (a batch whose insert failed) or the end: the rest is read past it.
    const page = (from: number, to: number | null, n: number) => {
      let q = this.db.selectFrom('deployment_job_events').select(['job_id', 'seq', 'type', 'payload', 'at']).where('job_id', '=', jobId).where('seq', '>', from);
      if (to !== null) q = q.where('seq', '<=', to);
      return q.orderBy('seq').limit(n).execute();
    };
    const rows = await page(afterSeq, afterSeq + limit, limit);
    if (rows.length < limit) rows.push(...(await page(afterSeq + limit, null, limit - rows.length)));
    return rows.map((r) => ({ jobId: r.job_id, seq: r.seq, type: r.type, payload: r.payload, at: new Date(r.at) }));
  }

  /** Drops in-memory events of jobs that ended longer ago than the retention; returns how many. */
  sweep(): number {
    let dropped = 0;
    const cutoff = this.now() - this.opts.memoryRetentionMs;
    for (const [id, m] of this.jobs) {
      if (m.finishedAt !== null && m.finishedAt <= cutoff && !this.listeners.has(id)) {
        this.jobs.delete(id);
        dropped++;
      }
    }
    return dropped;
  }

  inMemory(jobId: string): boolean {
    return (this.jobs.get(jobId)?.recent.length ?? 0) > 0;
  }

}

/** An event to store, before it has a seq. */
export interface NewJobEvent {
  type: string;
  payload: Record<string, unknown>;
}

/**
 * Appends events to a job straight in the database, in one transaction (with the caller's, when
 * given one): all of them or none, numbered after the highest seq stored, announced at commit. For
 * jobs whose writers change process (a self-update's transcript is begun by the backend that is
 * replaced and ended by the one that replaced it): such a job is never written through a JobEventLog,
 * so no process holds a sequence of it in memory. Returns the seq of the last event stored.
 */
export async function appendJobEvents(db: Kysely<DB> | Transaction<DB>, jobId: string, events: readonly NewJobEvent[], scrub: (s: string) => string = (s) => s): Promise<number> {
  if (!events.length) return 0;
  const write = async (tx: Transaction<DB>) => {
    // Two writers of one job (a reconciliation in the old backend and one in the new) take turns.
    await sql`select pg_advisory_xact_lock(hashtext(${`job-events:${jobId}`}))`.execute(tx);
    const row = await tx.selectFrom('deployment_job_events').select((eb) => eb.fn.max('seq').as('max')).where('job_id', '=', jobId).executeTakeFirst();
    const first = Number(row?.max ?? 0) + 1;
    const at = new Date();
    for (let i = 0; i < events.length; i += PAGE) {
      await tx
        .insertInto('deployment_job_events')
        .values(events.slice(i, i + PAGE).map((e, j) => ({ job_id: jobId, seq: first + i + j, type: e.type, payload: JSON.stringify(scrubPayload(e.payload, scrub)), at })))
        .execute();
    }
    const last = first + events.length - 1;
    await sql`select pg_notify(${JOB_EVENTS_CHANNEL}, ${`${jobId}:${last}`})`.execute(tx);
    return last;
  };
  return db.isTransaction ? write(db as Transaction<DB>) : (db as Kysely<DB>).transaction().execute(write);
}

/** Whether the job has an event of this type and, when given, with this payload field value. */
export async function hasJobEvent(db: Kysely<DB> | Transaction<DB>, jobId: string, type: string, field?: { key: string; value: string }): Promise<boolean> {
  let q = db.selectFrom('deployment_job_events').select('seq').where('job_id', '=', jobId).where('type', '=', type);
  if (field) q = q.where(sql<string>`payload->>${field.key}`, '=', field.value);
  return (await q.limit(1).executeTakeFirst()) !== undefined;
}

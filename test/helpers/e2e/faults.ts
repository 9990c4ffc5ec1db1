// Dependency-fault helpers: a Postgres container of the test's own (stopped, killed and started
// again without touching the machine's Postgres), a steady request load that records every answer,
// and timed HTTP calls. Everything is real; a component that cannot start fails the test.
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { docker, freePort, run, uniqueName } from './rig.ts';

export const PG_IMAGE = 'installer-rig/postgres:15';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface DedicatedPostgres {
  name: string;
  port: number;
  /** The URL without the password (the backend gets it as DATABASE_PASSWORD). */
  url: string;
  password: string;
  /** Waits until a query succeeds; returns how long that took. */
  ready(timeoutMs?: number): Promise<number>;
  query<T extends pg.QueryResultRow>(text: string): Promise<T[]>;
  stop(): Promise<void>;
  kill(): Promise<void>;
  pause(): Promise<void>;
  unpause(): Promise<void>;
  start(): Promise<void>;
  remove(): Promise<void>;
}

/** A Postgres 15 container on a free 127.0.0.1 port, password-protected, under a unique name. */
export async function startDedicatedPostgres(): Promise<DedicatedPostgres> {
  const name = uniqueName('installer-faults-pg');
  const port = await freePort();
  const password = randomBytes(18).toString('base64url');
  // The rig's engine runs with --bridge=none: a published port needs a user-defined network.
  await docker(['network', 'create', name], { timeoutMs: 60_000 });
  try {
    await docker(['run', '-d', '--name', name, '--network', name, '-p', `127.0.0.1:${port}:5432`, '-e', `POSTGRES_PASSWORD=${password}`, '-e', 'POSTGRES_DB=installer', '--stop-timeout', '10', PG_IMAGE], {
      timeoutMs: 60_000,
    });
  } catch (err) {
    await run('docker', ['rm', '-f', '-v', name]);
    await run('docker', ['network', 'rm', name]);
    throw err;
  }
  const url = `postgres://postgres@127.0.0.1:${port}/installer`;
  const query = async <T extends pg.QueryResultRow>(text: string): Promise<T[]> => {
    // pg lets the connection string's fields win over a separate password.
    const c = new pg.Client({ connectionString: url.replace('postgres@', `postgres:${encodeURIComponent(password)}@`), connectionTimeoutMillis: 2_000 });
    c.on('error', () => {});
    try {
      await c.connect();
      return (await c.query<T>(text)).rows;
    } finally {
      await c.end().catch(() => {});
    }
  };
  const p: DedicatedPostgres = {
    name,
    port,
    url,
    password,
    query,
    async ready(timeoutMs = 60_000) {
      const started = Date.now();
      let last: unknown;
      while (Date.now() - started < timeoutMs) {
        try {
          await query('select 1');
          return Date.now() - started;
        } catch (err) {
          last = err;
          await sleep(100);
        }
      }
      const logs = await run('docker', ['logs', '--tail', '40', name]);
      throw new Error(`the dedicated Postgres ${name} did not answer within ${timeoutMs} ms: ${(last as Error)?.message}\n${logs.stdout}\n${logs.stderr}`);
    },
    stop: async () => void (await docker(['stop', name], { timeoutMs: 60_000 })),
    kill: async () => void (await docker(['kill', name], { timeoutMs: 60_000 })),
    pause: async () => void (await docker(['pause', name], { timeoutMs: 60_000 })),
    unpause: async () => void (await docker(['unpause', name], { timeoutMs: 60_000 })),
    start: async () => void (await docker(['start', name], { timeoutMs: 60_000 })),
    async remove() {
      await run('docker', ['rm', '-f', '-v', name], { timeoutMs: 60_000 });
      await run('docker', ['network', 'rm', name], { timeoutMs: 60_000 });
    },
  };
  try {
    await p.ready();
  } catch (err) {
    await p.remove();
    throw err;
  }
  return p;
}

export interface Answer {
  path: string;
  /** Milliseconds since the load started, when the request was sent. */
  at: number;
  ms: number;
  /** 0: no HTTP answer at all (connection failure or the client's own timeout). */
  status: number;
  body: unknown;
  error?: string;
}

export interface Load {
  answers: Answer[];
  /** Milliseconds since the load started. */
  now(): number;
  stop(): Promise<void>;
}

/**
 * A steady load: `workers` loops, worker w sending path w mod paths.length again and again with the
 * headers, `pauseMs` apart (so a path whose requests wait never holds up the others). A request
 * gets `clientTimeoutMs` before it counts as hung.
 */
export function startLoad(base: string, paths: string[], headers: Record<string, string>, opts: { workers?: number; pauseMs?: number; clientTimeoutMs?: number } = {}): Load {
  const answers: Answer[] = [];
  const t0 = Date.now();
  let stopped = false;
  const worker = async (w: number) => {
    const path = paths[w % paths.length]!;
    while (!stopped) {
      const at = Date.now() - t0;
      try {
        const res = await fetch(`${base}${path}`, { headers, signal: AbortSignal.timeout(opts.clientTimeoutMs ?? 20_000) });
        const text = await res.text();
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          /* not JSON: kept as text */
        }
        answers.push({ path, at, ms: Date.now() - t0 - at, status: res.status, body });
      } catch (err) {
        answers.push({ path, at, ms: Date.now() - t0 - at, status: 0, body: null, error: (err as Error).message });
      }
      await sleep(opts.pauseMs ?? 25);
    }
  };
  const running = Array.from({ length: opts.workers ?? 8 }, (_, w) => worker(w));
  return {
    answers,
    now: () => Date.now() - t0,
    async stop() {
      stopped = true;
      await Promise.all(running);
    },
  };
}

/** A request and how long it took; the body parsed as JSON when it is JSON. */
export async function timed(url: string, init: RequestInit & { timeoutMs?: number } = {}): Promise<{ status: number; ms: number; body: unknown; text: string; headers: Headers }> {
  const started = Date.now();
  const res = await fetch(url, { ...init, signal: AbortSignal.timeout(init.timeoutMs ?? 30_000) });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* text */
  }
  return { status: res.status, ms: Date.now() - started, body, text, headers: res.headers };
}

export async function login(base: string, username: string, password: string): Promise<string> {
  const r = await timed(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password }) });
  if (r.status !== 200) throw new Error(`login as ${username} failed: ${r.status} ${r.text}`);
  return (r.body as { token: string }).token;
}

/** Polls a job until it has finished; returns it. */
export async function waitJob(base: string, token: string, jobId: string, timeoutMs = 120_000): Promise<{ phase: string; state: string | null; detail: string | null; exitCode: number | null }> {
  const started = Date.now();
  for (;;) {
    const r = await timed(`${base}/api/deployment/jobs/${jobId}`, { headers: { authorization: `Bearer ${token}` } });
    const job = r.body as { phase: string; state: string | null; detail: string | null; exitCode: number | null };
    if (r.status === 200 && (job.phase === 'completed' || job.phase === 'failed')) return job;
    if (Date.now() - started > timeoutMs) throw new Error(`job ${jobId} did not finish within ${timeoutMs} ms: ${r.status} ${r.text}`);
    await sleep(200);
  }
}

export async function requestJob(base: string, token: string, action: string, services?: string[]): Promise<string> {
  const r = await timed(`${base}/api/deployment/jobs`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ action, ...(services ? { services } : {}) }),
  });
  if (r.status !== 202) throw new Error(`POST /api/deployment/jobs ${action} answered ${r.status}: ${r.text}`);
  return (r.body as { jobId: string }).jobId;
}

/** The error shape of docs/adr/0004-error-shape.md for a 503. */
export const UNAVAILABLE_SHAPE = { statusCode: 503, error: 'Service Unavailable', code: 'unavailable' };

export const percentile = (xs: number[], p: number) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};

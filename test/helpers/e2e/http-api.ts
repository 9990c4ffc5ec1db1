// The installer's API over real HTTP, as a test outside the process calls it: timed requests,
// sign-in, jobs requested and waited for, and the error shape of a 503.
import { eventually } from '../shared/eventually.ts';

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
  type Job = { phase: string; state: string | null; detail: string | null; exitCode: number | null };
  return eventually(async () => {
    const r = await timed(`${base}/api/deployment/jobs/${jobId}`, { headers: { authorization: `Bearer ${token}` } });
    const job = r.body as Job;
    if (r.status === 200 && (job.phase === 'completed' || job.phase === 'failed')) return job;
    throw new Error(`not finished: ${r.status} ${r.text}`);
  }, `job ${jobId} to finish`, timeoutMs, 200);
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

// Drives platform jobs through the API as a client would: request, then follow the job stream; and
// reads what a job stored, waiting for an event of it.
import { expect } from 'vitest';
import type { TestApp } from '../api/app.ts';
import { parseSse, type SseMessage } from '../shared/sse.ts';
import type { Kysely } from 'kysely';
import { eventually } from '../shared/eventually.ts';
import type { DB, Role } from '../../../src/db/schema.ts';

export async function requestJob(t: TestApp, action: string, services?: string[], role: Role = 'operator'): Promise<string> {
  const res = await t.app.inject({
    method: 'POST',
    url: '/api/deployment/jobs',
    headers: { authorization: `Bearer ${await t.token(role)}` },
    payload: services ? { action, services } : { action },
  });
  expect(res.statusCode, res.body).toBe(202);
  return (res.json() as { jobId: string }).jobId;
}

/** Follows a job's stream until its `finished` event (the stream ends there). */
export async function followJob(t: TestApp, jobId: string, query = ''): Promise<SseMessage[]> {
  const res = await t.app.inject({
    method: 'GET',
    url: `/api/deployment/jobs/${jobId}/logs${query}`,
    headers: { authorization: `Bearer ${await t.token('viewer')}`, accept: 'text/event-stream' },
  });
  expect(res.statusCode, res.body).toBe(200);
  return parseSse(res.body);
}

/** Requests a job as the operator and follows its stream to the `finished` event. */
export async function requestJobAndFollow(t: TestApp, action: string, services?: string[]): Promise<{ jobId: string; events: SseMessage[]; finished: Record<string, unknown> }> {
  const jobId = await requestJob(t, action, services);
  const events = await followJob(t, jobId);
  const finished = events.at(-1)!;
  expect(finished.event).toBe('finished');
  return { jobId, events, finished: finished.data };
}

export const lines = (events: SseMessage[]) => events.filter((e) => e.event === 'output').map((e) => String(e.data.line));

export interface StoredJobEvent {
  seq: number;
  type: string;
  payload: Record<string, unknown>;
}

/** A job's events as stored, in order. */
export async function storedJobEvents(db: Kysely<DB>, jobId: string): Promise<StoredJobEvent[]> {
  return (await db.selectFrom('deployment_job_events').select(['seq', 'type', 'payload']).where('job_id', '=', jobId).orderBy('seq').execute()) as StoredJobEvent[];
}

/** Waits until one of the job's stored events matches; past the timeout, says which events it has. */
export async function waitForJobEvent(db: Kysely<DB>, jobId: string, pred: (e: StoredJobEvent) => boolean, what: string, timeoutMs = 60_000): Promise<void> {
  await eventually(async () => (await storedJobEvents(db, jobId)).some(pred), `job ${jobId}: ${what}`, timeoutMs, 100).catch(async (err: Error) => {
    throw new Error(`${err.message}; events: ${JSON.stringify(await storedJobEvents(db, jobId))}`);
  });
}

/** A predicate for waitForJobEvent: the job entered `phase`. */
export const phaseEvent = (phase: string) => (e: StoredJobEvent) => e.type === 'phase' && e.payload.phase === phase;

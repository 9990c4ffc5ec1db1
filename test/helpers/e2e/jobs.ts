// Drives platform jobs through the API as a client would: request, then follow the job stream.
import { expect } from 'vitest';
import type { TestApp } from '../api/app.ts';
import { parseSse, type SseMessage } from '../shared/sse.ts';
import type { Role } from '../../../src/db/schema.ts';

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

export async function runJob(t: TestApp, action: string, services?: string[]): Promise<{ jobId: string; events: SseMessage[]; finished: Record<string, unknown> }> {
  const jobId = await requestJob(t, action, services);
  const events = await followJob(t, jobId);
  const finished = events.at(-1)!;
  expect(finished.event).toBe('finished');
  return { jobId, events, finished: finished.data };
}

export const lines = (events: SseMessage[]) => events.filter((e) => e.event === 'output').map((e) => String(e.data.line));

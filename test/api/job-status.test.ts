// A job's status tells the truth (docs/adr/0051-status-that-tells-the-truth.md): its request's
// generation, bumped by a cancel; the generation the jobs controller acted on, catching up once it
// saw the cancel; and its conditions, served by the API. The controllers' steps run here one at a
// time, as their loops would run them, so that each answer in between can be read.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { claimNextJob } from '../../src/state/jobs.ts';
import { putReconciled } from '../../src/state/conditions.ts';
import { CancelJobReconciler } from '../../controllers/cancel-job.ts';
import { recordEnd, RunningJobs } from '../../controllers/runtime/job-run.ts';
import type { RunningChart } from '../../controllers/runtime/run-chart.ts';

let t: TestApp;
beforeAll(async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'job-status-'));
  writeFileSync(path.join(dir, 'docker-compose.yml'), 'services:\n  web:\n    image: installer-rig/busybox:latest\n');
  t = await startTestApp({ env: { PLATFORM_DIR: dir } });
});
afterAll(async () => t?.close());

const as = async (role: 'viewer' | 'operator') => ({ authorization: `Bearer ${await t.token(role)}` });
const db = () => t.db.database.db;
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

async function job(jobId: string): Promise<Record<string, unknown>> {
  const res = await t.app.inject({ method: 'GET', url: `/api/deployment/jobs/${jobId}`, headers: await as('viewer') });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as Record<string, unknown>;
}

async function post(url: string, payload?: object): Promise<string> {
  const res = await t.app.inject({ method: 'POST', url, headers: await as('operator'), ...(payload ? { payload } : {}) });
  expect(res.statusCode, res.body).toBe(202);
  return (res.json() as { jobId: string }).jobId;
}

describe("a job's generation, observed generation and conditions", () => {
  it('a cancel of a queued job bumps its generation; the cancel ends it, and its status catches up and says how it ended', async () => {
    const jobId = await post('/api/deployment/jobs', { action: 'stop' });
    expect(await job(jobId)).toMatchObject({ phase: 'queued', generation: 1, observedGeneration: null, conditions: [] });

    const cancelId = await post(`/api/deployment/jobs/${jobId}/cancel`);
    // Asked for, not yet seen: the status still answers no generation.
    expect(await job(jobId)).toMatchObject({ phase: 'queued', cancelRequestedBy: 'operator', generation: 2, observedGeneration: null });

    // The cancels' loop: claim, then reconcile.
    expect((await claimNextJob(db(), 'test', { only: ['cancel-job'] }))?.jobId).toBe(cancelId);
    await new CancelJobReconciler({ db: db(), events: t.wired.events, hungMinutes: 5 }).reconcile(cancelId);

    const target = await job(jobId);
    expect(target).toMatchObject({ phase: 'failed', generation: 2, observedGeneration: 2 });
    expect(target.conditions).toEqual([
      { type: 'Progressing', status: 'False', reason: 'cancelled', message: 'the job ended failed', observedAt: expect.stringMatching(ISO) },
      { type: 'Succeeded', status: 'False', reason: 'cancelled', message: 'cancelled by operator before it started', observedAt: expect.stringMatching(ISO) },
    ]);
    // The cancel request itself: never changed, acted on at its claim, and it succeeded.
    const cancel = await job(cancelId);
    expect(cancel).toMatchObject({ phase: 'completed', generation: 1, observedGeneration: 1 });
    expect(cancel.conditions).toContainEqual(expect.objectContaining({ type: 'Succeeded', status: 'True', reason: 'completed', message: `cancelled job ${jobId} before it started` }));
    // The list answers the same fields.
    const list = await t.app.inject({ method: 'GET', url: '/api/deployment/jobs', headers: await as('viewer') });
    expect((list.json() as { jobId: string }[]).find((j) => j.jobId === jobId)).toMatchObject({ generation: 2, observedGeneration: 2, conditions: target.conditions });
  });

  it('a running job answers generation 1 from its claim; a cancel is observed once its chart is sent CANCEL', async () => {
    const jobId = await post('/api/deployment/jobs', { action: 'restart' });
    expect((await claimNextJob(db(), 'test', { except: ['cancel-job'] }))?.jobId).toBe(jobId);
    expect(await job(jobId)).toMatchObject({ phase: 'running', generation: 1, observedGeneration: 1 });

    await post(`/api/deployment/jobs/${jobId}/cancel`);
    expect(await job(jobId)).toMatchObject({ generation: 2, observedGeneration: 1 });

    // The jobs loop's wake: the running chart is sent the cancel its row asks for.
    const running = new RunningJobs(db());
    const sent: unknown[] = [];
    running.add(jobId, { send: (e) => void sent.push(e) } satisfies RunningChart);
    await running.watch();
    expect(sent).toEqual([{ type: 'CANCEL', by: 'operator' }]);
    expect(await job(jobId)).toMatchObject({ generation: 2, observedGeneration: 2 });

    // The chart ended cancelled: the end and its conditions are written together.
    await recordEnd({ db: db(), events: t.wired.events }, jobId, { phase: 'failed', state: 'cancelled', detail: 'cancelled by operator', exitCode: null });
    const ended = await job(jobId);
    expect(ended).toMatchObject({ phase: 'failed', generation: 2, observedGeneration: 2 });
    expect(ended.conditions).toEqual([
      expect.objectContaining({ type: 'Progressing', status: 'False', reason: 'cancelled' }),
      expect.objectContaining({ type: 'Succeeded', status: 'False', reason: 'cancelled', message: 'cancelled by operator' }),
    ]);
  });

  it("serves the runtime's Reconciled condition beside the job's own, and a row's conditions written as `at` with observedAt", async () => {
    const jobId = randomUUID();
    const at = '2026-01-02T03:04:05.000Z';
    // As the build before one condition shape wrote them.
    await db().insertInto('deployment_jobs').values({ job_id: jobId, kind: 'pull', params: '{}', actor: 'operator', actor_email: null, cancel_requested_by: null, cancel_requested_at: null }).execute();
    await db()
      .insertInto('deployment_job_status')
      .values({ job_id: jobId, phase: 'running', conditions: JSON.stringify([{ type: 'Progressing', status: 'True', reason: 'Running', message: 'the job chart is running', at }]) })
      .execute();
    await putReconciled(db(), 'deployment_job_status', jobId, { type: 'Reconciled', status: 'False', reason: 'ReconcileError', message: 'jobs (attempt 1): boom', observedAt: at });
    expect((await job(jobId)).conditions).toEqual([
      { type: 'Progressing', status: 'True', reason: 'Running', message: 'the job chart is running', observedAt: at },
      { type: 'Reconciled', status: 'False', reason: 'ReconcileError', message: 'jobs (attempt 1): boom', observedAt: at },
    ]);
    await db().updateTable('deployment_job_status').set({ phase: 'failed' }).where('job_id', '=', jobId).execute();
  });
});

describe("an update's conditions", () => {
  it("the history serves each update's conditions: the runtime's Reconciled once an attempt failed", async () => {
    const quiet = randomUUID();
    const retried = randomUUID();
    for (const id of [quiet, retried]) {
      await db().insertInto('self_update_requests').values({ request_id: id, actor: 'admin', actor_email: null }).execute();
      await db().insertInto('self_update_status').values({ request_id: id, phase: 'completed', conditions: '[]', action_id: '1', target_digest: 'sha256:new', finished_at: new Date() }).execute();
    }
    const recovered = { type: 'Reconciled', status: 'True' as const, reason: 'Recovered', message: 'self-update: reconciled after 1 failed attempt', observedAt: '2026-01-02T03:04:05.000Z' };
    await putReconciled(db(), 'self_update_status', retried, recovered);
    const res = await t.app.inject({ method: 'GET', url: '/api/system/self-update/history', headers: await as('viewer') });
    expect(res.statusCode, res.body).toBe(200);
    const byId = new Map((res.json() as { requestId: string; conditions: unknown[] }[]).map((e) => [e.requestId, e.conditions]));
    expect(byId.get(quiet)).toEqual([]);
    expect(byId.get(retried)).toEqual([recovered]);
  });
});

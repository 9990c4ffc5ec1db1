// The cancel reconciler alone (controllers/cancel-job.ts), on a real database: what a cancel-job
// request ends as for a target still queued, running, already ended or missing, and that a
// reconcile run again (a retry, a requeue) writes its audit row and its `cancelling` phase once.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { CancelJobReconciler } from '../../controllers/cancel-job.ts';
import { requestJobCancel } from '../../src/state/cancel-requests.ts';
import { JobEventLog } from '../../src/state/job-events.ts';
import { claimNextJob, createJob, finishJob, getJob } from '../../src/state/jobs.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';

let t: TestDatabase;
let events: JobEventLog;
let reconciler: CancelJobReconciler;
const admin = { id: 'admin', email: null, kind: 'user' as const };
const operator = { id: 'operator', email: null, kind: 'user' as const };

beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});
beforeEach(async () => {
  const db = t.database.db;
  // One job runs at a time: each test starts from no job at all.
  await db.deleteFrom('deployment_job_events').execute();
  await db.deleteFrom('deployment_actions').execute();
  await db.deleteFrom('notification_outbox').execute();
  await db.deleteFrom('deployment_job_status').execute();
  await db.deleteFrom('deployment_jobs').execute();
  events = new JobEventLog(db, { memoryRetentionMs: 60_000 });
  reconciler = new CancelJobReconciler({ db, events, hungMinutes: 10, pollMs: 5 });
});

/** A target job (claimed, so running, when `running`), and a cancel request for it as its claim loop hands it over: running. */
async function cancelOf(opts: { running: boolean }): Promise<{ targetId: string; requestId: string }> {
  const db = t.database.db;
  const targetId = await createJob(db, { kind: 'restart', params: {}, actor: operator });
  if (opts.running) expect((await claimNextJob(db, 'test', { except: ['cancel-job'] }))?.jobId).toBe(targetId);
  const requestId = await requestJobCancel(db, targetId, admin);
  expect((await claimNextJob(db, 'test', { only: ['cancel-job'] }))?.jobId).toBe(requestId);
  return { targetId, requestId };
}

async function audit(jobId: string) {
  return t.database.db.selectFrom('deployment_actions').select(['kind', 'status', 'actor', 'detail']).where('job_id', '=', jobId).execute();
}

async function phases(jobId: string): Promise<unknown[]> {
  return (await events.read(jobId, 0)).filter((e) => e.type === 'phase').map((e) => e.payload);
}

describe('cancel reconciler', () => {
  it('drops a target still queued: the target ends failed `cancelled`, the request completed', async () => {
    const { targetId, requestId } = await cancelOf({ running: false });
    expect(await reconciler.reconcile(requestId)).toEqual({ outcome: 'done' });
    expect(await getJob(t.database.db, targetId)).toMatchObject({ phase: 'failed', detail: 'cancelled by admin before it started' });
    expect(await getJob(t.database.db, requestId)).toMatchObject({ phase: 'completed', detail: `cancelled job ${targetId} before it started` });
    expect(await audit(requestId)).toEqual([{ kind: 'cancel-job', status: 'completed', actor: 'admin', detail: `cancelled job ${targetId} before it started` }]);
    expect(await phases(requestId)).toEqual([{ phase: 'cancelling', targetJobId: targetId }]);
    expect((await events.read(requestId, 0)).at(-1)).toMatchObject({ type: 'finished', payload: { outcome: 'completed' } });
  });

  it('looks again while a running target has not ended, moving its own deadline, then completes once the target ends', async () => {
    const { targetId, requestId } = await cancelOf({ running: true });
    const before = Date.now();
    const first = await reconciler.reconcile(requestId);
    expect(first).toMatchObject({ outcome: 'requeue', afterMs: 5 });
    const waiting = await getJob(t.database.db, requestId);
    expect(waiting?.phase).toBe('running');
    expect(waiting?.hungDeadline?.getTime()).toBeGreaterThanOrEqual(before + 10 * 60_000 - 1_000);
    // Looked at again: still running, still waiting; the audit row and the phase are not written twice.
    expect(await reconciler.reconcile(requestId)).toMatchObject({ outcome: 'requeue' });
    expect(await audit(requestId)).toEqual([{ kind: 'cancel-job', status: 'started', actor: 'admin', detail: `cancel job ${targetId}` }]);
    expect(await phases(requestId)).toHaveLength(1);
    // The target's chart saw the cancel and ended: whatever its end says, it is this cancel's doing.
    await finishJob(t.database.db, targetId, { phase: 'failed', detail: 'the job ended', exitCode: null });
    expect(await reconciler.reconcile(requestId)).toEqual({ outcome: 'done' });
    expect(await getJob(t.database.db, requestId)).toMatchObject({ phase: 'completed', detail: `cancelled job ${targetId}` });
    expect(await audit(requestId)).toEqual([{ kind: 'cancel-job', status: 'completed', actor: 'admin', detail: `cancelled job ${targetId}` }]);
  });

  it('a target found ended by a cancel before this reconciler looked (its detail says who) counts as cancelled', async () => {
    const { targetId, requestId } = await cancelOf({ running: true });
    await finishJob(t.database.db, targetId, { phase: 'failed', detail: 'cancelled by admin', exitCode: null });
    expect(await reconciler.reconcile(requestId)).toEqual({ outcome: 'done' });
    expect(await getJob(t.database.db, requestId)).toMatchObject({ phase: 'completed', detail: `cancelled job ${targetId}` });
  });

  it('says when the target had already ended of its own, and fails', async () => {
    const { targetId, requestId } = await cancelOf({ running: true });
    await finishJob(t.database.db, targetId, { phase: 'completed', detail: 'done', exitCode: 0 });
    expect(await reconciler.reconcile(requestId)).toEqual({ outcome: 'done' });
    expect(await getJob(t.database.db, requestId)).toMatchObject({ phase: 'failed', detail: `job ${targetId} had already ended (completed)` });
    expect(await audit(requestId)).toEqual([{ kind: 'cancel-job', status: 'failed', actor: 'admin', detail: `job ${targetId} had already ended (completed)` }]);
  });

  it('fails a request whose target does not exist', async () => {
    const db = t.database.db;
    const missing = randomUUID();
    const requestId = await createJob(db, { kind: 'cancel-job', params: { targetJobId: missing }, actor: admin });
    await claimNextJob(db, 'test', { only: ['cancel-job'] });
    expect(await reconciler.reconcile(requestId)).toEqual({ outcome: 'done' });
    expect(await getJob(db, requestId)).toMatchObject({ phase: 'failed', detail: `no job ${missing}` });
  });

  it('lets a request go that is not running (still queued, or ended), touching nothing', async () => {
    const db = t.database.db;
    const targetId = await createJob(db, { kind: 'restart', params: {}, actor: operator });
    const requestId = await requestJobCancel(db, targetId, admin);
    expect(await reconciler.reconcile(requestId)).toEqual({ outcome: 'done' });
    expect(await getJob(db, requestId)).toMatchObject({ phase: 'queued' });
    expect(await getJob(db, targetId)).toMatchObject({ phase: 'queued' });
    expect(await audit(requestId)).toEqual([]);
    expect(await reconciler.reconcile(randomUUID())).toEqual({ outcome: 'done' });
  });
});

// A reconcile that throws, on the real engine and the real Postgres (docs/adr/0042-reconcile-contract.md):
// a throw injected at each step of a compose job's run (a statement the real database is never
// sent) is recorded on the row and retried, and the job ends as it would have, each write made
// once; a throw that does not go away ends the row failed, with the error as its detail and exit
// code null, and then nothing refuses a self-update; the watchdog ends a row past its hung
// deadline; a cancel survives a throw too, writing its audit row and phase event once.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { startPlatform, type PlatformProject } from '../helpers/e2e/rig.ts';
import { followJob, requestJob } from '../helpers/e2e/jobs.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { StatementFaults, type Fault } from '../helpers/shared/statement-faults.ts';
import { createJob, finishJob, getJob } from '../../src/state/jobs.ts';
import { conflictOf } from '../../src/state/exclusion.ts';
import { hungMessage } from '../../machines/job.machine.ts';

let p: PlatformProject;
let t: TestApp;
const faults = new StatementFaults();

beforeAll(async () => {
  p = await startPlatform();
  t = await startTestApp({
    controllers: true,
    env: { PLATFORM_DIR: p.dir, PLATFORM_PROJECT: p.project },
    reconcile: { backoff: { baseMs: 50, maxMs: 200, attempts: 4 }, watchdogMs: 200, db: (db) => faults.wrap(db) },
  });
});
afterAll(async () => {
  faults.disarmAll();
  await t?.close();
  await p?.remove();
});
beforeEach(() => faults.disarmAll());

const db = () => t.db.database.db;

async function ended(jobId: string) {
  return eventually(async () => {
    const j = await getJob(db(), jobId);
    return j && (j.phase === 'completed' || j.phase === 'failed') ? j : null;
  }, `job ${jobId} to end`, 30_000);
}

async function written(jobId: string) {
  const audit = await db().selectFrom('deployment_actions').selectAll().where('job_id', '=', jobId).execute();
  const events = await db().selectFrom('deployment_job_events').select(['type', 'payload']).where('job_id', '=', jobId).orderBy('seq').execute();
  const phases = (name: string) => events.filter((e) => e.type === 'phase' && (e.payload as { phase?: string }).phase === name).length;
  return { audit, started: phases('started'), finished: events.filter((e) => e.type === 'finished'), phases };
}

/** A job claimed by another process (gone, or on another host), with the given deadline: nothing here runs its chart. */
async function runningElsewhere(hungDeadline: Date): Promise<string> {
  // One transaction: the claim notification reaches no queue before the row says running.
  return db().transaction().execute(async (tx) => {
    const jobId = await createJob(tx, { kind: 'restart', params: { services: ['worker'] }, actor: { id: 'operator', email: null, kind: 'user' } });
    await tx.updateTable('deployment_job_status').set({ phase: 'running', claimed_by: 'elsewhere:1', started_at: new Date(), hung_deadline: hungDeadline }).where('job_id', '=', jobId).execute();
    return jobId;
  });
}

const has = (...words: string[]) => (json: string) => words.every((w) => json.includes(w));

// Each step of the run a compose job goes through outside its chart, and a statement it makes there.
const STEPS: [string, Fault][] = [
  ['opening its event stream', { kind: 'select', table: 'deployment_job_events', where: has('"max"') }],
  ['writing its audit row', { kind: 'insert', table: 'deployment_actions' }],
  ['writing its started event', { kind: 'insert', table: 'deployment_job_events' }],
  ['writing its running condition', { kind: 'update', table: 'deployment_job_status', where: has('"conditions"', 'Running') }],
  ['writing its status row at the end', { kind: 'update', table: 'deployment_job_status', where: has('"finished_at"') }],
  ['finishing its audit row', { kind: 'update', table: 'deployment_actions' }],
  ['writing its finished event', { kind: 'insert', table: 'deployment_job_events', where: has('finished') }],
];

describe('a compose job whose run throws', () => {
  it.each(STEPS)('recovers from a throw while %s: the job completes, each write made once, the row says it recovered', async (_step, fault) => {
    const armed = faults.arm(fault);
    const jobId = await requestJob(t, 'restart', ['worker']);
    const job = await ended(jobId);
    expect(job).toMatchObject({ phase: 'completed', exitCode: 0, detail: null });
    // The status row ends first: the audit row and the finished event (and their throws) come after
    // it, and the recovered condition once the reconcile that succeeded has returned. Waited for
    // before the next case arms its fault, so that no write of this job meets that one.
    await eventually(async () => ((await getJob(db(), jobId))?.conditions.find((c) => c.type === 'Reconciled')?.reason === 'Recovered' ? true : null), 'the recovered condition', 30_000);
    const w = await eventually(async () => {
      const x = await written(jobId);
      return x.finished.length ? x : null;
    }, 'the finished event');
    expect(armed.fired).toBe(1);
    expect(w.audit).toHaveLength(1);
    expect(w.audit[0]).toMatchObject({ status: 'completed', exit_code: 0 });
    expect([w.started, w.finished.length]).toEqual([1, 1]);
    expect(w.finished[0]!.payload).toMatchObject({ outcome: 'completed' });
    // The stream a client follows ends as for any job.
    expect((await followJob(t, jobId)).at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'completed' } });
  });

  it('ends failed when the throw does not go away: the error its detail, exit code null, the end recorded, and a self-update is not refused', async () => {
    faults.arm({ kind: 'insert', table: 'deployment_actions', times: 1_000 });
    const jobId = await requestJob(t, 'restart', ['worker']);
    const job = await ended(jobId);
    faults.disarmAll();
    expect(job.phase).toBe('failed');
    expect(job.exitCode).toBeNull();
    expect(job.detail).toContain('injected fault: insert on deployment_actions');
    expect(job.conditions.find((c) => c.type === 'Reconciled')).toMatchObject({ status: 'False', reason: 'ReconcileError', message: expect.stringContaining('attempt 4') });
    const w = await eventually(async () => {
      const x = await written(jobId);
      return x.finished.length ? x : null;
    }, 'the finished event');
    expect(w.finished).toHaveLength(1);
    expect(w.finished[0]!.payload).toMatchObject({ outcome: 'failed', exitCode: null, detail: job.detail });
    expect(await conflictOf(db(), { kind: 'update' })).toBeNull();
    // The next job runs: the failed one does not hold the queue.
    const next = await requestJob(t, 'restart', ['worker']);
    expect((await ended(next)).phase).toBe('completed');
  });
});

describe('the watchdog', () => {
  it('ends a job past its hung deadline that nothing here runs, with the spec message, and then nothing refuses a self-update', async () => {
    // A job claimed by a process that is gone (another host's backend, say), its deadline passed.
    const jobId = await requestJob(t, 'restart', ['worker']);
    await ended(jobId);
    const stuck = await runningElsewhere(new Date(Date.now() - 60_000));
    expect(await conflictOf(db(), { kind: 'update' })).toContain(stuck);
    const job = await ended(stuck);
    expect(job).toMatchObject({ phase: 'failed', detail: hungMessage(t.settings.HUNG_JOB_MINUTES), exitCode: null });
    const w = await eventually(async () => {
      const x = await written(stuck);
      return x.finished.length ? x : null;
    }, 'the finished event');
    expect(w.finished[0]!.payload).toMatchObject({ outcome: 'failed', state: 'hung' });
    expect(await conflictOf(db(), { kind: 'update' })).toBeNull();
  });

  it('ends a job whose reconcile waits for a retry once its deadline has passed', async () => {
    // Throws forever at its running condition; its deadline is moved into the past meanwhile.
    faults.arm({ kind: 'update', table: 'deployment_job_status', where: has('"conditions"', 'Running'), times: 1_000 });
    const jobId = await requestJob(t, 'restart', ['worker']);
    await eventually(async () => ((await getJob(db(), jobId))?.conditions.some((c) => c.type === 'Reconciled') ? true : null), 'a first failed attempt');
    await db().updateTable('deployment_job_status').set({ hung_deadline: new Date(Date.now() - 1_000) }).where('job_id', '=', jobId).execute();
    const job = await ended(jobId);
    faults.disarmAll();
    expect(job.phase).toBe('failed');
    expect(job.exitCode).toBeNull();
    // Whichever came first (the watchdog or the last retry), the row ended and its end is recorded once.
    const w = await eventually(async () => {
      const x = await written(jobId);
      return x.finished.length ? x : null;
    }, 'the finished event');
    expect(w.finished).toHaveLength(1);
    expect(w.audit.every((a) => a.status === 'failed')).toBe(true);
  });
});

describe('a cancel whose reconcile throws', () => {
  it('looks again while its target runs, writes its audit row and cancelling event once across looks and a retry, and ends with the target', async () => {
    // A target running elsewhere (no chart here would end it): the cancel waits for its row to end.
    const target = await runningElsewhere(new Date(Date.now() + 3_600_000));
    const armed = faults.arm({ kind: 'insert', table: 'deployment_job_events', where: has('cancelling') });
    const res = await t.app.inject({ method: 'POST', url: `/api/deployment/jobs/${target}/cancel`, headers: { authorization: `Bearer ${await t.token('operator')}` } });
    expect(res.statusCode, res.body).toBe(202);
    const cancelId = (res.json() as { jobId: string }).jobId;
    // Each look moves the request's deadline: it looks again (requeue-after), it does not give up.
    const deadlines = new Set<number>();
    await eventually(async () => {
      const d = (await getJob(db(), cancelId))?.hungDeadline?.getTime();
      if (d) deadlines.add(d);
      return deadlines.size >= 3;
    }, 'three looks at the running target');
    expect((await getJob(db(), cancelId))?.phase).toBe('running');
    // The target's chart ends it cancelled, as it would on CANCEL.
    await finishJob(db(), target, { phase: 'failed', detail: 'cancelled by operator', exitCode: null });
    const cancel = await ended(cancelId);
    expect(armed.fired).toBe(1);
    expect(cancel).toMatchObject({ phase: 'completed', detail: `cancelled job ${target}` });
    const w = await eventually(async () => {
      const x = await written(cancelId);
      return x.finished.length ? x : null;
    }, 'the finished event');
    expect(w.audit).toHaveLength(1);
    expect(w.audit[0]).toMatchObject({ kind: 'cancel-job', status: 'completed' });
    expect(w.phases('cancelling')).toBe(1);
    expect(w.finished).toHaveLength(1);
  });
});

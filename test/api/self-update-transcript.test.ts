// An update's transcript (docs/adr/0030-self-update-transcript.md): its job's events, begun by the
// backend that runs preflight and ended, after the restart, by the one that reconciles the outcome
// with the helper's whole output. On Postgres with an in-memory engine; replayed through the API.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { clearSelfUpdates, FakeEngine, FakeRuntime, REPO, startSelfUpdateApp, type SelfUpdateApp } from '../helpers/api/self-update.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { parseSse, type SseMessage } from '../helpers/shared/sse.ts';
import { TEST_SECRETS } from '../helpers/api/app.ts';
import { createJob, finishJob, getJob } from '../../src/state/jobs.ts';
import { getSelfUpdate, listSelfUpdates, requestSelfUpdate, updateSelfUpdate } from '../../src/state/self-update.ts';

const service = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'amy', 'x-actor-email': 'amy@example.com' };

const post = (t: SelfUpdateApp) => t.app.inject({ method: 'POST', url: '/api/system/self-update', headers: service });
async function check(t: SelfUpdateApp) {
  const res = await t.app.inject({ method: 'GET', url: '/api/system/self-update-check', headers: service });
  expect(res.statusCode, res.body).toBe(200);
  return res.json();
}
/** The job's stream, replayed to its end (it ends after `finished`). */
async function replay(t: SelfUpdateApp, jobId: string, query = ''): Promise<SseMessage[]> {
  const res = await t.app.inject({ method: 'GET', url: `/api/deployment/jobs/${jobId}/logs${query}`, headers: service });
  expect(res.statusCode, res.body).toBe(200);
  return parseSse(res.body);
}
const lines = (events: SseMessage[]) => events.filter((e) => e.event === 'output').map((e) => String(e.data.line));
const phases = (events: SseMessage[]) => events.filter((e) => e.event === 'phase').map((e) => String(e.data.phase));

// What the helper prints on a switch that works (scripts/self-update.sh), compose lines included.
const HELPER_OK = [
  'self-update: backing up docker-compose.yml',
  'self-update: running: VERSION=dev-latest docker compose -p installer -f docker-compose.yml up -d --wait --wait-timeout 300 backend',
  ' Container installer-backend  Recreate',
  ' Container installer-backend  Healthy',
  'self-update: status ok',
];
const HELPER_ROLLED_BACK = [
  'self-update: running: VERSION=dev-latest docker compose -p installer -f docker-compose.yml up -d --wait --wait-timeout 300 backend',
  'container installer-backend is unhealthy',
  'self-update: switch failed: exit 1: dependency failed to start: container installer-backend is unhealthy',
  'self-update: running: VERSION=rollback docker compose -p installer -f docker-compose.yml up -d --wait --wait-timeout 300 backend',
  'self-update: status rolled-back',
];

describe('the self-update transcript', () => {
  let db: TestDatabase;
  let first: SelfUpdateApp | undefined;
  let second: SelfUpdateApp | undefined;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterEach(async () => {
    await second?.close({ drop: false });
    await first?.close({ drop: false });
    first = second = undefined;
    await clearSelfUpdates(db);
    await db.database.db.deleteFrom('deployment_job_events').execute();
    await db.database.db.deleteFrom('deployment_job_status').execute();
    await db.database.db.deleteFrom('deployment_jobs').execute();
  });
  afterAll(async () => db?.drop());

  /** Starts an update on one backend and stops that backend, as the switch does. */
  async function startUpdate(engine = new FakeEngine()): Promise<{ engine: FakeEngine; requestId: string; jobId: string }> {
    first = await startSelfUpdateApp({ db, engine });
    const res = await post(first);
    expect(res.statusCode, res.body).toBe(200);
    const jobId = res.json().jobId as string;
    expect(jobId).toMatch(/^[0-9a-f-]{36}$/);
    // Before the restart the transcript holds preflight and the helper's start, and is not finished.
    const job = await getJob(db.database.db, jobId);
    expect(job).toMatchObject({ kind: 'self-update', phase: 'running', actor: 'platform:amy' });
    await first.close({ drop: false });
    first = undefined;
    const [r] = await listSelfUpdates(db.database.db);
    expect(r!.phase).toBe('helper-running');
    expect(r!.jobId).toBe(jobId);
    return { engine, requestId: r!.requestId, jobId };
  }

  async function boot(engine: FakeEngine, digest: string, imageId: string, reference: string): Promise<SelfUpdateApp> {
    const runtime = new FakeRuntime();
    runtime.info = { ...runtime.info, digest, imageId, image: reference, tag: reference.split(':').pop()! };
    second = await startSelfUpdateApp({ db, engine, runtime });
    return second;
  }

  const ended = (t: SelfUpdateApp) => eventually(async () => ((await check(t)).lastUpdate.status !== 'started' ? (await check(t)).lastUpdate : null), 'an outcome');

  it('completed: preflight, pull, the helper start, then after the restart its whole output, its status, the decision and finished', async () => {
    const { engine, requestId, jobId } = await startUpdate();
    engine.outputs.set('helper-1', HELPER_OK);
    const t = await boot(engine, 'sha256:new', 'img-new', `${REPO}:dev-latest`);
    engine.helpers[0]!.finish({ state: 'exited', exitCode: 0, status: 'ok', switchFailure: null, rollbackFailure: null });
    const last = await ended(t);
    expect(last).toMatchObject({ status: 'completed', jobId });

    const events = await replay(t, jobId);
    // Sequence numbers run 1, 2, 3 … with no gap or repeat across the two backends.
    expect(events.map((e) => Number(e.id))).toEqual(events.map((_, i) => i + 1));
    const p = phases(events);
    expect(p[0]).toBe('started');
    for (const step of ['resolving', 'checking', 'pulling', 'fetchingCompose', 'taggingRollback', 'staging', 'taggingNew', 'recording', 'spawning', 'helper-started', 'helper-output', 'helper-status', 'decision']) {
      expect(p, step).toContain(step);
    }
    expect(p.indexOf('resolving')).toBeLessThan(p.indexOf('pulling'));
    expect(p.indexOf('pulling')).toBeLessThan(p.indexOf('helper-started'));
    expect(p.indexOf('helper-started')).toBeLessThan(p.indexOf('helper-output'));
    expect(events.filter((e) => e.event === 'progress').map((e) => e.data.status)).toEqual(['Pulling', 'Pulled']);
    // The helper's output, whole and in order, after its start line.
    const out = lines(events);
    const at = out.indexOf(HELPER_OK[0]!);
    expect(at).toBeGreaterThan(0);
    expect(out.slice(at)).toEqual(HELPER_OK);
    expect(out.slice(0, at).some((l) => l.startsWith('started installer-self-updater'))).toBe(true);
    expect(events.find((e) => e.data.phase === 'helper-status')!.data).toMatchObject({ status: 'ok', exitCode: 0 });
    expect(events.find((e) => e.data.phase === 'decision')!.data).toMatchObject({ outcome: 'completed', detail: last.detail });
    expect(events.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'completed', state: 'completed', exitCode: 0 } });
    expect(await getJob(db.database.db, jobId)).toMatchObject({ phase: 'completed', exitCode: 0 });

    // Replay after a seq: the rest only.
    const tail = await replay(t, jobId, `?after=${events.length - 3}`);
    expect(tail.map((e) => e.event)).toEqual(['phase', 'phase', 'finished']);

    // The audit row links it.
    const actions = await t.app.inject({ method: 'GET', url: '/api/deployment/actions?limit=5', headers: service });
    const rows = (actions.json() as { items?: unknown[] }).items ?? (actions.json() as unknown[]);
    expect(rows).toEqual(expect.arrayContaining([expect.objectContaining({ kind: 'self-update', jobId, status: 'completed' })]));

    // A later boot reconciles nothing more: no line is written twice.
    await t.close({ drop: false });
    second = undefined;
    const t3 = await boot(engine, 'sha256:new', 'img-new', `${REPO}:dev-latest`);
    await new Promise((r) => setTimeout(r, 300));
    expect(await replay(t3, jobId)).toHaveLength(events.length);
    expect((await getSelfUpdate(db.database.db, requestId))!.phase).toBe('completed');
  });

  it('rolled back: the helper\'s compose output and the switch failure show after the restart; the job ends failed', async () => {
    const { engine, jobId } = await startUpdate();
    engine.outputs.set('helper-1', HELPER_ROLLED_BACK);
    const t = await boot(engine, 'sha256:old', 'img-old', `${REPO}:rollback`);
    engine.helpers[0]!.finish({ state: 'exited', exitCode: 0, status: 'rolled-back', switchFailure: 'exit 1: dependency failed to start: container installer-backend is unhealthy', rollbackFailure: null });
    const last = await ended(t);
    expect(last).toMatchObject({ status: 'rolled-back', jobId });
    const events = await replay(t, jobId);
    expect(lines(events)).toEqual(expect.arrayContaining(HELPER_ROLLED_BACK));
    expect(events.find((e) => e.data.phase === 'helper-status')!.data).toMatchObject({ status: 'rolled-back' });
    expect(events.find((e) => e.data.phase === 'decision')!.data).toMatchObject({ outcome: 'rolled-back', detail: last.detail });
    expect(events.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'failed', state: 'rolled-back' } });
    expect(await getJob(db.database.db, jobId)).toMatchObject({ phase: 'failed' });
  });

  it('an output that cannot be read is said so, and the transcript still ends with the outcome', async () => {
    const { engine, jobId } = await startUpdate();
    // No output recorded for the helper: the engine answers "no such container".
    const t = await boot(engine, 'sha256:new', 'img-new', `${REPO}:dev-latest`);
    engine.helpers[0]!.finish({ state: 'exited', exitCode: 0, status: 'ok', switchFailure: null, rollbackFailure: null });
    await ended(t);
    const events = await replay(t, jobId);
    expect(events.filter((e) => e.event === 'warning').map((e) => String(e.data.message))).toEqual([expect.stringContaining('the output of installer-self-updater could not be read')]);
    expect(events.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'completed' } });
  });

  it('a preflight that ends the update ends its job: newest completes, an unresolved target fails, both with the decision', async () => {
    const engine = new FakeEngine();
    engine.registry.set(`${REPO}:dev-latest`, 'sha256:old');
    first = await startSelfUpdateApp({ db, engine });
    const newest = await post(first);
    expect(newest.statusCode, newest.body).toBe(200);
    expect(newest.json()).toMatchObject({ started: false });
    const newestEvents = await replay(first, newest.json().jobId);
    expect(newestEvents.find((e) => e.data.phase === 'decision')!.data).toMatchObject({ outcome: 'newest' });
    expect(newestEvents.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'completed', state: 'newest' } });

    engine.registry.delete(`${REPO}:dev-latest`);
    const bad = await post(first);
    expect(bad.statusCode, bad.body).toBe(400);
    const [r] = await listSelfUpdates(db.database.db);
    expect(r!.phase).toBe('unresolved');
    const badEvents = await replay(first, r!.jobId!);
    expect(badEvents.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'failed', state: 'unresolved' } });
    expect(await getJob(db.database.db, r!.jobId!)).toMatchObject({ phase: 'failed' });
  });

  it('the update\'s own job neither blocks it nor other updates later, and the 409 rules stay', async () => {
    const engine = new FakeEngine();
    first = await startSelfUpdateApp({ db, engine });
    // A deployment job running: 409, and no job of the refused update is left behind.
    const running = await createJob(db.database.db, { kind: 'pull', params: {}, actor: { id: 'bob' } });
    const refused = await post(first);
    expect(refused.statusCode).toBe(409);
    expect(await db.database.db.selectFrom('deployment_jobs').select('kind').where('kind', '=', 'self-update').execute()).toEqual([]);
    await finishJob(db.database.db, running, { phase: 'completed', detail: null, exitCode: 0 });
    // Its own job (running) does not make the update conflict with itself.
    const res = await post(first);
    expect(res.statusCode, res.body).toBe(200);
    // In flight: a second update is refused; a job too.
    expect((await post(first)).statusCode).toBe(409);
    const job = await first.app.inject({
      method: 'POST', url: '/api/deployment/jobs', headers: { ...service, 'content-type': 'application/json' }, payload: { action: 'deploy' },
    });
    expect(job.statusCode, job.body).toBe(409);
    // Its job is not one POST /api/deployment/jobs starts, nor one that can be cancelled.
    const asJob = await first.app.inject({
      method: 'POST', url: '/api/deployment/jobs', headers: { ...service, 'content-type': 'application/json' }, payload: { action: 'self-update' },
    });
    expect(asJob.statusCode).toBe(400);
    expect(asJob.json().message).toContain('body.action');
    const cancel = await first.app.inject({ method: 'POST', url: `/api/deployment/jobs/${res.json().jobId}/cancel`, headers: service });
    expect(cancel.statusCode).toBe(400);
    expect(cancel.json().message).toContain('cannot be cancelled');
  });

  it('a boot ends the job of an update a restart interrupted in preflight, and of one that ended without its job', async () => {
    const ddb = db.database.db;
    const interrupted = await requestSelfUpdate(ddb, { id: 'amy' });
    await updateSelfUpdate(ddb, interrupted, { phase: 'preflight' });
    const ended = await requestSelfUpdate(ddb, { id: 'bob' }).catch(() => null);
    // The second is refused while the first is in flight: made after it is closed instead, below.
    expect(ended).toBeNull();
    first = await startSelfUpdateApp({ db });
    const a = (await getSelfUpdate(ddb, interrupted))!;
    expect(a.phase).toBe('aborted');
    const events = await replay(first, a.jobId!);
    expect(events.find((e) => e.data.phase === 'decision')!.data).toMatchObject({ outcome: 'aborted', detail: a.detail });
    expect(events.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'failed', state: 'aborted' } });
    await first.close({ drop: false });
    first = undefined;

    // An update recorded as completed while its job still runs (a restart between two writes).
    const later = await requestSelfUpdate(ddb, { id: 'bob' });
    await updateSelfUpdate(ddb, later, { phase: 'completed', detail: 'updated by hand', finished: true });
    const jobId = (await getSelfUpdate(ddb, later))!.jobId!;
    expect((await getJob(ddb, jobId))!.phase).toBe('running');
    first = await startSelfUpdateApp({ db });
    expect(await getJob(ddb, jobId)).toMatchObject({ phase: 'completed', detail: 'updated by hand' });
    const tail = await replay(first, jobId);
    expect(tail.map((e) => e.event)).toEqual(['phase', 'finished']);
    expect(tail.at(-1)!.data).toMatchObject({ outcome: 'completed', state: 'completed' });
  });

  it('a secret the helper printed is scrubbed from the transcript, like from every job event', async () => {
    const { engine, jobId } = await startUpdate();
    engine.outputs.set('helper-1', [...HELPER_OK.slice(0, 2), `leaked ${TEST_SECRETS.JWT_SECRET} and ${TEST_SECRETS.DATABASE_PASSWORD}`, ...HELPER_OK.slice(2)]);
    const t = await boot(engine, 'sha256:new', 'img-new', `${REPO}:dev-latest`);
    engine.helpers[0]!.finish({ state: 'exited', exitCode: 0, status: 'ok', switchFailure: null, rollbackFailure: null });
    await ended(t);
    const out = lines(await replay(t, jobId));
    const leaked = out.find((l) => l.startsWith('leaked '));
    expect(leaked).toBeDefined();
    expect(leaked).not.toContain(TEST_SECRETS.JWT_SECRET);
    expect(leaked).not.toContain(TEST_SECRETS.DATABASE_PASSWORD);
    expect(JSON.stringify(out)).not.toContain(TEST_SECRETS.JWT_SECRET);
  });
});

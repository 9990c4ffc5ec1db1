// /metrics and the diagnostics bundle on the real app and a real Postgres database.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { createJob, finishJob } from '../../src/state/jobs.ts';
import { requestSelfUpdate, updateSelfUpdate } from '../../src/state/self-update.ts';
import { redactedSettings } from '../../src/api/routes/observability.ts';
import { loadSettings } from '../../src/config.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { sample } from '../helpers/shared/prometheus.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ logs: null });
});
afterAll(async () => t?.close());

const bearer = async (role: 'admin' | 'operator' | 'viewer') => ({ authorization: `Bearer ${await t.token(role)}` });

async function scrape(): Promise<string> {
  const res = await t.app.inject({ method: 'GET', url: '/metrics', headers: await bearer('viewer') });
  expect(res.statusCode).toBe(200);
  expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
  return res.body;
}

describe('GET /metrics', () => {
  it('needs a credential: any role or the service token', async () => {
    expect((await t.app.inject({ method: 'GET', url: '/metrics' })).statusCode).toBe(401);
    const svc = await t.app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}` } });
    expect(svc.statusCode).toBe(200);
  });

  it('measures request durations by route template and status, not by raw URL', async () => {
    const before = sample(await scrape(), 'installer_http_request_duration_seconds_count', { method: 'GET', route: '/api/deployment/jobs/:jobId', status_code: '404' }) ?? 0;
    for (const id of ['00000000-0000-4000-8000-000000000001', '00000000-0000-4000-8000-000000000002']) {
      expect((await t.app.inject({ method: 'GET', url: `/api/deployment/jobs/${id}`, headers: await bearer('viewer') })).statusCode).toBe(404);
    }
    const text = await scrape();
    expect(sample(text, 'installer_http_request_duration_seconds_count', { method: 'GET', route: '/api/deployment/jobs/:jobId', status_code: '404' })).toBe(before + 2);
    expect(text).not.toContain('00000000-0000-4000-8000-000000000001');
    expect(sample(text, 'installer_http_request_duration_seconds_bucket', { route: '/api/deployment/jobs/:jobId', le: '+Inf' })).toBe(before + 2);
    expect(sample(text, 'installer_database_up')).toBe(1);
    expect(sample(text, 'installer_process_resident_memory_bytes')).toBeGreaterThan(0);
  });

  it('counts jobs by kind and outcome, their durations, and self-updates, from the stored rows', async () => {
    const db = t.db.database.db;
    const actor = { id: 'metrics-test' };
    // An update that ended, before any job is queued (a queued job would refuse it).
    const update = await requestSelfUpdate(db, actor);
    await updateSelfUpdate(db, update, { phase: 'rolled-back', finished: true });
    const done = await createJob(db, { kind: 'restart', params: {}, actor });
    const failed = await createJob(db, { kind: 'pull', params: {}, actor });
    await createJob(db, { kind: 'stop', params: {}, actor });
    const finishedAt = new Date();
    await finishJob(db, done, { phase: 'completed', detail: null, exitCode: 0 });
    await finishJob(db, failed, { phase: 'failed', detail: 'exited with code 1', exitCode: 1 });
    // Give both a known run time: 42 s and 3 s.
    await db.updateTable('deployment_job_status').set({ started_at: new Date(finishedAt.getTime() - 42_000), finished_at: finishedAt }).where('job_id', '=', done).execute();
    await db.updateTable('deployment_job_status').set({ started_at: new Date(finishedAt.getTime() - 3_000), finished_at: finishedAt }).where('job_id', '=', failed).execute();

    const text = await scrape();
    expect(sample(text, 'installer_jobs_total', { kind: 'restart', outcome: 'completed' })).toBe(1);
    expect(sample(text, 'installer_jobs_total', { kind: 'pull', outcome: 'failed' })).toBe(1);
    expect(sample(text, 'installer_jobs', { kind: 'stop', phase: 'queued' })).toBe(1);
    expect(sample(text, 'installer_job_duration_seconds_count', { kind: 'restart', outcome: 'completed' })).toBe(1);
    expect(sample(text, 'installer_job_duration_seconds_sum', { kind: 'restart', outcome: 'completed' })).toBeCloseTo(42, 3);
    expect(sample(text, 'installer_job_duration_seconds_bucket', { kind: 'restart', outcome: 'completed', le: '30' })).toBe(0);
    expect(sample(text, 'installer_job_duration_seconds_bucket', { kind: 'restart', outcome: 'completed', le: '60' })).toBe(1);
    expect(sample(text, 'installer_job_duration_seconds_bucket', { kind: 'pull', outcome: 'failed', le: '5' })).toBe(1);
    expect(sample(text, 'installer_self_updates', { phase: 'rolled-back' })).toBe(1);
    // A second scrape reports the same totals (they are read, not added up again).
    expect(sample(await scrape(), 'installer_jobs_total', { kind: 'restart', outcome: 'completed' })).toBe(1);
  });

  it('counts open event streams and forgets a closed one', async () => {
    const db = t.db.database.db;
    const jobId = await createJob(db, { kind: 'restart', params: {}, actor: { id: 'metrics-test' } });
    const base = await t.app.listen({ host: '127.0.0.1', port: 0 });
    const abort = new AbortController();
    const res = await fetch(`${base}/api/deployment/jobs/${jobId}/logs`, { headers: await bearer('viewer'), signal: abort.signal });
    expect(res.status).toBe(200);
    await eventually(async () => sample(await scrape(), 'installer_sse_clients', { stream: 'job' }) === 1, 'the stream to be counted');
    abort.abort();
    await res.body?.cancel().catch(() => {});
    await eventually(async () => sample(await scrape(), 'installer_sse_clients', { stream: 'job' }) === 0, 'the closed stream to be forgotten');
  });
});

describe('GET /api/system/diagnostics', () => {
  it('is for admins only', async () => {
    expect((await t.app.inject({ method: 'GET', url: '/api/system/diagnostics', headers: await bearer('operator') })).statusCode).toBe(403);
    expect((await t.app.inject({ method: 'GET', url: '/api/system/diagnostics', headers: { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}` } })).statusCode).toBe(403);
  });

  it('downloads versions, redacted settings, containers, recent jobs and actions and log lines, and no secret', async () => {
    const db = t.db.database.db;
    // Seed the secrets where a careless bundle would pick them up: a log line and a job's detail.
    t.wired.deps.logger.warn({ seeded: TEST_SECRETS.ENCRYPTION_KEY, also: TEST_SECRETS.DATABASE_PASSWORD }, `seeded ${TEST_SECRETS.JWT_SECRET}`);
    const jobId = await createJob(db, { kind: 'restart', params: {}, actor: { id: 'diag-test' } });
    await finishJob(db, jobId, { phase: 'failed', detail: `printed ${TEST_SECRETS.SERVICE_TOKEN}`, exitCode: 1 });

    const res = await t.app.inject({ method: 'GET', url: '/api/system/diagnostics', headers: await bearer('admin') });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-disposition']).toMatch(/^attachment; filename="installer-diagnostics-[0-9TZ-]+\.json"$/);
    for (const secret of Object.values(TEST_SECRETS)) expect(res.body).not.toContain(secret);
    // eslint-disable-next-line @typescript-eslint/no-explicit-any -- a parsed document, probed field by field below
    const bundle = JSON.parse(res.body) as Record<string, any>;
    expect(bundle.bundle.generatedBy).toBe('admin');
    expect(bundle.installer.node).toBe(process.version);
    expect(bundle.runtime.inContainer).toBe(false);
    expect(bundle.engine.version).toMatch(/^\d+\./);
    expect(bundle.database).toMatchObject({ kind: 'postgres', up: true });
    expect(bundle.database.schemaMigration).toMatch(/^\d{4}_/);
    expect(bundle.settings.JWT_SECRET).toBe('[set in the environment]');
    expect(bundle.settings.SERVICE_TOKEN).toBe('[set in the environment]');
    expect(bundle.settings.PLATFORM_PROJECT).toBe(t.settings.PLATFORM_PROJECT);
    expect(Array.isArray(bundle.platform.containers)).toBe(true);
    // The default runtime, named (a Swarm's bundle: test/api/swarm-status.test.ts).
    expect(bundle.platformRuntime).toBe('compose');
    const recent = bundle.jobs.recent as { jobId: string; detail: string }[];
    expect(recent.find((j) => j.jobId === jobId)?.detail).toBe('printed [REDACTED]');
    expect((bundle.actions as unknown[]).length).toBeGreaterThanOrEqual(0);
    const seeded = (bundle.logs as string[]).find((l) => l.includes('"seeded"'));
    expect(seeded).toContain('seeded [REDACTED]');
  });

  it('lists secret settings by where they came from and strips URL passwords', () => {
    const settings = loadSettings(
      { DATABASE_URL: 'postgres://installer:hunter2-db-password@db:5432/installer', SERVICE_TOKEN_FILE: '/run/secrets/service-token', PUBLISHED_COMPOSE_URL: 'https://u:p4ss-word@example.com/c.yml' },
      { readFile: () => 'svc-token-from-file-0123456789abcdefghijkl\n' },
    );
    const out = redactedSettings(settings);
    const text = JSON.stringify(out);
    expect(text).not.toContain('hunter2-db-password');
    expect(text).not.toContain('p4ss-word');
    expect(text).not.toContain('svc-token-from-file');
    expect(out.DATABASE_URL).toBe('postgres://installer:REDACTED@db:5432/installer');
    expect(out.SERVICE_TOKEN).toBe('[set from file /run/secrets/service-token]');
    expect(out.JWT_SECRET).toBe('[generated in SECRETS_DIR]');
  });
});

// Request validation of the deployment API: bad input is a 4xx that names the problem, and
// nothing is queued or stored for it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { requestSelfUpdate } from '../../src/state/self-update.ts';

let t: TestApp;
let dir: string;
beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'platform-api-'));
  writeFileSync(path.join(dir, 'docker-compose.yml'), 'services:\n  web:\n    image: installer-rig/busybox:latest\n  worker:\n    image: installer-rig/busybox:latest\n');
  writeFileSync(path.join(dir, '.env'), '# platform\nDB_PASSWORD=hunter2\nOWNER=alice\n');
  t = await startTestApp({ env: { PLATFORM_DIR: dir } });
});
afterAll(async () => t?.close());

const as = async (role: 'viewer' | 'operator' | 'admin') => ({ authorization: `Bearer ${await t.token(role)}` });
const jobsQueued = async () => Number((await t.db.database.db.selectFrom('deployment_jobs').select((eb) => eb.fn.countAll<string>().as('n')).executeTakeFirstOrThrow()).n);

describe('POST /api/deployment/jobs', () => {
  it('rejects unknown actions, hostile service names, services on deploy, and oversized lists', async () => {
    const h = await as('operator');
    const cases: [unknown, string][] = [
      [{ action: 'rm -rf /' }, 'body.action'],
      [{ action: 'restart', services: ['web; rm -rf /'] }, 'body.services.0: must be a compose service name'],
      [{ action: 'restart', services: ['$(reboot)'] }, 'body.services.0'],
      [{ action: 'restart', services: ['../../etc'] }, 'body.services.0'],
      [{ action: 'deploy', services: ['web'] }, 'services: deploy acts on the whole platform'],
      [{ action: 'restart', services: Array.from({ length: 51 }, (_, i) => `s${i}`) }, 'body.services'],
      [{ action: 'restart', services: ['web', 'ghost'] }, 'unknown service: ghost (the platform has: web, worker)'],
      [{}, 'body.action'],
    ];
    for (const [payload, message] of cases) {
      const res = await t.app.inject({ method: 'POST', url: '/api/deployment/jobs', headers: h, payload: payload as object });
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().message).toContain(message);
    }
    expect(await jobsQueued()).toBe(0);
  });

  it('queues a valid request with the acting user, de-duplicating services', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/api/deployment/jobs', headers: await as('operator'), payload: { action: 'restart', services: ['web', 'web'] } });
    expect(res.statusCode).toBe(202);
    const job = await t.app.inject({ method: 'GET', url: `/api/deployment/jobs/${res.json().jobId}`, headers: await as('viewer') });
    expect(job.json()).toMatchObject({ kind: 'restart', services: ['web'], actor: 'operator', phase: 'queued' });
  });

  it('attributes a service-token request to the forwarded user, as platform:<id>', async () => {
    const res = await t.app.inject({
      method: 'POST', url: '/api/deployment/jobs',
      headers: { authorization: `Bearer ${t.wired.deps.serviceTokens()[0]}`, 'x-actor-user-id': 'user-77', 'x-actor-email': 'u77@example.com' },
      payload: { action: 'pull' },
    });
    expect(res.statusCode).toBe(202);
    const row = await t.db.database.db.selectFrom('deployment_jobs').selectAll().where('job_id', '=', res.json().jobId).executeTakeFirstOrThrow();
    expect([row.actor, row.actor_email, row.actor_kind]).toEqual(['platform:user-77', 'u77@example.com', 'platform-user']);
  });
});

describe('platform configuration', () => {
  it('masks every value, secret-looking or not', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/api/deployment/config', headers: await as('viewer') });
    expect(res.json().entries).toEqual([
      { key: 'DB_PASSWORD', value: '********', secret: true, pending: false },
      { key: 'OWNER', value: '********', secret: false, pending: false },
    ]);
    expect(res.body).not.toContain('hunter2');
    expect(res.body).not.toContain('alice');
  });

  it('rejects newlines, bad keys, empty and contradictory changes; viewers may not change it', async () => {
    const h = await as('operator');
    const cases: [unknown, string][] = [
      [{ set: { OWNER: 'a\nEVIL=1' } }, 'must not contain a newline'],
      [{ set: { '1BAD': 'x' } }, 'keys must be letters'],
      [{ set: { 'A-B': 'x' } }, 'keys must be letters'],
      [{ unset: ['X;rm'] }, 'keys must be letters'],
      [{}, 'name at least one key'],
      [{ set: { A: '1' }, unset: ['A'] }, 'both set and unset'],
      [{ set: { A: 'x'.repeat(4097) } }, 'at most 4096'],
    ];
    for (const [payload, message] of cases) {
      const res = await t.app.inject({ method: 'PUT', url: '/api/deployment/config', headers: h, payload: payload as object });
      expect(res.statusCode, JSON.stringify(payload).slice(0, 80)).toBe(400);
      expect(res.json().message).toContain(message);
    }
    expect((await t.app.inject({ method: 'PUT', url: '/api/deployment/config', headers: await as('viewer'), payload: { set: { A: '1' } } })).statusCode).toBe(403);
    expect(await t.db.database.db.selectFrom('platform_config_changes').selectAll().execute()).toEqual([]);
  });
});

describe('cancel', () => {
  it('404 for an unknown job, 400 for a malformed id, 409 for a job that has ended', async () => {
    const h = await as('operator');
    expect((await t.app.inject({ method: 'POST', url: '/api/deployment/jobs/00000000-0000-4000-8000-000000000000/cancel', headers: h })).statusCode).toBe(404);
    expect((await t.app.inject({ method: 'POST', url: '/api/deployment/jobs/123/cancel', headers: h })).statusCode).toBe(400);
    const created = await t.app.inject({ method: 'POST', url: '/api/deployment/jobs', headers: h, payload: { action: 'stop' } });
    const jobId = created.json().jobId as string;
    await t.db.database.db.updateTable('deployment_job_status').set({ phase: 'completed', finished_at: new Date() }).where('job_id', '=', jobId).execute();
    const res = await t.app.inject({ method: 'POST', url: `/api/deployment/jobs/${jobId}/cancel`, headers: h });
    expect(res.statusCode).toBe(409);
    expect(res.json().message).toContain('has already ended (completed)');
  });

  it('of two cancels of one queued job sent at once, one is queued and the other refused; a cancel is not itself cancelled', async () => {
    const h = await as('operator');
    const created = await t.app.inject({ method: 'POST', url: '/api/deployment/jobs', headers: h, payload: { action: 'stop' } });
    const jobId = created.json().jobId as string;
    const answers = await Promise.all([0, 1].map(() => t.app.inject({ method: 'POST', url: `/api/deployment/jobs/${jobId}/cancel`, headers: h })));
    expect(answers.map((r) => r.statusCode).sort()).toEqual([202, 409]);
    expect(answers.find((r) => r.statusCode === 409)!.json().message).toBe(`job ${jobId} is already being cancelled by operator`);
    const cancelId = answers.find((r) => r.statusCode === 202)!.json().jobId as string;
    const again = await t.app.inject({ method: 'POST', url: `/api/deployment/jobs/${cancelId}/cancel`, headers: h });
    expect(again.statusCode).toBe(400);
    expect(again.json().message).toBe('a cancel-job request cannot itself be cancelled');
    const cancels = await t.db.database.db.selectFrom('deployment_jobs').select('job_id').where('kind', '=', 'cancel-job').execute();
    expect(cancels.map((c) => c.job_id)).toEqual([cancelId]);
  });
});

describe('jobs and self-update', () => {
  it('refuses a new job while an installer update is in flight, and takes it once the update ended', async () => {
    const db = t.db.database.db;
    await db.updateTable('deployment_job_status').set({ phase: 'completed' }).where('phase', 'in', ['queued', 'running']).execute();
    const requestId = await requestSelfUpdate(db, { id: 'admin' });
    const h = await as('operator');
    const refused = await t.app.inject({ method: 'POST', url: '/api/deployment/jobs', headers: h, payload: { action: 'restart' } });
    expect(refused.statusCode, refused.body).toBe(409);
    expect(refused.json().message).toContain('an installer self-update is in flight');
    await db.updateTable('self_update_status').set({ phase: 'completed' }).where('request_id', '=', requestId).execute();
    expect((await t.app.inject({ method: 'POST', url: '/api/deployment/jobs', headers: h, payload: { action: 'restart' } })).statusCode).toBe(202);
  });
});

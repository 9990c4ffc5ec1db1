// The host migration API's rules: admin only, JSON only, a POSIX VM user, and the two
// preconditions with the spec's exact messages.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';

let t: TestApp;
let withUrl: TestApp;
beforeAll(async () => {
  t = await startTestApp();
  withUrl = await startTestApp({ env: { PLATFORM_URL: 'https://platform.example.com' } });
});
afterAll(async () => {
  await t?.close();
  await withUrl?.close();
});

const h = async (app: TestApp, role: 'viewer' | 'operator' | 'admin') => ({ authorization: `Bearer ${await app.token(role)}` });

describe('POST /api/migrate/vm-user', () => {
  it('stores a POSIX user name and acknowledges it', async () => {
    const res = await t.app.inject({ method: 'POST', url: '/api/migrate/vm-user', headers: await h(t, 'admin'), payload: { vmUser: 'deploy_user-1' } });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ vmUser: 'deploy_user-1', updatedBy: 'admin' });
    const info = await t.app.inject({ method: 'GET', url: '/api/migrate', headers: await h(t, 'admin') });
    expect(info.json()).toMatchObject({ vmUser: 'deploy_user-1', platformUrlSet: false, scriptPath: '/opt/installer/migrate-host.sh', lastJob: null });
  });

  it('rejects names that are not POSIX user names, naming the rule', async () => {
    for (const vmUser of ['Root', 'a b', 'x;rm -rf /', '$(id)', '../etc', '-dash', '', 'a'.repeat(33), 'ü']) {
      const res = await t.app.inject({ method: 'POST', url: '/api/migrate/vm-user', headers: await h(t, 'admin'), payload: { vmUser } });
      expect(res.statusCode, vmUser).toBe(400);
      expect(res.json().message).toContain('body.vmUser: must be a POSIX user name');
    }
    const extra = await t.app.inject({ method: 'POST', url: '/api/migrate/vm-user', headers: await h(t, 'admin'), payload: { vmUser: 'ok', shell: '/bin/sh' } });
    expect(extra.statusCode).toBe(400);
  });

  it('takes only application/json, and only from an admin', async () => {
    const text = await t.app.inject({ method: 'POST', url: '/api/migrate/vm-user', headers: { ...(await h(t, 'admin')), 'content-type': 'text/plain' }, payload: 'vmUser=bob' });
    expect(text.statusCode).toBe(415);
    expect(text.json().message).toContain('application/json');
    for (const role of ['viewer', 'operator'] as const) {
      expect((await t.app.inject({ method: 'POST', url: '/api/migrate/vm-user', headers: await h(t, role), payload: { vmUser: 'bob' } })).statusCode).toBe(403);
      expect((await t.app.inject({ method: 'POST', url: '/api/migrate/run-host', headers: await h(t, role) })).statusCode).toBe(403);
    }
  });
});

describe('POST /api/migrate/run-host', () => {
  it('refuses without a VM user, then without PLATFORM_URL, with the exact messages', async () => {
    const noUser = await withUrl.app.inject({ method: 'POST', url: '/api/migrate/run-host', headers: await h(withUrl, 'admin') });
    expect(noUser.statusCode).toBe(409);
    expect(noUser.json().message).toBe('VM user must be set before running host migration');
    const noUrl = await t.app.inject({ method: 'POST', url: '/api/migrate/run-host', headers: await h(t, 'admin') });
    expect(noUrl.statusCode).toBe(409);
    expect(noUrl.json().message).toBe('PLATFORM_URL must be set before running host migration');
    expect(await t.db.database.db.selectFrom('deployment_jobs').selectAll().execute()).toEqual([]);
  });

  it('queues one migrate-host job, and refuses a second while it waits', async () => {
    await withUrl.app.inject({ method: 'POST', url: '/api/migrate/vm-user', headers: await h(withUrl, 'admin'), payload: { vmUser: 'ubuntu' } });
    const res = await withUrl.app.inject({ method: 'POST', url: '/api/migrate/run-host', headers: await h(withUrl, 'admin') });
    expect(res.statusCode).toBe(202);
    const { jobId } = res.json();
    const job = await withUrl.app.inject({ method: 'GET', url: `/api/deployment/jobs/${jobId}`, headers: await h(withUrl, 'viewer') });
    expect(job.json()).toMatchObject({ kind: 'migrate-host', phase: 'queued', actor: 'admin' });
    const again = await withUrl.app.inject({ method: 'POST', url: '/api/migrate/run-host', headers: await h(withUrl, 'admin') });
    expect(again.statusCode).toBe(409);
    expect(again.json().message).toContain('a host migration is already queued');
  });
});

describe('one host migration at a time', () => {
  it('of two requests made at once over the socket, one is queued and the other refused', async () => {
    const app = await startTestApp({ env: { PLATFORM_URL: 'https://platform.example.com' } });
    try {
      await app.app.inject({ method: 'POST', url: '/api/migrate/vm-user', headers: await h(app, 'admin'), payload: { vmUser: 'ubuntu' } });
      const base = await app.app.listen({ port: 0, host: '127.0.0.1' });
      const headers = await h(app, 'admin');
      // Several rounds: without the rule in one transaction, both requests of a round can pass the check.
      for (let round = 0; round < 5; round++) {
        const answers = await Promise.all([0, 1].map(() => fetch(`${base}/api/migrate/run-host`, { method: 'POST', headers })));
        const codes = answers.map((r) => r.status).sort();
        expect(codes, `round ${round}`).toEqual([202, 409]);
        const refused = answers.find((r) => r.status === 409)!;
        expect(((await refused.json()) as { message: string }).message).toMatch(/^a host migration is already queued \(job [0-9a-f-]{36}\)$/);
        const queued = await app.db.database.db
          .selectFrom('deployment_jobs as j').innerJoin('deployment_job_status as s', 's.job_id', 'j.job_id')
          .select('j.job_id').where('j.kind', '=', 'migrate-host').where('s.phase', '=', 'queued').execute();
        expect(queued).toHaveLength(1);
        // Ended, so that the next round starts from none.
        await app.db.database.db.updateTable('deployment_job_status').set({ phase: 'failed', finished_at: new Date() }).where('job_id', '=', queued[0]!.job_id).execute();
      }
    } finally {
      await app.close();
    }
  });
});

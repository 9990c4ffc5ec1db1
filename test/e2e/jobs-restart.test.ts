// A kill -9 of the backend while a job runs, then a restart: the job is closed as failed and
// interrupted, its stream ends with `finished`, its audit row is completed, the orphaned compose
// process is stopped, and the job that was waiting behind it runs.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cpSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry, ROOT, type Running } from '../helpers/shared/process.ts';
import { docker, run } from '../helpers/e2e/rig.ts';
import { parseSse } from '../helpers/shared/sse.ts';
import { createUser } from '../../src/state/users.ts';
import { eventually } from '../helpers/shared/eventually.ts';

const project = `stubborn-${randomBytes(3).toString('hex')}`;
let dir: string;
let db: TestDatabase;
let dataDir: string;
let proc: Running | undefined;

const env = () => ({ DATABASE_URL: db.url, DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', PLATFORM_DIR: dir, PLATFORM_PROJECT: project, LOG_LEVEL: 'info' });

async function login(base: string): Promise<string> {
  const res = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'ops', password: 'ops-password-1' }) });
  return ((await res.json()) as { token: string }).token;
}

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'stubborn-'));
  cpSync(path.join(ROOT, 'test/fixtures/stubborn/docker-compose.yml'), path.join(dir, 'docker-compose.yml'));
  await docker(['compose', '-p', project, '-f', path.join(dir, 'docker-compose.yml'), 'up', '-d'], { cwd: dir });
  db = await createTestDatabase();
  await createUser(db.database.db, { username: 'ops', password: 'ops-password-1', role: 'operator' });
  dataDir = mkdtempSync(path.join(tmpdir(), 'installer-restart-'));
});
afterAll(async () => {
  await proc?.stop('SIGKILL');
  await run('docker', ['compose', '-p', project, '-f', path.join(dir, 'docker-compose.yml'), 'kill'], { cwd: dir });
  await run('docker', ['compose', '-p', project, '-f', path.join(dir, 'docker-compose.yml'), 'down', '-v', '-t', '0'], { cwd: dir });
  await db?.drop();
});

describe('backend killed during a job', () => {
  it('closes the job as interrupted on the next boot and runs what was queued', async () => {
    proc = runEntry('src/main.ts', env());
    let base = await proc.url;
    let token = await login(base);
    const h = () => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' });
    const post = async (action: string) => {
      const res = await fetch(`${base}/api/deployment/jobs`, { method: 'POST', headers: h(), body: JSON.stringify({ action }) });
      expect(res.status).toBe(202);
      return ((await res.json()) as { jobId: string }).jobId;
    };
    const stopId = await post('stop');
    const upId = await post('compose-up');
    type Status = { running: { jobId: string; hungDeadline: string | null }[]; queued: { jobId: string }[] };
    const status = await eventually(async () => {
      const s = (await (await fetch(`${base}/api/deployment/status`, { headers: h() })).json()) as Status;
      return s.running[0]?.hungDeadline ? s : null;
    }, 'the first job running with its hung deadline', 10_000, 100);
    // One compose job at a time: the second waits, and the status says so.
    expect(status.running.map((j) => j.jobId)).toEqual([stopId]);
    expect(status.queued.map((j) => j.jobId)).toEqual([upId]);
    // The hung guard's deadline is kept in the database, about 15 minutes ahead.
    const ahead = Date.parse(status.running[0]!.hungDeadline!) - Date.now();
    expect(ahead).toBeGreaterThan(14 * 60_000);
    expect(ahead).toBeLessThanOrEqual(15 * 60_000);
    await new Promise((r) => setTimeout(r, 300));
    expect((await run('pgrep', ['-f', `compose.*-p ${project}`])).stdout.trim()).not.toBe('');

    await proc.stop('SIGKILL');
    proc = runEntry('src/main.ts', env());
    base = await proc.url;
    token = await login(base);

    const job = await (await fetch(`${base}/api/deployment/jobs/${stopId}`, { headers: h() })).json();
    expect(job).toMatchObject({ phase: 'failed', detail: 'interrupted: the backend restarted while the job was running' });
    const stream = parseSse(await (await fetch(`${base}/api/deployment/jobs/${stopId}/logs`, { headers: { ...h(), accept: 'text/event-stream' } })).text());
    expect(stream.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'failed', state: 'interrupted' } });
    const seqs = stream.map((e) => Number(e.id));
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    const audit = await db.database.db.selectFrom('deployment_actions').selectAll().where('job_id', '=', stopId).execute();
    expect(audit.map((a) => [a.status, a.detail])).toEqual([['failed', 'interrupted: the backend restarted while the job was running']]);
    // The compose process the dead backend had started is gone.
    await new Promise((r) => setTimeout(r, 500));
    const left = (await run('pgrep', ['-f', `compose.*-p ${project} .*stop`])).stdout.trim();
    expect(left).toBe('');
    // The queued job is picked up after the restart.
    const up = parseSse(await (await fetch(`${base}/api/deployment/jobs/${upId}/logs`, { headers: { ...h(), accept: 'text/event-stream' } })).text());
    expect(up.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'completed' } });
    expect(proc.output()).toContain('interrupted: the backend restarted while the job was running');
  });
});

// Every platform action against a real compose project on the real engine: the engine's state
// afterwards is what the action promises, and each action leaves its audit row and job stream.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cpSync, mkdtempSync, readFileSync, writeFileSync, appendFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { docker, freePort, REGISTRY, run, startPlatform, type PlatformProject } from '../helpers/e2e/rig.ts';
import { followJob, lines, requestJob, requestJobAndFollow } from '../helpers/e2e/jobs.ts';
import { ROOT } from '../helpers/shared/process.ts';
import { putSetting } from '../../src/state/settings.ts';
import { eventually } from '../helpers/shared/eventually.ts';

interface Inspect {
  Id: string;
  Image: string;
  State: { Status: string; ExitCode: number; StartedAt: string; Health?: { Status: string } };
  Config: { Env: string[] };
}
const inspect = async (id: string): Promise<Inspect> => JSON.parse(await docker(['inspect', id]))[0];

let p: PlatformProject;
let t: TestApp;
const byService = async () => Object.fromEntries((await p.containers()).map((c) => [c.service, c]));

beforeAll(async () => {
  p = await startPlatform();
  t = await startTestApp({ controllers: true, env: { PLATFORM_DIR: p.dir, PLATFORM_PROJECT: p.project } });
});
afterAll(async () => {
  await t?.close();
  await p?.remove();
});

async function audit(jobId: string) {
  return t.db.database.db.selectFrom('deployment_actions').selectAll().where('job_id', '=', jobId).execute();
}

describe('platform actions on the real engine', () => {
  it('restart restarts the containers in place and records the action', async () => {
    const before = await byService();
    const { jobId, events, finished } = await requestJobAndFollow(t, 'restart', ['worker']);
    expect(finished).toMatchObject({ outcome: 'completed', exitCode: 0, detail: null });
    const after = await byService();
    expect(after.worker!.id).toBe(before.worker!.id);
    const w1 = await inspect(after.worker!.id);
    expect(w1.State.Status).toBe('running');
    expect(Date.parse(w1.State.StartedAt)).toBeGreaterThan(Date.now() - 60_000);
    expect((await inspect(after.web!.id)).State.StartedAt).toBe((await inspect(before.web!.id)).State.StartedAt);
    expect(events[0]).toMatchObject({ id: '1', event: 'phase', data: { phase: 'started', kind: 'restart', services: ['worker'] } });
    expect(events.map((e) => Number(e.id))).toEqual(events.map((_, i) => i + 1));
    expect(events.some((e) => e.event === 'phase' && String(e.data.command).includes('restart worker'))).toBe(true);
    const rows = await audit(jobId);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ kind: 'restart', status: 'completed', exit_code: 0, actor: 'operator', detail: 'services: worker' });
    // Every output line is mirrored to the backend's log, prefixed with the job id.
    const out = lines(events);
    expect(out.length).toBeGreaterThan(0);
    expect(t.logs.join('')).toContain(`[job ${jobId}] ${out[0]}`);
  });

  it('stop leaves the containers exited; compose-up starts the pulled images again', async () => {
    const stopped = await requestJobAndFollow(t, 'stop');
    expect(stopped.finished.outcome).toBe('completed');
    for (const c of await p.containers()) expect(c.state).toBe('exited');
    const up = await requestJobAndFollow(t, 'compose-up');
    expect(up.finished.outcome).toBe('completed');
    for (const c of await p.containers()) expect(c.state).toBe('running');
    expect(up.events.some((e) => String(e.data.command ?? '').includes('--pull never'))).toBe(true);
  });

  it('kill kills the named service only', async () => {
    const { finished } = await requestJobAndFollow(t, 'kill', ['worker']);
    expect(finished.outcome).toBe('completed');
    const s = await byService();
    const w = await inspect(s.worker!.id);
    expect(w.State.Status).toBe('exited');
    expect(w.State.ExitCode).toBe(137);
    expect(s.web!.state).toBe('running');
    await requestJobAndFollow(t, 'compose-up', ['worker']);
  });

  it('apply-config writes pending .env changes and recreates the services', async () => {
    const before = await byService();
    const admin = { authorization: `Bearer ${await t.token('operator')}` };
    const put = await t.app.inject({ method: 'PUT', url: '/api/deployment/config', headers: admin, payload: { set: { ADMIN_EMAIL: 'ops@example.com', API_TOKEN: 's3cret value' } } });
    expect(put.statusCode, put.body).toBe(202);
    expect(put.json().pending).toEqual(['ADMIN_EMAIL', 'API_TOKEN']);
    const shown = await t.app.inject({ method: 'GET', url: '/api/deployment/config', headers: admin });
    const entries = shown.json().entries as { key: string; value: string; pending: boolean }[];
    expect(entries.find((e) => e.key === 'API_TOKEN')).toMatchObject({ value: '********', pending: true });
    // Stored encrypted: the plain value is nowhere in the database row.
    const raw = await t.db.database.db.selectFrom('platform_config_changes').selectAll().execute();
    expect(JSON.stringify(raw)).not.toContain('s3cret value');

    const { finished } = await requestJobAndFollow(t, 'apply-config', ['worker']);
    expect(finished.outcome).toBe('completed');
    const after = await byService();
    expect(after.worker!.id).not.toBe(before.worker!.id);
    expect(after.web!.id).toBe(before.web!.id);
    const env = (await inspect(after.worker!.id)).Config.Env;
    expect(env).toContain('ADMIN_EMAIL=ops@example.com');
    const file = readFileSync(path.join(p.dir, '.env'), 'utf8');
    expect(file).toContain('ADMIN_EMAIL=ops@example.com');
    expect(file).toContain("API_TOKEN='s3cret value'");
    const again = await t.app.inject({ method: 'GET', url: '/api/deployment/config', headers: admin });
    expect((again.json().entries as { pending: boolean }[]).every((e) => !e.pending)).toBe(true);
  });

  it('an unknown service is a 400 that names it, and nothing is queued', async () => {
    const res = await t.app.inject({
      method: 'POST', url: '/api/deployment/jobs', headers: { authorization: `Bearer ${await t.token('operator')}` },
      payload: { action: 'restart', services: ['worker', 'nosuch'] },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().message).toBe('unknown service: nosuch (the platform has: db, web, worker)');
    const viewer = await t.app.inject({ method: 'POST', url: '/api/deployment/jobs', headers: { authorization: `Bearer ${await t.token('viewer')}` }, payload: { action: 'restart' } });
    expect(viewer.statusCode).toBe(403);
  });

  it('status shows the containers with health, and the last action of each kind', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/api/deployment/status', headers: { authorization: `Bearer ${await t.token('viewer')}` } });
    expect(res.statusCode).toBe(200);
    const s = res.json();
    expect(s.project).toBe(p.project);
    expect(s.containers.map((c: { service: string }) => c.service).sort()).toEqual(['db', 'web', 'worker']);
    expect(s.containers.find((c: { service: string }) => c.service === 'db')).toMatchObject({ state: 'running', health: expect.stringMatching(/healthy|starting/) });
    expect(s.lastActions.restart).toMatchObject({ status: 'completed', actor: 'operator' });
    expect(s.running).toEqual([]);
  });

  it('the audit trail lists actions newest first, with limits checked', async () => {
    const h = { authorization: `Bearer ${await t.token('viewer')}` };
    const res = await t.app.inject({ method: 'GET', url: '/api/deployment/actions?limit=3', headers: h });
    expect(res.statusCode).toBe(200);
    const rows = res.json();
    expect(rows).toHaveLength(3);
    expect(rows[0].kind).toBe('apply-config');
    expect(Date.parse(rows[0].createdAt)).toBeGreaterThanOrEqual(Date.parse(rows[1].createdAt));
    for (const bad of ['0', '-1', '501', 'ten', '1.5']) {
      const r = await t.app.inject({ method: 'GET', url: `/api/deployment/actions?limit=${bad}`, headers: h });
      expect(r.statusCode, bad).toBe(400);
      expect(r.json().message).toContain('querystring.limit');
    }
  });
});

describe('pull and deploy from a registry', () => {
  const tag = randomBytes(4).toString('hex');
  const image = `${REGISTRY}/platform-test/busybox:${tag}`;
  let danglingId: string;
  let rollbackRef: string;

  beforeAll(async () => {
    // A fresh image with a layer of its own, in the registry but not on the engine, so a pull downloads.
    const ctx = mkdtempSync(path.join(tmpdir(), 'platform-image-'));
    writeFileSync(path.join(ctx, 'Dockerfile'), 'FROM installer-rig/busybox:latest\nCOPY blob /blob\n');
    writeFileSync(path.join(ctx, 'blob'), randomBytes(3 * 1024 * 1024));
    await run('docker', ['build', '-q', '-t', image, ctx], { env: { DOCKER_BUILDKIT: '0' } });
    await docker(['push', image]);
    await docker(['rmi', image]);
    // A dangling image (its tag moved on) and an image held only by the rollback tag.
    const dctx = mkdtempSync(path.join(tmpdir(), 'dangling-'));
    writeFileSync(path.join(dctx, 'Dockerfile'), `FROM installer-rig/busybox:latest\nRUN ["/bin/sh", "-c", "echo ${tag} > /x"]\n`);
    await run('docker', ['build', '-q', '-t', `dangling-test:${tag}`, dctx], { env: { DOCKER_BUILDKIT: '0' } });
    danglingId = (await docker(['image', 'inspect', '-f', '{{.Id}}', `dangling-test:${tag}`])).trim();
    // Building the tag again moves it to a new image: the first one is left dangling.
    writeFileSync(path.join(dctx, 'Dockerfile'), `FROM installer-rig/busybox:latest\nRUN ["/bin/sh", "-c", "echo again ${tag} > /x"]\n`);
    await run('docker', ['build', '-q', '-t', `dangling-test:${tag}`, dctx], { env: { DOCKER_BUILDKIT: '0' } });
    writeFileSync(path.join(dctx, 'Dockerfile'), `FROM installer-rig/busybox:latest\nRUN ["/bin/sh", "-c", "echo rollback ${tag} > /x"]\n`);
    rollbackRef = `${REGISTRY}/installer-test-${tag}:rollback`;
    await run('docker', ['build', '-q', '-t', rollbackRef, dctx], { env: { DOCKER_BUILDKIT: '0' } });
  });

  afterAll(async () => {
    await run('docker', ['rmi', '-f', `dangling-test:${tag}`, rollbackRef, image]);
  });

  it('pull downloads with progress events, then prunes dangling images but never the rollback tag', async () => {
    appendFileSync(path.join(p.dir, '.env'), `PLATFORM_IMAGE=${image}\n`);
    // A dangling image exists before the pull: make sure it really is dangling (no tag).
    const dangling = JSON.parse(await docker(['image', 'inspect', danglingId]).catch(() => '[{"RepoTags":["gone"]}]'))[0];
    expect(dangling.RepoTags ?? []).toEqual([]);
    const { events, finished } = await requestJobAndFollow(t, 'pull', ['worker']);
    expect(finished.outcome, JSON.stringify(events.slice(-5))).toBe('completed');
    const progress = events.filter((e) => e.event === 'progress');
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.some((e) => typeof e.data.total === 'number' && (e.data.total as number) > 0 || e.data.status === 'Pull complete' || e.data.status === 'Pulled')).toBe(true);
    expect((await run('docker', ['image', 'inspect', image])).code).toBe(0);
    expect(events.some((e) => e.event === 'phase' && e.data.phase === 'prune')).toBe(true);
    expect((await run('docker', ['image', 'inspect', danglingId])).code).not.toBe(0);
    expect((await run('docker', ['image', 'inspect', rollbackRef])).code).toBe(0);
  });

  it('deploy downloads the templates over http, renders .env with the VM user, pulls and starts', async () => {
    const templates = mkdtempSync(path.join(tmpdir(), 'templates-'));
    cpSync(path.join(ROOT, 'deploy/rig/demo-platform/docker-compose.yml'), path.join(templates, 'docker-compose.yml'));
    const template = readFileSync(path.join(ROOT, 'deploy/rig/demo-platform/.env.template'), 'utf8').replace(/^WEB_PORT=.*$/m, `WEB_PORT=${await freePort()}`);
    writeFileSync(path.join(templates, '.env.template'), `${template}PLATFORM_IMAGE=${image}\n`);
    const server: Server = createServer((req, res) => {
      const file = path.join(templates, path.basename(req.url ?? ''));
      try {
        res.end(readFileSync(file));
      } catch {
        res.statusCode = 404;
        res.end();
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const platformDir = mkdtempSync(path.join(tmpdir(), 'deployed-'));
    const project = `${p.project}-deploy`;
    const d = await startTestApp({
      controllers: true,
      env: { PLATFORM_DIR: platformDir, PLATFORM_PROJECT: project, PLATFORM_TEMPLATES_URL: `http://127.0.0.1:${(server.address() as { port: number }).port}/` },
    });
    try {
      await putSetting(d.db.database.db, 'vmUser', 'alice', 'admin');
      const { events, finished } = await requestJobAndFollow(d, 'deploy');
      expect(finished.outcome, JSON.stringify(events.slice(-8))).toBe('completed');
      expect(events.filter((e) => e.event === 'phase').map((e) => e.data.phase)).toEqual(['started', 'prepare', 'pull', 'up', 'prune']);
      const env = readFileSync(path.join(platformDir, '.env'), 'utf8');
      expect(env).toContain('PLATFORM_OWNER=alice');
      expect(env).toContain('ADMIN_EMAIL=alice@example.invalid');
      const out = JSON.parse(await docker(['ps', '-a', '--filter', `label=com.docker.compose.project=${project}`, '--format', '{{json .}}']).then((s) => `[${s.trim().split('\n').join(',')}]`));
      expect(out.map((c: { State: string }) => c.State)).toEqual(['running', 'running', 'running']);
      expect(out.every((c: { Image: string }) => c.Image === image)).toBe(true);
    } finally {
      await d.close();
      server.close();
      await run('docker', ['compose', '-p', project, '-f', path.join(platformDir, 'docker-compose.yml'), 'down', '-v', '-t', '1'], { cwd: platformDir });
    }
  });
});

describe('cancel and replay', () => {
  let s: TestApp;
  let dir: string;
  const project = `stubborn-${randomBytes(3).toString('hex')}`;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'stubborn-'));
    cpSync(path.join(ROOT, 'test/fixtures/stubborn/docker-compose.yml'), path.join(dir, 'docker-compose.yml'));
    await docker(['compose', '-p', project, '-f', path.join(dir, 'docker-compose.yml'), 'up', '-d'], { cwd: dir });
    s = await startTestApp({ controllers: true, env: { PLATFORM_DIR: dir, PLATFORM_PROJECT: project } });
  });
  afterAll(async () => {
    await s?.close();
    await run('docker', ['compose', '-p', project, '-f', path.join(dir, 'docker-compose.yml'), 'kill'], { cwd: dir });
    await run('docker', ['compose', '-p', project, '-f', path.join(dir, 'docker-compose.yml'), 'down', '-v', '-t', '0'], { cwd: dir });
  });

  it('cancel stops the running compose process; the job ends failed saying who cancelled it', async () => {
    const jobId = await requestJob(s, 'stop');
    // Wait until compose is really running (its phase event is out).
    await eventually(async () => {
      const job = (await s.app.inject({ method: 'GET', url: `/api/deployment/jobs/${jobId}`, headers: { authorization: `Bearer ${await s.token('viewer')}` } })).json();
      return job.phase === 'running' && String(job.state).includes('running');
    }, 'the stop job to run compose', 10_000, 100);
    await new Promise((r) => setTimeout(r, 500));
    const res = await s.app.inject({ method: 'POST', url: `/api/deployment/jobs/${jobId}/cancel`, headers: { authorization: `Bearer ${await s.token('admin')}` } });
    expect(res.statusCode, res.body).toBe(202);
    const cancelId = res.json().jobId as string;
    const events = await followJob(s, jobId);
    expect(events.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'failed', state: 'cancelled', detail: 'cancelled by admin' } });
    const cancelEvents = await followJob(s, cancelId);
    expect(cancelEvents.at(-1)!.data).toMatchObject({ outcome: 'completed', detail: `cancelled job ${jobId}` });
    // No compose process for this project is left running.
    const ps = await run('pgrep', ['-f', `compose.*-p ${project}`]);
    expect(ps.stdout.trim()).toBe('');
    const rows = await s.db.database.db.selectFrom('deployment_actions').selectAll().where('job_id', 'in', [jobId, cancelId]).orderBy('id').execute();
    expect(rows.map((r) => [r.kind, r.status, r.actor])).toEqual([['stop', 'failed', 'operator'], ['cancel-job', 'completed', 'admin']]);
    expect(rows[0]!.detail).toBe('cancelled by admin');
    const again = await s.app.inject({ method: 'POST', url: `/api/deployment/jobs/${jobId}/cancel`, headers: { authorization: `Bearer ${await s.token('admin')}` } });
    expect(again.statusCode).toBe(409);
  });

  it('replays from the start, after=<seq> and Last-Event-ID without loss or repeats; bad input is a 400/404', async () => {
    const { jobId, events } = await requestJobAndFollow(s, 'compose-up');
    const all = events.map((e) => Number(e.id));
    expect(all.length).toBeGreaterThan(2);
    const fromTwo = await followJob(s, jobId, '?after=2');
    expect(fromTwo.map((e) => Number(e.id))).toEqual(all.filter((n) => n > 2));
    const h = { authorization: `Bearer ${await s.token('viewer')}`, accept: 'text/event-stream' };
    const viaHeader = await s.app.inject({ method: 'GET', url: `/api/deployment/jobs/${jobId}/logs`, headers: { ...h, 'last-event-id': String(all.length - 1) } });
    expect(viaHeader.body).toContain('event: finished');
    expect(viaHeader.body.match(/^id: /gm)).toHaveLength(1);
    expect((await s.app.inject({ method: 'GET', url: `/api/deployment/jobs/${jobId}/logs?after=-1`, headers: h })).statusCode).toBe(400);
    expect((await s.app.inject({ method: 'GET', url: `/api/deployment/jobs/${jobId}/logs?after=x`, headers: h })).json().message).toContain('after: must be a non-negative integer');
    expect((await s.app.inject({ method: 'GET', url: '/api/deployment/jobs/00000000-0000-4000-8000-000000000000/logs', headers: h })).statusCode).toBe(404);
    expect((await s.app.inject({ method: 'GET', url: '/api/deployment/jobs/not-a-uuid/logs', headers: h })).statusCode).toBe(400);
  });
});

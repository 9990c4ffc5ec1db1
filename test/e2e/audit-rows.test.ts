// The audit row of every job kind, success and failure, on the real engine: kind, status, exit
// code, actor and detail. A failure comes from the real component: the engine answers compose's
// request with an error (through the engine gate, test/helpers/e2e/engine-gate.ts), the template
// server answers 404, the host's Docker service is stopped. The exit code recorded is the one of
// the step that failed; a job that ends without a process ending (cancelled, failed preparation)
// records null, never the 0 of an earlier step. One platform project serves the whole file.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { buildInstallerImage, docker, REGISTRY, run, startPlatform, uniqueName, type PlatformProject } from '../helpers/e2e/rig.ts';
import { followJob, phaseEvent, requestJob, requestJobAndFollow, waitForJobEvent } from '../helpers/e2e/jobs.ts';
import { EngineGate, type Hold } from '../helpers/e2e/engine-gate.ts';
import { startSystemdHost, type SystemdHost } from '../helpers/e2e/systemd-host.ts';
import { ROOT } from '../helpers/shared/process.ts';
import { createJob } from '../../src/state/jobs.ts';
import { eventually } from '../helpers/shared/eventually.ts';

/** Compose talks to the engine as `compose/<version>` (or the docker CLI's agent); the backend's own calls do not. */
const COMPOSE_UA = /compose|Docker-Client/i;
const ENGINE = (p: string) => new RegExp(`^(/v[\\d.]+)?/${p}`);
const scriptPath = '/opt/installer-audit/migrate-host.sh';

let gate: EngineGate;
let platform: PlatformProject;
let t: TestApp;
let host: SystemdHost;
let image: string;
let installerImage: string;
let templates: string;
let templateServer: Server;
/** How the template server answers: serve the files, answer 404, or hold the request. */
const templateMode: { mode: 'serve' | 'missing' | 'hold'; waiting: ServerResponse[] } = { mode: 'serve', waiting: [] };
const holds: Hold[] = [];

type Row = [kind: string, status: string, exitCode: number | null, actor: string, detail: string | null];

async function row(jobId: string): Promise<Row> {
  const rows = await t.db.database.db.selectFrom('deployment_actions').selectAll().where('job_id', '=', jobId).execute();
  expect(rows, `audit rows of job ${jobId}`).toHaveLength(1);
  const r = rows[0]!;
  return [r.kind, r.status, r.exit_code, r.actor, r.detail];
}

/** Holds compose's next request matching `p`; the test answers it (fail or release). */
function hold(method: string, p: string): Hold {
  const h = gate.hold({ method, path: ENGINE(p), userAgent: COMPOSE_UA });
  holds.push(h);
  return h;
}

/** Runs a job whose compose request matching `p` the engine answers with an error. */
async function failingJob(action: string, services: string[] | undefined, method: string, p: string) {
  const h = hold(method, p);
  const jobId = await requestJob(t, action, services);
  (await h.hit()).fail(500, 'injected engine failure');
  h.release();
  const events = await followJob(t, jobId);
  const finished = events.at(-1)!;
  expect(finished.event).toBe('finished');
  return { jobId, finished: finished.data, events };
}

/** The exit code compose gives when the engine fails a request: a real code, not 0 and not null. */
function expectComposeFailure(finished: Record<string, unknown>): number {
  expect(finished.outcome).toBe('failed');
  const code = finished.exitCode as number;
  expect(typeof code).toBe('number');
  expect(code).toBeGreaterThan(0);
  return code;
}

async function cancel(jobId: string): Promise<string> {
  const res = await t.app.inject({ method: 'POST', url: `/api/deployment/jobs/${jobId}/cancel`, headers: { authorization: `Bearer ${await t.token('admin')}` } });
  expect(res.statusCode, res.body).toBe(202);
  return (res.json() as { jobId: string }).jobId;
}

const restore = () => platform.compose(['up', '-d', '--wait', '--wait-timeout', '120']);

beforeAll(async () => {
  gate = new EngineGate(path.join(mkdtempSync(path.join(tmpdir(), 'audit-gate-')), 'docker.sock'));
  await gate.start();
  // The platform's image is in the registry, so pull and deploy really talk to it.
  image = `${REGISTRY}/${uniqueName('audit-rows')}/busybox:latest`;
  await docker(['tag', 'installer-rig/busybox:latest', image]);
  await docker(['push', '-q', image]);
  installerImage = `${REGISTRY}/installer:dev-audit-${uniqueName('x').slice(2)}`;
  [platform, host] = await Promise.all([startPlatform({ env: { PLATFORM_IMAGE: image } }), startSystemdHost(), buildInstallerImage([installerImage])]);
  templates = mkdtempSync(path.join(tmpdir(), 'audit-templates-'));
  cpSync(path.join(ROOT, 'deploy/rig/demo-platform/docker-compose.yml'), path.join(templates, 'docker-compose.yml'));
  // The .env the platform runs with, so a deploy changes nothing the test does not make it change.
  writeFileSync(path.join(templates, '.env.template'), readFileSync(path.join(platform.dir, '.env'), 'utf8'));
  templateServer = createServer((req, res) => {
    if (templateMode.mode === 'hold') return void templateMode.waiting.push(res);
    try {
      if (templateMode.mode === 'missing') throw new Error('missing');
      res.end(readFileSync(path.join(templates, path.basename(req.url ?? ''))));
    } catch {
      res.statusCode = 404;
      res.end();
    }
  });
  await new Promise<void>((r) => templateServer.listen(0, '127.0.0.1', r));
  t = await startTestApp({
    controllers: true,
    env: {
      PLATFORM_DIR: platform.dir,
      PLATFORM_PROJECT: platform.project,
      PLATFORM_TEMPLATES_URL: `http://127.0.0.1:${(templateServer.address() as { port: number }).port}/`,
      DOCKER_SOCKET: gate.socketPath,
    },
  });
});

afterEach(() => {
  for (const h of holds.splice(0)) h.release();
  templateMode.mode = 'serve';
  for (const r of templateMode.waiting.splice(0)) r.destroy();
});

afterAll(async () => {
  await t?.close();
  await platform?.remove();
  await host?.remove();
  await gate?.close();
  if (gate) rmSync(path.dirname(gate.socketPath), { recursive: true, force: true });
  templateServer?.close();
  if (templates) rmSync(templates, { recursive: true, force: true });
  await run('docker', ['rmi', image, installerImage].filter(Boolean));
});

describe('the audit row of every job kind', () => {
  it('restart: completed 0; failed with the exit code of compose restart', async () => {
    const ok = await requestJobAndFollow(t, 'restart', ['worker']);
    expect(ok.finished).toMatchObject({ outcome: 'completed', exitCode: 0 });
    expect(await row(ok.jobId)).toEqual(['restart', 'completed', 0, 'operator', 'services: worker']);
    // The controller records the kind of actor the request was made by (a local user here).
    expect((await t.db.database.db.selectFrom('deployment_actions').select('actor_kind').where('job_id', '=', ok.jobId).executeTakeFirstOrThrow()).actor_kind).toBe('user');
    const bad = await failingJob('restart', ['worker'], 'POST', 'containers/[^/]+/restart');
    const code = expectComposeFailure(bad.finished);
    expect(await row(bad.jobId)).toEqual(['restart', 'failed', code, 'operator', `restart exited with code ${code}`]);
  });

  it('stop: failed with the exit code of compose stop; completed 0', async () => {
    const bad = await failingJob('stop', ['worker'], 'POST', 'containers/[^/]+/stop');
    const code = expectComposeFailure(bad.finished);
    expect(await row(bad.jobId)).toEqual(['stop', 'failed', code, 'operator', `stop exited with code ${code}`]);
    const ok = await requestJobAndFollow(t, 'stop', ['worker']);
    expect(ok.finished).toMatchObject({ outcome: 'completed', exitCode: 0 });
    expect(await row(ok.jobId)).toEqual(['stop', 'completed', 0, 'operator', 'services: worker']);
  });

  it('compose-up: failed with the exit code of compose up; completed 0', async () => {
    // worker is stopped (above): up has a container to start.
    const bad = await failingJob('compose-up', ['worker'], 'POST', 'containers/[^/]+/start');
    const code = expectComposeFailure(bad.finished);
    expect(await row(bad.jobId)).toEqual(['compose-up', 'failed', code, 'operator', `up-pulled exited with code ${code}`]);
    const ok = await requestJobAndFollow(t, 'compose-up', ['worker']);
    expect(ok.finished).toMatchObject({ outcome: 'completed', exitCode: 0 });
    expect(await row(ok.jobId)).toEqual(['compose-up', 'completed', 0, 'operator', 'services: worker']);
  });

  it('kill: failed with the exit code of compose kill; completed 0', async () => {
    const bad = await failingJob('kill', ['worker'], 'POST', 'containers/[^/]+/kill');
    const code = expectComposeFailure(bad.finished);
    expect(await row(bad.jobId)).toEqual(['kill', 'failed', code, 'operator', `kill exited with code ${code}`]);
    const ok = await requestJobAndFollow(t, 'kill', ['worker']);
    expect(ok.finished).toMatchObject({ outcome: 'completed', exitCode: 0 });
    expect(await row(ok.jobId)).toEqual(['kill', 'completed', 0, 'operator', 'services: worker']);
    await restore();
  });

  it('pull: completed 0; failed with the exit code of compose pull', async () => {
    const ok = await requestJobAndFollow(t, 'pull', ['worker']);
    expect(ok.finished).toMatchObject({ outcome: 'completed', exitCode: 0 });
    expect(await row(ok.jobId)).toEqual(['pull', 'completed', 0, 'operator', 'services: worker']);
    const bad = await failingJob('pull', ['worker'], 'POST', 'images/create');
    const code = expectComposeFailure(bad.finished);
    expect(await row(bad.jobId)).toEqual(['pull', 'failed', code, 'operator', `pull exited with code ${code}`]);
  });

  it('apply-config: completed 0; failed with the exit code of the recreate', async () => {
    const h = { authorization: `Bearer ${await t.token('operator')}` };
    const put = await t.app.inject({ method: 'PUT', url: '/api/deployment/config', headers: h, payload: { set: { ADMIN_EMAIL: 'audit@example.com' } } });
    expect(put.statusCode, put.body).toBe(202);
    const ok = await requestJobAndFollow(t, 'apply-config', ['worker']);
    expect(ok.finished).toMatchObject({ outcome: 'completed', exitCode: 0 });
    expect(await row(ok.jobId)).toEqual(['apply-config', 'completed', 0, 'operator', 'services: worker']);
    // The engine refuses to create the recreated container.
    const bad = await failingJob('apply-config', ['worker'], 'POST', 'containers/create');
    const code = expectComposeFailure(bad.finished);
    expect(await row(bad.jobId)).toEqual(['apply-config', 'failed', code, 'operator', `recreate exited with code ${code}`]);
    await restore();
  });

  it('deploy: completed 0; failed at up after a good pull with up\'s code; null when cancelled during up or when preparing fails', async () => {
    const ok = await requestJobAndFollow(t, 'deploy');
    expect(ok.finished).toMatchObject({ outcome: 'completed', exitCode: 0 });
    expect(await row(ok.jobId)).toEqual(['deploy', 'completed', 0, 'operator', 'all services']);

    // A stopped service gives `up` a container to start; the engine refuses to start it.
    await platform.compose(['stop', '-t', '1', 'worker']);
    const bad = await failingJob('deploy', undefined, 'POST', 'containers/[^/]+/start');
    const code = expectComposeFailure(bad.finished);
    expect(bad.events.filter((e) => e.event === 'phase').map((e) => e.data.phase)).toEqual(['started', 'prepare', 'pull', 'up']);
    expect(await row(bad.jobId)).toEqual(['deploy', 'failed', code, 'operator', `up exited with code ${code}`]);

    // Cancelled while up waits on the engine, after a pull that exited 0: no exit code.
    const held = hold('POST', 'containers/[^/]+/start');
    const jobId = await requestJob(t, 'deploy');
    await held.hit();
    await waitForJobEvent(t.db.database.db, jobId, phaseEvent('up'), 'phase up');
    const cancelId = await cancel(jobId);
    const events = await followJob(t, jobId);
    expect(events.some((e) => e.event === 'phase' && e.data.phase === 'pull')).toBe(true);
    expect(events.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'failed', state: 'cancelled', exitCode: null } });
    expect(await row(jobId)).toEqual(['deploy', 'failed', null, 'operator', 'cancelled by admin']);
    await followJob(t, cancelId);
    expect(await row(cancelId)).toEqual(['cancel-job', 'completed', null, 'admin', `cancelled job ${jobId}`]);
    held.release();
    await restore();

    // The templates cannot be fetched: no process ran, no exit code.
    templateMode.mode = 'missing';
    const noTemplates = await requestJobAndFollow(t, 'deploy');
    expect(noTemplates.finished).toMatchObject({ outcome: 'failed', state: 'failed', exitCode: null });
    const [kind, status, exitCode, actor, detail] = await row(noTemplates.jobId);
    expect([kind, status, exitCode, actor]).toEqual(['deploy', 'failed', null, 'operator']);
    expect(detail).toMatch(/404/);
  });

  it('deploy while preparing keeps the hung guard\'s deadline as a timestamp on the status row', async () => {
    templateMode.mode = 'hold';
    const jobId = await requestJob(t, 'deploy');
    await eventually(() => templateMode.waiting.length > 0, 'the deploy to ask for its templates', 30_000, 100);
    expect(templateMode.waiting.length).toBeGreaterThan(0);
    const read = () => t.db.database.db.selectFrom('deployment_job_status').select(['hung_deadline', 'snapshot']).where('job_id', '=', jobId).executeTakeFirstOrThrow();
    const status = await eventually(async () => {
      const s = await read();
      return s.hung_deadline ? s : null;
    }, 'the hung deadline on the status row', 5_000, 100);
    expect((status.snapshot as { value: unknown }).value).toEqual({ preparing: 'watching' });
    const ahead = new Date(status.hung_deadline!).getTime() - Date.now();
    expect(ahead).toBeGreaterThan(14 * 60_000);
    expect(ahead).toBeLessThanOrEqual(15 * 60_000);
    const cancelId = await cancel(jobId);
    const events = await followJob(t, jobId);
    expect(events.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'failed', state: 'cancelled', exitCode: null } });
    expect(await row(jobId)).toEqual(['deploy', 'failed', null, 'operator', 'cancelled by admin']);
    await followJob(t, cancelId);
  });

  it('cancel-job: completed (above); failed when its target has already ended', async () => {
    const done = await requestJobAndFollow(t, 'restart', ['web']);
    // The target ends between the API's check and the controller: the request as the API writes it.
    const cancelId = await createJob(t.db.database.db, { kind: 'cancel-job', params: { targetJobId: done.jobId }, actor: { id: 'admin' } });
    const events = await followJob(t, cancelId);
    expect(events.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'failed', exitCode: null } });
    expect(await row(cancelId)).toEqual(['cancel-job', 'failed', null, 'admin', `job ${done.jobId} had already ended (completed)`]);
  });

  it('migrate-host: completed 0; failed with the script\'s exit code when the host\'s Docker is down', async () => {
    // The runner's attach is a hijacked stream the engine gate does not pass: this installer talks
    // to the engine directly, with a database of its own.
    const m = await startTestApp({
      controllers: true,
      env: {
        PLATFORM_DIR: platform.dir,
        PLATFORM_PROJECT: platform.project,
        PLATFORM_URL: 'https://platform.example.com',
        MIGRATE_HOST_SCRIPT_PATH: scriptPath,
        MIGRATE_RUNNER_IMAGE: installerImage,
        MIGRATE_RUNNER_PRIVILEGED: 'false',
        MIGRATE_RUNNER_PID_MODE: `container:${host.name}`,
        MIGRATE_HOST_STOP_TIMEOUT: '3',
      },
    });
    try {
      await migrateHost(m);
    } finally {
      await m.close();
    }
  });
});

async function migrateHost(m: TestApp): Promise<void> {
  const rowOf = async (jobId: string): Promise<Row> => {
    const rows = await m.db.database.db.selectFrom('deployment_actions').selectAll().where('job_id', '=', jobId).execute();
    expect(rows).toHaveLength(1);
    const r = rows[0]!;
    return [r.kind, r.status, r.exit_code, r.actor, r.detail];
  };
  const admin = { authorization: `Bearer ${await m.token('admin')}` };
  expect((await m.app.inject({ method: 'POST', url: '/api/migrate/vm-user', headers: admin, payload: { vmUser: 'ubuntu' } })).statusCode).toBe(200);
  const runHost = async () => {
    const res = await m.app.inject({ method: 'POST', url: '/api/migrate/run-host', headers: admin });
    expect(res.statusCode, res.body).toBe(202);
    const { jobId } = res.json() as { jobId: string };
    return { jobId, events: await followJob(m, jobId) };
  };
  const ok = await runHost();
  expect(ok.events.at(-1), JSON.stringify(ok.events.slice(-5))).toMatchObject({ event: 'finished', data: { outcome: 'completed', exitCode: 0 } });
  expect(await rowOf(ok.jobId)).toEqual(['migrate-host', 'completed', 0, 'admin', `run ${scriptPath} on the host`]);

  await host.sh('systemctl stop docker.service');
  const bad = await runHost();
  expect(bad.events.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'failed', exitCode: 1 } });
  expect(bad.events.some((e) => e.event === 'output' && String(e.data.line).startsWith('docker.service is not active'))).toBe(true);
  expect(await rowOf(bad.jobId)).toEqual(['migrate-host', 'failed', 1, 'admin', 'migrate-host.sh exited with code 1']);
}

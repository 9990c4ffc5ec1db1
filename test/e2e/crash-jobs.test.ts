// Crash injection for the job chart: the backend (a host process on the real engine, compose CLI
// and Postgres) is driven into every state of the job chart, and into the moments just after a
// final state is reached while its outcome is being stored, then killed with SIGKILL and started
// again. The state is held from outside: the engine gate (test/helpers/e2e/engine-gate.ts) holds the
// compose or engine request of the step, a slow template server holds a deploy's preparation, and
// a lock taken by another database session holds the backend's next write. After each restart the
// job must be in the right final state with a clear detail, its events contiguous from 1 and
// ending with exactly one `finished`, no audit row `started`, and no compose process left.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry, ROOT, type Running } from '../helpers/shared/process.ts';
import { docker, REGISTRY, run, startPlatform, uniqueName, type PlatformProject } from '../helpers/e2e/rig.ts';
import { parseSse } from '../helpers/shared/sse.ts';
import { EngineGate, type Hold } from '../helpers/e2e/engine-gate.ts';
import { HeldTemplateServer } from '../helpers/e2e/template-server.ts';
import { CrashTally, holdDatabase, requireCrashPoints, waitForChartState, type DbHold } from '../helpers/e2e/crash.ts';
import { createUser } from '../../src/state/users.ts';
import { jobMachine } from '../../machines/job.machine.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { phaseEvent, storedJobEvents, waitForJobEvent } from '../helpers/e2e/jobs.ts';

const INTERRUPTED = 'interrupted: the backend restarted while the job was running';
/** Compose talks to the engine as `compose/<version>` (or the docker CLI's agent); the backend's own calls do not. */
const COMPOSE_UA = /compose|Docker-Client/i;

const tally = new CrashTally('job');
const covered = new Set<string>();
let gate: EngineGate;
let db: TestDatabase;
let platform: PlatformProject;
const templates = new HeldTemplateServer();
let dataDir: string;
let image: string | undefined;
let proc: Running | undefined;
/** HUNG_JOB_MINUTES of the next boot (1 only for the hung crash point). */
let hungMinutes = 15;
let base = '';
let token = '';
const dbHolds: DbHold[] = [];
const gateHolds: Hold[] = [];

const env = () => ({
  DATABASE_URL: db.url,
  DATA_DIR: dataDir,
  PORT: '0',
  HOST: '127.0.0.1',
  PLATFORM_DIR: platform.dir,
  PLATFORM_PROJECT: platform.project,
  PLATFORM_TEMPLATES_URL: templates.url,
  // The backend's engine client and the compose CLI it spawns (told by the setting) both go through the gate.
  DOCKER_SOCKET: gate.socketPath,
  LOG_LEVEL: 'info',
  HUNG_JOB_MINUTES: String(hungMinutes),
});

async function boot(): Promise<void> {
  proc = runEntry('src/main.ts', env());
  base = await proc.url;
  const res = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'ops', password: 'ops-password-1' }) });
  expect(res.status).toBe(200);
  token = ((await res.json()) as { token: string }).token;
}

const h = () => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' });

async function post(action: string, services?: string[]): Promise<string> {
  const res = await fetch(`${base}/api/deployment/jobs`, { method: 'POST', headers: h(), body: JSON.stringify(services ? { action, services } : { action }) });
  expect(res.status, await res.clone().text()).toBe(202);
  return ((await res.json()) as { jobId: string }).jobId;
}

/** SIGKILL, then everything that held the backend lets go, then a fresh backend. */
async function crashAndRestart(): Promise<void> {
  await proc!.stop('SIGKILL');
  await releaseHolds();
  await boot();
}

async function releaseHolds(): Promise<void> {
  for (const hd of dbHolds.splice(0)) await hd.release();
  for (const g of gateHolds.splice(0)) g.release();
  templates.drop();
}

/** Keeps `hold` in `list`, so that a crash releases it; returns it. */
const kept = <T>(list: T[], hold: T): T => (list.push(hold), hold);
const holdGate = (method: string, p: RegExp, userAgent?: RegExp) => kept(gateHolds, gate.hold({ method, path: p, ...(userAgent ? { userAgent } : {}) }));
const holdDb = async (statements: string[], values: unknown[][] = []) => kept(dbHolds, await holdDatabase(db.url, statements, values));

const jobEvents = (jobId: string) => storedJobEvents(db.database.db, jobId);

async function composeProcesses(): Promise<string> {
  return (await run('pgrep', ['-a', '-f', `compose.*-p ${platform.project}`])).stdout.trim();
}

/**
 * The outcome after a restart: the job ended as expected, its stream and its stored events are
 * contiguous and end with exactly one `finished`, its audit rows are closed, nothing runs or waits,
 * no audit row anywhere is `started`, and no compose process of the platform is left.
 */
async function expectConverged(jobId: string, want: { phase: 'completed' | 'failed'; state: string; detail: string | RegExp | null }): Promise<void> {
  let job: { phase: string; detail: string | null } = { phase: 'unknown', detail: null };
  await eventually(async () => {
    job = (await (await fetch(`${base}/api/deployment/jobs/${jobId}`, { headers: h() })).json()) as typeof job;
    return job.phase !== 'running' && job.phase !== 'queued';
  }, `job ${jobId} to end`, 20_000, 100).catch(() => {}); // a job that never ends fails the phase check below, with its row
  expect(job.phase, JSON.stringify(job)).toBe(want.phase);
  if (want.detail instanceof RegExp) expect(job.detail).toMatch(want.detail);
  else expect(job.detail).toBe(want.detail);

  const res = await fetch(`${base}/api/deployment/jobs/${jobId}/logs`, { headers: { ...h(), accept: 'text/event-stream' }, signal: AbortSignal.timeout(20_000) });
  const stream = parseSse(await res.text().catch((err: Error) => { throw new Error(`the stream of job ${jobId} did not end (no finished event?): ${err.message}`); }));
  const seqs = stream.map((e) => Number(e.id));
  expect(seqs, 'stream seqs contiguous from 1').toEqual(seqs.map((_, i) => i + 1));
  expect(stream.filter((e) => e.event === 'finished')).toHaveLength(1);
  expect(stream.at(-1)).toMatchObject({ event: 'finished', data: { outcome: want.phase, state: want.state } });
  const stored = await jobEvents(jobId);
  expect(stored.map((e) => e.seq), 'stored seqs contiguous from 1').toEqual(stored.map((_, i) => i + 1));
  expect(stored.filter((e) => e.type === 'finished')).toHaveLength(1);
  expect(stored.at(-1)?.type).toBe('finished');

  const audit = await db.database.db.selectFrom('deployment_actions').select(['status', 'detail', 'exit_code']).where('job_id', '=', jobId).execute();
  expect(audit, 'one audit row').toHaveLength(1);
  expect(audit[0]!.status).toBe(want.phase);
  // A job that ended without its process ending (interrupted by the restart) has no exit code.
  if (want.state === 'interrupted') expect(audit[0]!.exit_code).toBeNull();

  await expectQuiet();
}

/** Nothing left half done anywhere: no job running or queued, no audit row started, no compose process. */
async function expectQuiet(): Promise<void> {
  await eventually(async () => {
    const open = await db.database.db.selectFrom('deployment_job_status').select(['job_id', 'phase']).where('phase', 'in', ['queued', 'running']).execute();
    const started = await db.database.db.selectFrom('deployment_actions').select(['id', 'kind', 'job_id']).where('status', '=', 'started').execute();
    const procs = await composeProcesses();
    if (!open.length && !started.length && !procs) return true;
    throw new Error(`not quiet: jobs ${JSON.stringify(open)}, audit rows started ${JSON.stringify(started)}, compose processes:\n${procs}`);
  }, 'nothing left half done', 20_000, 200);
}

/** Registers a crash point for a chart state (or a moment after a final one). */
function crashPoint(state: string, name: string, fn: () => Promise<void>, timeout = 120_000): void {
  covered.add(state);
  it(`${state}: ${name}`, () => tally.point(`${state}: ${name}`, fn), timeout);
}

beforeAll(async () => {
  gate = new EngineGate(path.join(mkdtempSync(path.join(tmpdir(), 'engine-gate-')), 'docker.sock'));
  await gate.start();
  // The platform's image comes from the registry, so a deploy's pull really talks to it.
  image = `${REGISTRY}/${uniqueName('crash-jobs')}/busybox:latest`;
  await docker(['tag', 'installer-rig/busybox:latest', image]);
  await docker(['push', '-q', image]);
  platform = await startPlatform({ env: { PLATFORM_IMAGE: image } });
  // The same .env the platform runs with, so a deploy changes nothing but what the test makes it.
  await templates.start({ 'docker-compose.yml': path.join(ROOT, 'deploy/rig/demo-platform/docker-compose.yml'), '.env.template': path.join(platform.dir, '.env') });
  db = await createTestDatabase();
  await createUser(db.database.db, { username: 'ops', password: 'ops-password-1', role: 'operator' });
  dataDir = mkdtempSync(path.join(tmpdir(), 'installer-crash-jobs-'));
  await boot();
});

afterAll(async () => {
  await proc?.stop('SIGKILL');
  await releaseHolds();
  // Compose processes a dead backend of this file left (none when every point converged).
  if (platform) {
    const pids = (await run('pgrep', ['-f', `compose.*-p ${platform.project} `])).stdout.split('\n').filter(Boolean).map(Number);
    for (const pid of pids) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone meanwhile */
      }
    }
  }
  await platform?.remove();
  await gate?.close();
  if (gate) rmSync(path.dirname(gate.socketPath), { recursive: true, force: true });
  templates.close();
  await db?.drop();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  if (image) {
    // The pushed platform image: its manifest out of the registry, its tag off the engine.
    const digest = (await run('docker', ['image', 'inspect', '-f', '{{range .RepoDigests}}{{println .}}{{end}}', image])).stdout.split('\n').find((l) => l.includes('@'))?.split('@')[1];
    const repo = image.slice(REGISTRY.length + 1, image.lastIndexOf(':'));
    if (digest) await fetch(`http://${REGISTRY}/v2/${repo}/manifests/${digest}`, { method: 'DELETE' }).catch(() => {});
    await run('docker', ['rmi', image]);
  }
  console.log(tally.summary());
});

// A crash point that failed half way must not leave a hold armed for the next one.
afterEach(releaseHolds);

describe('kill -9 of the backend in every state of the job chart', () => {
  it('every non-final state of the job chart has a crash point below', () => {
    // `covered` is filled as the crash points register (before any test runs).
    const need = requireCrashPoints(jobMachine, [...covered].filter((s) => !s.includes(' ')));
    expect(need.length).toBeGreaterThan(0);
  });

  crashPoint('preparing.watching', 'deploy waiting for its templates', async () => {
    templates.armed = true;
    const id = await post('deploy');
    await waitForChartState(base, token, 'job', id, 'preparing.watching');
    await new Promise((r) => setTimeout(r, 100));
    expect(templates.waiting.length).toBeGreaterThan(0);
    await crashAndRestart();
    await expectConverged(id, { phase: 'failed', state: 'interrupted', detail: INTERRUPTED });
  });

  crashPoint('running.watching', 'restart: compose waiting on the engine', async () => {
    const hold = holdGate('POST', /^(\/v[\d.]+)?\/containers\/[^/]+\/restart/, COMPOSE_UA);
    const id = await post('restart', ['worker']);
    await waitForChartState(base, token, 'job', id, 'running.watching');
    await hold.hit();
    expect(await composeProcesses()).not.toBe('');
    await crashAndRestart();
    await expectConverged(id, { phase: 'failed', state: 'interrupted', detail: INTERRUPTED });
  });

  crashPoint('running.watching', 'deploy step pull: compose pulling', async () => {
    const hold = holdGate('POST', /^(\/v[\d.]+)?\/images\/create/, COMPOSE_UA);
    const id = await post('deploy');
    await hold.hit();
    await waitForChartState(base, token, 'job', id, 'running.watching');
    await waitForJobEvent(db.database.db, id, phaseEvent('pull'), 'phase pull');
    await crashAndRestart();
    await expectConverged(id, { phase: 'failed', state: 'interrupted', detail: INTERRUPTED });
  });

  crashPoint('running.watching', 'deploy step up: compose starting a container', async () => {
    // A stopped service gives `up` something to do on the engine.
    await platform.compose(['stop', '-t', '1', 'worker']);
    const hold = holdGate('POST', /^(\/v[\d.]+)?\/containers\/[^/]+\/start/, COMPOSE_UA);
    const id = await post('deploy');
    await hold.hit();
    await waitForJobEvent(db.database.db, id, phaseEvent('up'), 'phase up');
    await waitForChartState(base, token, 'job', id, 'running.watching');
    await crashAndRestart();
    await expectConverged(id, { phase: 'failed', state: 'interrupted', detail: INTERRUPTED });
    await platform.compose(['up', '-d', '--wait', '--wait-timeout', '60']);
  });

  crashPoint('running.watching', 'pull step prune: the engine pruning images', async () => {
    const hold = holdGate('POST', /^(\/v[\d.]+)?\/images\/prune/);
    const id = await post('pull');
    await hold.hit();
    await waitForJobEvent(db.database.db, id, phaseEvent('prune'), 'phase prune');
    await waitForChartState(base, token, 'job', id, 'running.watching');
    await crashAndRestart();
    await expectConverged(id, { phase: 'failed', state: 'interrupted', detail: INTERRUPTED });
  });

  crashPoint('running.watching', 'compose just spawned, its pid not yet stored', async () => {
    templates.armed = true;
    const hold = holdGate('POST', /^(\/v[\d.]+)?\/images\/create/, COMPOSE_UA);
    const id = await post('deploy');
    await waitForChartState(base, token, 'job', id, 'preparing.watching');
    // The status row is locked: the runner pid written right after compose is spawned waits.
    await holdDb(['select 1 from deployment_job_status where job_id = $1 for update'], [[id]]);
    templates.release();
    await hold.hit().catch(async () => {
      throw new Error(`compose never pulled; events: ${JSON.stringify(await jobEvents(id))}`);
    });
    await crashAndRestart();
    await expectConverged(id, { phase: 'failed', state: 'interrupted', detail: INTERRUPTED });
  });

  for (const lands of [false, true]) {
    crashPoint('completed', `outcome not yet stored (status row locked), the write in flight ${lands ? 'lands after the kill' : 'is lost'}`, async () => {
      const hold = holdGate('POST', /^(\/v[\d.]+)?\/containers\/[^/]+\/restart/, COMPOSE_UA);
      const id = await post('restart', ['worker']);
      await hold.hit();
      const hd = await holdDb(['select 1 from deployment_job_status where job_id = $1 for update'], [[id]]);
      hold.release();
      await hd.waiting(/set "phase" = \$1/);
      await proc!.stop('SIGKILL');
      await hd.release({ landInFlight: lands });
      await crashAndRestart();
      if (lands) await expectConverged(id, { phase: 'completed', state: 'completed', detail: null });
      else await expectConverged(id, { phase: 'failed', state: 'interrupted', detail: INTERRUPTED });
    });
  }

  crashPoint('completed', 'job stored, audit row not yet', async () => {
    const hold = holdGate('POST', /^(\/v[\d.]+)?\/containers\/[^/]+\/restart/, COMPOSE_UA);
    const id = await post('restart', ['worker']);
    await hold.hit();
    const hd = await holdDb(['select 1 from deployment_actions where job_id = $1 for update'], [[id]]);
    hold.release();
    await hd.waiting(/update "deployment_actions"/);
    await crashAndRestart();
    await expectConverged(id, { phase: 'completed', state: 'completed', detail: null });
  });

  crashPoint('completed', 'audit row stored, finished event not yet', async () => {
    const hold = holdGate('POST', /^(\/v[\d.]+)?\/containers\/[^/]+\/restart/, COMPOSE_UA);
    const id = await post('restart', ['worker']);
    await hold.hit();
    const audit = await holdDb(['select 1 from deployment_actions where job_id = $1 for update'], [[id]]);
    hold.release();
    await audit.waiting(/update "deployment_actions"/);
    // Every event so far is stored; now the event table takes no inserts, and the audit row goes.
    const events = await holdDb(['lock table deployment_job_events in exclusive mode']);
    await audit.release({ landInFlight: true }); // the backend lives on: its audit write goes through
    await events.waiting(/insert into "deployment_job_events"/);
    await crashAndRestart();
    await expectConverged(id, { phase: 'completed', state: 'completed', detail: null });
  });

  crashPoint('failed', 'a failed deploy stored, its audit row not yet', async () => {
    templates.armed = true;
    try {
      const id = await post('deploy');
      await waitForChartState(base, token, 'job', id, 'preparing.watching');
      const hd = await holdDb(['select 1 from deployment_actions where job_id = $1 for update'], [[id]]);
      templates.failWith = 404;
      templates.release();
      await hd.waiting(/update "deployment_actions"/);
      await crashAndRestart();
      await expectConverged(id, { phase: 'failed', state: 'failed', detail: /^fetching the template docker-compose\.yml from http:\/\/127\.0\.0\.1:\d+\/docker-compose\.yml failed: HTTP 404$/ });
    } finally {
      templates.failWith = null;
    }
  });

  crashPoint('cancelled', 'cancelled job stored, its audit row not yet; the cancel request running', async () => {
    const hold = holdGate('POST', /^(\/v[\d.]+)?\/containers\/[^/]+\/restart/, COMPOSE_UA);
    const id = await post('restart', ['worker']);
    await hold.hit();
    await waitForChartState(base, token, 'job', id, 'running.watching');
    const hd = await holdDb(['select 1 from deployment_actions where job_id = $1 for update'], [[id]]);
    const res = await fetch(`${base}/api/deployment/jobs/${id}/cancel`, { method: 'POST', headers: h(), body: '{}' });
    expect(res.status, await res.clone().text()).toBe(202);
    const cancelId = ((await res.json()) as { jobId: string }).jobId;
    await hd.waiting(/update "deployment_actions"/);
    // The cancel request itself ends as soon as the chart has: let it, so the outcome is known.
    await eventually(
      async () => (await db.database.db.selectFrom('deployment_job_events').select('seq').where('job_id', '=', cancelId).where('type', '=', 'finished').execute()).length > 0,
      'the cancel request to finish',
      20_000,
    );
    await crashAndRestart();
    await expectConverged(id, { phase: 'failed', state: 'cancelled', detail: 'cancelled by ops' });
    await expectConverged(cancelId, { phase: 'completed', state: 'completed', detail: `cancelled job ${id}` });
  });

  crashPoint('running.watching', 'then killed again during boot reconciliation', async () => {
    const hold = holdGate('POST', /^(\/v[\d.]+)?\/containers\/[^/]+\/restart/, COMPOSE_UA);
    const id = await post('restart', ['worker']);
    await hold.hit();
    await waitForChartState(base, token, 'job', id, 'running.watching');
    await proc!.stop('SIGKILL');
    for (const g of gateHolds.splice(0)) g.release();
    // The next boot closes the job: hold it between the job row and its audit row, and kill it there.
    const hd = await holdDb(['select 1 from deployment_actions where job_id = $1 for update'], [[id]]);
    proc = runEntry('src/main.ts', env());
    await hd.waiting(/update "deployment_actions"/);
    await proc.stop('SIGKILL');
    await hd.release();
    await boot();
    await expectConverged(id, { phase: 'failed', state: 'interrupted', detail: INTERRUPTED });
  });

  crashPoint('hung', 'no output for the hung timeout, the job stored, its audit row not yet', async () => {
    hungMinutes = 1;
    try {
      await crashAndRestart(); // a backend with a one-minute hung guard
      const hold = holdGate('POST', /^(\/v[\d.]+)?\/containers\/[^/]+\/restart/, COMPOSE_UA);
      const id = await post('restart', ['worker']);
      await hold.hit();
      await waitForChartState(base, token, 'job', id, 'running.watching');
      const hd = await holdDb(['select 1 from deployment_actions where job_id = $1 for update'], [[id]]);
      await hd.waiting(/update "deployment_actions"/, 100_000);
      hungMinutes = 15;
      await crashAndRestart();
      await expectConverged(id, { phase: 'failed', state: 'hung', detail: 'No output for 1 minutes — aborted as hung' });
    } finally {
      hungMinutes = 15;
    }
  }, 240_000);

  it('reports the crash points: every one converged', () => {
    console.log(tally.summary());
    expect(tally.injected).toBeGreaterThanOrEqual(covered.size);
    expect(tally.converged).toBe(tally.injected);
  });
});


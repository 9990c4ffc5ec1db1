// The API and the controllers as separate processes on one Postgres (INSTALLER_ROLE): two API
// processes and one controllers process, real child processes of the same build. A job started
// through one API streams through the other, live, with every event once and in order, also across
// a reconnect with Last-Event-ID to the first; a cancel sent to either reaches the job in the
// controllers' process; status and the self-update check answer from both; with no controllers
// anywhere, a self-update request is refused once unclaimed.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cpSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry, ROOT, type Running } from '../helpers/shared/process.ts';
import { docker, run } from '../helpers/e2e/rig.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { createUser } from '../../src/state/users.ts';

const project = `split-${randomBytes(3).toString('hex')}`;
const secrets = { JWT_SECRET: randomBytes(24).toString('hex'), ENCRYPTION_KEY: randomBytes(24).toString('hex'), SERVICE_TOKEN: randomBytes(24).toString('hex') };
let dir: string;
let db: TestDatabase;
const procs: Record<string, Running> = {};
const urls: Record<string, string> = {};
let token: string;

function start(name: string, role: 'api' | 'controllers'): Running {
  const dataDir = mkdtempSync(path.join(tmpdir(), `installer-${name}-`));
  const p = runEntry('src/main.ts', {
    ...secrets, INSTALLER_ROLE: role, DATABASE_URL: db.url, DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1',
    PLATFORM_DIR: dir, PLATFORM_PROJECT: project, LOG_LEVEL: 'info', MIGRATE_ON_BOOT: 'false',
  });
  procs[name] = p;
  return p;
}

const h = () => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' });

interface Event {
  seq: number;
  type: string;
  payload: Record<string, unknown>;
}

/**
 * Reads a job's SSE stream from `base`, calling `onEvent` for each event as it arrives; resolves
 * with the events at `finished`, or when `stopAfter` returns true (the connection is then dropped).
 */
async function follow(base: string, jobId: string, opts: { lastEventId?: number; stopAfter?: (e: Event) => boolean } = {}): Promise<Event[]> {
  const ctl = new AbortController();
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, accept: 'text/event-stream' };
  if (opts.lastEventId !== undefined) headers['last-event-id'] = String(opts.lastEventId);
  const res = await fetch(`${base}/api/deployment/jobs/${jobId}/logs`, { headers, signal: AbortSignal.any([ctl.signal, AbortSignal.timeout(120_000)]) });
  expect(res.status).toBe(200);
  const got: Event[] = [];
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buf += decoder.decode(chunk, { stream: true });
      let cut: number;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        const data = block.split('\n').find((l) => l.startsWith('data: '));
        if (!data) continue; // a heartbeat
        const d = JSON.parse(data.slice(6)) as { seq: number; type: string } & Record<string, unknown>;
        const e = { seq: d.seq, type: d.type, payload: d };
        got.push(e);
        if (e.type === 'finished' || opts.stopAfter?.(e)) {
          ctl.abort();
          return got;
        }
      }
    }
  } catch (err) {
    if (!ctl.signal.aborted) throw err;
  }
  return got;
}

async function storedSeqs(jobId: string): Promise<number[]> {
  const rows = await db.database.db.selectFrom('deployment_job_events').select('seq').where('job_id', '=', jobId).orderBy('seq').execute();
  return rows.map((r) => r.seq);
}

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'split-'));
  cpSync(path.join(ROOT, 'test/fixtures/stubborn/docker-compose.yml'), path.join(dir, 'docker-compose.yml'));
  await docker(['compose', '-p', project, '-f', path.join(dir, 'docker-compose.yml'), 'up', '-d'], { cwd: dir });
  db = await createTestDatabase();
  await createUser(db.database.db, { username: 'ops', password: 'ops-password-1', role: 'admin' });
  start('controllers', 'controllers');
  start('api1', 'api');
  start('api2', 'api');
  for (const [name, p] of Object.entries(procs)) urls[name] = await p.url;
  const res = await fetch(`${urls.api1}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'ops', password: 'ops-password-1' }) });
  expect(res.status).toBe(200);
  token = ((await res.json()) as { token: string }).token;
});

afterAll(async () => {
  await Promise.all(Object.values(procs).map((p) => p.stop('SIGKILL')));
  await run('docker', ['compose', '-p', project, '-f', path.join(dir, 'docker-compose.yml'), 'kill'], { cwd: dir });
  await run('docker', ['compose', '-p', project, '-f', path.join(dir, 'docker-compose.yml'), 'down', '-v', '-t', '0'], { cwd: dir });
  await db?.drop();
});

describe('INSTALLER_ROLE: two API processes and one controllers process on one Postgres', () => {
  it('each process says its role; the controllers process answers only its healthcheck', async () => {
    expect(procs.controllers!.output()).toContain('"role":"controllers"');
    expect(procs.api1!.output()).toContain('"role":"api"');
    expect((await fetch(`${urls.controllers}/api/health`)).status).toBe(200);
    expect((await fetch(`${urls.controllers}/api/version`, { headers: h() })).status).toBe(404);
  });

  it('a job started through one API streams live through the other, every event once and in order, across a reconnect', async () => {
    const res = await fetch(`${urls.api1}/api/deployment/jobs`, { method: 'POST', headers: h(), body: JSON.stringify({ action: 'stop' }) });
    expect(res.status, await res.clone().text()).toBe(202);
    const jobId = ((await res.json()) as { jobId: string }).jobId;

    // One uninterrupted stream on API 2, and one that drops after the compose step starts and comes
    // back through API 1 with Last-Event-ID.
    const whole = follow(urls.api2!, jobId);
    const firstPart = await follow(urls.api2!, jobId, { stopAfter: (e) => e.type === 'phase' && e.payload.phase === 'stop' });
    expect(firstPart.at(-1)!.payload.phase).toBe('stop');

    // compose stop now waits out the 120 s grace period of a service that ignores SIGTERM: cancel it
    // through API 2; the controllers' process runs it and must hear of it through the database.
    const cancel = await fetch(`${urls.api2}/api/deployment/jobs/${jobId}/cancel`, { method: 'POST', headers: h(), body: '{}' });
    expect(cancel.status, await cancel.clone().text()).toBe(202);
    const cancelId = ((await cancel.json()) as { jobId: string }).jobId;

    const rest = await follow(urls.api1!, jobId, { lastEventId: firstPart.at(-1)!.seq });
    const all = await whole;
    const stored = await storedSeqs(jobId);
    expect(all.map((e) => e.seq)).toEqual(stored);
    expect([...firstPart, ...rest].map((e) => e.seq)).toEqual(stored);
    expect(stored).toEqual(stored.map((_, i) => i + 1));
    expect(all.at(-1)).toMatchObject({ type: 'finished', payload: { outcome: 'failed', state: 'cancelled', detail: 'cancelled by ops' } });

    const cancelEvents = await follow(urls.api1!, cancelId);
    expect(cancelEvents.at(-1)!.payload).toMatchObject({ outcome: 'completed', detail: `cancelled job ${jobId}` });
  });

  it('status and the self-update check answer from either API process', async () => {
    for (const api of ['api1', 'api2']) {
      const status = await fetch(`${urls[api]}/api/deployment/status`, { headers: h() });
      expect(status.status, `${api}: ${await status.clone().text()}`).toBe(200);
      const body = (await status.json()) as { containers: { service: string }[] };
      expect(body.containers.map((c) => c.service)).toContain('stubborn');
      const check = await fetch(`${urls[api]}/api/system/self-update-check`, { headers: h() });
      expect(check.status, api).toBe(200);
      expect(Object.keys((await check.json()) as object)).toEqual(expect.arrayContaining(['updateAvailable', 'currentDigest', 'remoteDigest', 'composeChanged', 'lastUpdate']));
    }
  });

  it('with no controllers running anywhere, a self-update request is withdrawn unclaimed with a 503', async () => {
    await procs.controllers!.stop('SIGTERM');
    const res = await fetch(`${urls.api2}/api/system/self-update`, { method: 'POST', headers: h(), body: '{}' });
    expect(res.status).toBe(503);
    expect(((await res.json()) as { message: string }).message).toContain('no self-update controller claimed the request');
    // The request is closed, not left in flight: a later one is not refused as a conflict.
    const rows = await eventually(async () => db.database.db.selectFrom('self_update_status').select('phase').execute(), 'the self-update rows');
    expect(rows.map((r) => r.phase)).toEqual(['aborted']);
  });
});

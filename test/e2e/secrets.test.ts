// The four secrets, seeded with known values into a real backend process driving a real platform:
// none of them ever shows in a log line, a job event or the diagnostics bundle, even where the
// test pushes them into places that get printed (a job's compose output, an audit actor, a URL).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry, type Running } from '../helpers/shared/process.ts';
import { REGISTRY, startPlatform, type PlatformProject } from '../helpers/e2e/rig.ts';
import { parseSse, type SseMessage } from '../helpers/shared/sse.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { createUser } from '../../src/state/users.ts';

// Lower case, so that one can stand in an image name and reach compose's own error output.
const SECRETS = {
  JWT_SECRET: 'seeded-jwt-secret-4f1c9a7e2b3d5f60718293a4b5c6d7e8',
  ENCRYPTION_KEY: 'seeded-encryption-key-9b8a7c6d5e4f3a2b1c0d9e8f7a6b',
  SERVICE_TOKEN: 'seeded-service-token-1a2b3c4d5e6f708192a3b4c5d6e7f8',
  DATABASE_PASSWORD: 'seeded-database-password-77e1d2c3b4a5968778695a4b',
};

let db: TestDatabase;
let platform: PlatformProject;
let proc: Running | undefined;
let base: string;
let admin: string;
// A registry that accepts connections and never answers: a pull from it hangs until cancelled.
let silent: Server;
let silentPort: number;
let silentConnections = 0;

beforeAll(async () => {
  silent = createServer(() => void silentConnections++);
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  silentPort = (silent.address() as AddressInfo).port;
  platform = await startPlatform({ up: false });
  db = await createTestDatabase();
  await createUser(db.database.db, { username: 'root', password: 'root-password-1', role: 'admin' });
  const dataDir = mkdtempSync(path.join(tmpdir(), 'installer-secrets-'));
  const files: Record<string, string> = {};
  for (const [name, value] of Object.entries(SECRETS)) {
    const f = path.join(dataDir, name.toLowerCase());
    writeFileSync(f, `${value}\n`, { mode: 0o600 });
    files[`${name}_FILE`] = f;
  }
  proc = runEntry('src/main.ts', {
    ...files,
    DATABASE_URL: db.url,
    DATA_DIR: dataDir,
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'trace',
    PLATFORM_DIR: platform.dir,
    PLATFORM_PROJECT: platform.project,
  });
  base = await proc.url;
  const res = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'root', password: 'root-password-1' }) });
  admin = ((await res.json()) as { token: string }).token;
});
afterAll(async () => {
  await proc?.stop('SIGKILL');
  await platform?.remove();
  await db?.drop();
  silent?.close();
});

const json = (token: string, extra: Record<string, string> = {}) => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json', ...extra });

async function waitFinished(jobId: string): Promise<SseMessage[]> {
  const res = await fetch(`${base}/api/deployment/jobs/${jobId}/logs`, { headers: { authorization: `Bearer ${admin}` }, signal: AbortSignal.timeout(240_000) });
  expect(res.status).toBe(200);
  return parseSse(await res.text());
}

describe('secrets seeded with known values', () => {
  it('never appear in a log line, a job event or the diagnostics bundle', async () => {
    // 1. Compose prints the image reference it cannot pull: make that reference carry a secret.
    const put = await fetch(`${base}/api/deployment/config`, {
      method: 'PUT',
      headers: json(admin),
      body: JSON.stringify({ set: { PLATFORM_IMAGE: `${REGISTRY}/${SECRETS.ENCRYPTION_KEY}:latest` } }),
    });
    expect(put.status).toBe(202);
    const apply = await fetch(`${base}/api/deployment/jobs`, { method: 'POST', headers: json(admin), body: JSON.stringify({ action: 'apply-config' }) });
    expect(apply.status).toBe(202);
    const applyId = ((await apply.json()) as { jobId: string }).jobId;
    const applyEvents = await waitFinished(applyId);
    expect(applyEvents.at(-1)?.event).toBe('finished');
    expect(applyEvents.at(-1)?.data.outcome).toBe('failed');
    // The pull error was streamed, with the secret replaced.
    const output = applyEvents.filter((e) => e.event === 'output').map((e) => String(e.data.line)).join('\n');
    expect(output).toContain(`${REGISTRY}/[REDACTED]:latest`);

    // 2. The control plane acts for a user whose id is the database password and cancels a pull
    //    that hangs on a registry that never answers: the id lands in the job's detail and events.
    const put2 = await fetch(`${base}/api/deployment/config`, {
      method: 'PUT',
      headers: json(admin),
      body: JSON.stringify({ set: { PLATFORM_IMAGE: `127.0.0.1:${silentPort}/${SECRETS.ENCRYPTION_KEY}:latest` } }),
    });
    expect(put2.status).toBe(202);
    const apply2 = await fetch(`${base}/api/deployment/jobs`, { method: 'POST', headers: json(admin), body: JSON.stringify({ action: 'apply-config' }) });
    await waitFinished(((await apply2.json()) as { jobId: string }).jobId);
    const svc = json(SECRETS.SERVICE_TOKEN, { 'x-actor-user-id': SECRETS.DATABASE_PASSWORD });
    const pull = await fetch(`${base}/api/deployment/jobs`, { method: 'POST', headers: svc, body: JSON.stringify({ action: 'pull' }) });
    expect(pull.status).toBe(202);
    const pullId = ((await pull.json()) as { jobId: string }).jobId;
    await eventually(async () => silentConnections > 0, 'the pull to reach the silent registry', 60_000);
    const cancel = await fetch(`${base}/api/deployment/jobs/${pullId}/cancel`, {
      method: 'POST',
      headers: { authorization: `Bearer ${SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': SECRETS.DATABASE_PASSWORD },
    });
    expect(cancel.status, await cancel.clone().text()).toBeLessThan(300);
    const pullEvents = await waitFinished(pullId);
    expect(pullEvents.at(-1)?.event).toBe('finished');
    expect(pullEvents.at(-1)?.data.detail).toBe('cancelled by platform:[REDACTED]');

    // 3. Secrets in a URL and a sign-in attempt: both reach the request log.
    await (await fetch(`${base}/api/nothing-here?a=${SECRETS.JWT_SECRET}&b=${SECRETS.SERVICE_TOKEN}`)).arrayBuffer();
    await (await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: SECRETS.JWT_SECRET, password: SECRETS.ENCRYPTION_KEY }) })).arrayBuffer();

    // The bundle, with the log lines it keeps.
    const diag = await fetch(`${base}/api/system/diagnostics`, { headers: { authorization: `Bearer ${admin}` } });
    expect(diag.status).toBe(200);
    const bundle = await diag.text();
    const parsed = JSON.parse(bundle) as { logs: string[]; jobs: { recent: { jobId: string }[] }; settings: Record<string, string> };
    expect(parsed.jobs.recent.map((j) => j.jobId)).toEqual(expect.arrayContaining([applyId, pullId]));
    expect(parsed.settings.ENCRYPTION_KEY).toMatch(/^\[set from file /);
    expect(parsed.logs.join('\n')).toContain('[REDACTED]');

    // Every stored job event, as the database holds it.
    const stored = await sql<{ payload: string }>`select payload::text as payload from deployment_job_events`.execute(db.database.db);
    const events = stored.rows.map((r) => r.payload).join('\n');
    expect(stored.rows.length).toBeGreaterThan(3);

    await eventually(async () => proc!.output().includes('nothing-here'), 'the probe request to be logged');
    const logs = proc!.output();
    expect(logs).toContain('[REDACTED]');
    for (const [name, value] of Object.entries(SECRETS)) {
      expect(bundle.includes(value), `${name} in the diagnostics bundle`).toBe(false);
      expect(events.includes(value), `${name} in a job event`).toBe(false);
      expect(logs.includes(value), `${name} in a log line`).toBe(false);
    }
    // The job events did carry the seeded values, scrubbed: the test reached the places it means to.
    expect(events).toContain('[REDACTED]');
  });
});

// The installer writes its address, its current service token and its HTTPS certificate's fingerprint
// into the platform's .env on deploy and apply-config (INSTALLER_URL, INSTALLER_SERVICE_TOKEN,
// INSTALLER_TLS_FINGERPRINT256), for the control plane to call
// it with. A real backend process with a generated, rotatable token drives a real platform.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cpSync, mkdtempSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { randomBytes, X509Certificate } from 'node:crypto';
import path from 'node:path';
import { sql } from 'kysely';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { ROOT, runEntry, type Running } from '../helpers/shared/process.ts';
import { docker, REGISTRY, run } from '../helpers/e2e/rig.ts';
import { parseSse, type SseMessage } from '../helpers/shared/sse.ts';
import { createUser } from '../../src/state/users.ts';
import { parseEnv } from '../../src/adapters/platform-files.ts';

const id = randomBytes(3).toString('hex');
const project = `platform-keys-${id}`;
const network = `platform-keys-net-${id}`;
const image = `${REGISTRY}/platform-test/control:${id}`;
let db: TestDatabase;
let proc: Running | undefined;
let base: string;
let admin: string;
let dataDir: string;
let platformDir: string;

const tokenFile = () => path.join(dataDir, 'secrets', 'service-token');
const envOf = () => parseEnv(readFileSync(path.join(platformDir, '.env'), 'utf8'));
async function containerEnv(): Promise<string[]> {
  const ids = (await docker(['ps', '-q', '--filter', `label=com.docker.compose.project=${project}`, '--filter', 'label=com.docker.compose.service=control'])).trim();
  return JSON.parse(await docker(['inspect', ids]))[0].Config.Env as string[];
}

beforeAll(async () => {
  await docker(['tag', 'installer-rig/busybox:latest', image]);
  await docker(['push', image]);
  await docker(['network', 'create', network]);
  const templates = mkdtempSync(path.join(tmpdir(), 'control-templates-'));
  cpSync(path.join(ROOT, 'test/fixtures/control-plane-platform'), templates, { recursive: true });
  // The template defines INSTALLER_URL itself: the installer's value must win, with a warning.
  const template = readFileSync(path.join(templates, '.env.template'), 'utf8');
  writeFileSync(path.join(templates, '.env.template'), `${template}PLATFORM_IMAGE=${image}\nINSTALLER_NETWORK=${network}\nINSTALLER_URL=http://wrong.example:1\n`);
  platformDir = mkdtempSync(path.join(tmpdir(), 'platform-keys-'));
  dataDir = mkdtempSync(path.join(tmpdir(), 'installer-keys-'));
  db = await createTestDatabase();
  await createUser(db.database.db, { username: 'root', password: 'root-password-1', role: 'admin' });
  proc = runEntry('src/main.ts', {
    DATABASE_URL: db.url,
    DATA_DIR: dataDir,
    PORT: '0',
    // HTTPS: the fingerprint of its certificate goes into the platform's .env beside the token.
    HTTPS_PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'trace',
    PLATFORM_DIR: platformDir,
    PLATFORM_PROJECT: project,
    PLATFORM_TEMPLATES_URL: templates,
  });
  base = await proc.url;
  const res = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'root', password: 'root-password-1' }) });
  admin = ((await res.json()) as { token: string }).token;
});
afterAll(async () => {
  await proc?.stop('SIGKILL');
  await run('docker', ['compose', '-p', project, '-f', path.join(platformDir, 'docker-compose.yml'), 'down', '-v', '-t', '1'], { cwd: platformDir });
  await run('docker', ['network', 'rm', network]);
  await db?.drop();
});

async function requestJobAndFollow(action: string): Promise<SseMessage[]> {
  const res = await fetch(`${base}/api/deployment/jobs`, { method: 'POST', headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' }, body: JSON.stringify({ action }) });
  expect(res.status, await res.clone().text()).toBe(202);
  const { jobId } = (await res.json()) as { jobId: string };
  const stream = await fetch(`${base}/api/deployment/jobs/${jobId}/logs`, { headers: { authorization: `Bearer ${admin}` }, signal: AbortSignal.timeout(240_000) });
  const events = parseSse(await stream.text());
  expect(events.at(-1)?.event).toBe('finished');
  return events;
}

describe("the installer's keys in the platform .env", () => {
  let firstToken: string;

  it('deploy writes the address and the current token once each, replacing the template\'s own value with a warning', async () => {
    firstToken = readFileSync(tokenFile(), 'utf8').trim();
    expect(firstToken.length).toBeGreaterThanOrEqual(32);
    const events = await requestJobAndFollow('deploy');
    expect(events.at(-1)!.data.outcome, JSON.stringify(events.slice(-6))).toBe('completed');
    const warnings = events.filter((e) => e.event === 'warning').map((e) => String(e.data.message));
    expect(warnings).toEqual([expect.stringContaining("defines INSTALLER_URL, which the installer writes itself: the template's value is replaced")]);

    const env = envOf();
    const fingerprint = new X509Certificate(readFileSync(path.join(dataDir, 'secrets', 'tls', 'cert.pem'))).fingerprint256;
    expect(env.filter((e) => e.key === 'INSTALLER_URL')).toEqual([{ key: 'INSTALLER_URL', value: 'https://installer-backend:8443' }]);
    expect(env.filter((e) => e.key === 'INSTALLER_SERVICE_TOKEN')).toEqual([{ key: 'INSTALLER_SERVICE_TOKEN', value: firstToken }]);
    expect(env.filter((e) => e.key === 'INSTALLER_TLS_FINGERPRINT256')).toEqual([{ key: 'INSTALLER_TLS_FINGERPRINT256', value: fingerprint }]);
    // The platform's container got them from that .env.
    expect(await containerEnv()).toEqual(expect.arrayContaining([`INSTALLER_SERVICE_TOKEN=${firstToken}`, 'INSTALLER_URL=https://installer-backend:8443', `INSTALLER_TLS_FINGERPRINT256=${fingerprint}`]));

    const config = await fetch(`${base}/api/deployment/config`, { headers: { authorization: `Bearer ${admin}` } });
    const body = await config.text();
    expect(JSON.parse(body).entries).toEqual(expect.arrayContaining([
      { key: 'INSTALLER_URL', value: '********', secret: true, pending: false },
      { key: 'INSTALLER_SERVICE_TOKEN', value: '********', secret: true, pending: false },
    ]));
    expect(body).not.toContain(firstToken);
  });

  it('after a rotation, apply-config writes the new token; neither token shows in logs, job events or diagnostics', async () => {
    const next = randomBytes(32).toString('base64url');
    // The rotation as docs/access.md describes it: the new token first, the previous one kept a while.
    writeFileSync(`${tokenFile()}.new`, `${next}\n${firstToken}\n`, { mode: 0o600 });
    renameSync(`${tokenFile()}.new`, tokenFile());
    const status = await fetch(`${base}/api/deployment/status`, { headers: { authorization: `Bearer ${next}` } });
    expect(status.status).toBe(200);

    const events = await requestJobAndFollow('apply-config');
    expect(events.at(-1)!.data.outcome, JSON.stringify(events.slice(-6))).toBe('completed');
    const env = envOf();
    expect(env.filter((e) => e.key === 'INSTALLER_SERVICE_TOKEN')).toEqual([{ key: 'INSTALLER_SERVICE_TOKEN', value: next }]);
    expect(readFileSync(path.join(platformDir, '.env'), 'utf8')).not.toContain(firstToken);
    expect(await containerEnv()).toContain(`INSTALLER_SERVICE_TOKEN=${next}`);

    const diag = await (await fetch(`${base}/api/system/diagnostics`, { headers: { authorization: `Bearer ${admin}` } })).text();
    const stored = await sql<{ payload: string }>`select payload::text as payload from deployment_job_events`.execute(db.database.db);
    const storedEvents = stored.rows.map((r) => r.payload).join('\n');
    expect(storedEvents).toContain('wrote INSTALLER_URL, INSTALLER_SERVICE_TOKEN, INSTALLER_TLS_FINGERPRINT256 into the platform .env');
    const logs = proc!.output();
    for (const [name, token] of [['first', firstToken], ['rotated', next]] as const) {
      expect(logs.includes(token), `the ${name} token in a log line`).toBe(false);
      expect(storedEvents.includes(token), `the ${name} token in a job event`).toBe(false);
      expect(diag.includes(token), `the ${name} token in the diagnostics`).toBe(false);
    }
  });
});

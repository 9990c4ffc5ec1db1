// Users with real installer processes: the `user` CLI while the installer runs on the embedded
// database (it hands the change over the installer's local socket), the generated first admin
// choosing a password at first sign-in, and a second API process on the same Postgres refusing a
// changed user's token on its next request.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { runEntry, type Running } from '../helpers/shared/process.ts';
import { startTestApp, PASSWORDS, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';

const json = { 'content-type': 'application/json' };
const post = (url: string, body: unknown, headers: Record<string, string> = {}, method = 'POST') =>
  fetch(url, { method, headers: { ...json, ...headers }, body: JSON.stringify(body) });
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

describe('the user CLI while the installer runs on the embedded database', () => {
  let proc: Running;
  let base: string;
  let dataDir: string;
  beforeAll(async () => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'installer-users-'));
    proc = runEntry('src/main.ts', { DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info' });
    base = await proc.url;
  }, 60_000);
  afterAll(async () => {
    expect(await proc?.stop()).toBe(0);
  });

  it('the generated admin must choose a password at first sign-in', async () => {
    const generated = readFileSync(path.join(dataDir, 'secrets', 'initial-admin-password'), 'utf8').trim();
    const first = await post(`${base}/api/auth/login`, { username: 'admin', password: generated });
    expect(first.status).toBe(200);
    const body = (await first.json()) as { token: string; user: { mustChangePassword: boolean } };
    expect(body.user.mustChangePassword).toBe(true);
    const blocked = await fetch(`${base}/api/deployment/status`, { headers: bearer(body.token) });
    expect(blocked.status).toBe(403);
    expect(((await blocked.json()) as { code: string }).code).toBe('password_change_required');
    const changed = await post(`${base}/api/auth/password`, { currentPassword: generated, newPassword: 'admin-chose-this-1' }, bearer(body.token), 'PUT');
    expect(changed.status).toBe(200);
    const fresh = ((await changed.json()) as { token: string }).token;
    expect((await fetch(`${base}/api/users`, { headers: bearer(fresh) })).status).toBe(200);
    expect((await post(`${base}/api/auth/login`, { username: 'admin', password: generated })).status).toBe(401);
  });

  it('adds a user and resets a password through the running installer, which logs it', async () => {
    const socket = path.join(dataDir, 'installer.sock');
    expect(statSync(socket).isSocket()).toBe(true);
    expect(statSync(socket).mode & 0o777).toBe(0o600);
    const env = { DATA_DIR: dataDir, LOG_LEVEL: 'warn' };
    const add = runEntry('src/cli/user.ts', env, ['add', 'kim', 'operator'], 'kim-password-001\n');
    expect(await add.exited, add.output()).toBe(0);
    expect(add.output()).toContain('added kim (operator)');
    const login = await post(`${base}/api/auth/login`, { username: 'kim', password: 'kim-password-001' });
    expect(login.status).toBe(200);
    const { token, user } = (await login.json()) as { token: string; user: { role: string; mustChangePassword: boolean } };
    expect(user).toMatchObject({ role: 'operator', mustChangePassword: false });
    expect((await fetch(`${base}/api/deployment/status`, { headers: bearer(token) })).status).toBe(200);

    const passwd = runEntry('src/cli/user.ts', env, ['passwd', 'kim', 'viewer'], 'kim-password-002\n');
    expect(await passwd.exited, passwd.output()).toBe(0);
    // The installer made the change itself: kim's token stops working at once.
    expect((await fetch(`${base}/api/deployment/status`, { headers: bearer(token) })).status).toBe(401);
    expect((await post(`${base}/api/auth/login`, { username: 'kim', password: 'kim-password-002' })).status).toBe(200);

    const list = runEntry('src/cli/user.ts', env, ['list']);
    expect(await list.exited).toBe(0);
    expect(list.output()).toContain('kim\tviewer');
    const again = runEntry('src/cli/user.ts', env, ['add', 'kim', 'viewer'], 'kim-password-003\n');
    expect(await again.exited).toBe(1);
    expect(again.output()).toContain('exists');
    const demoteLast = runEntry('src/cli/user.ts', env, ['passwd', 'admin', 'viewer'], 'admin-password-99\n');
    expect(await demoteLast.exited).toBe(1);
    expect(demoteLast.output()).toContain('the last admin cannot be removed, disabled or demoted');

    const out = proc.output();
    expect(out).toMatch(/"actor":"cli:[^"]+","user":"kim","change":"added"/);
    expect(out).toMatch(/"actor":"cli:[^"]+","user":"kim","change":"password-reset"/);
    for (const pw of ['kim-password-001', 'kim-password-002', 'kim-password-003', 'admin-password-99']) expect(out).not.toContain(pw);
  });
});

describe('a second API process on the same Postgres', () => {
  let t: TestApp;
  let other: Running;
  let otherBase: string;
  beforeAll(async () => {
    t = await startTestApp();
    other = runEntry('src/main.ts', {
      DATABASE_URL: t.db.url, DATA_DIR: mkdtempSync(path.join(tmpdir(), 'installer-users-b-')), PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', LOGIN_RATE_LIMIT_PER_MINUTE: '1000',
      ...TEST_SECRETS,
    });
    otherBase = await other.url;
  }, 60_000);
  afterAll(async () => {
    await other?.stop();
    await t?.close();
  });

  it('refuses the token of a user changed through this process on the very next request', async () => {
    const admin = await t.token('admin');
    // Several rounds: the refusal must not depend on winning a race with the notification.
    const rounds = [['role', { role: 'viewer' }], ['disabled', { disabled: true }]] as const;
    for (const [change, body] of Array.from({ length: 6 }, () => rounds).flat()) {
      const signIn = await post(`${otherBase}/api/auth/login`, { username: 'operator', password: PASSWORDS.operator });
      expect(signIn.status).toBe(200);
      const token = ((await signIn.json()) as { token: string }).token;
      expect((await fetch(`${otherBase}/api/deployment/status`, { headers: bearer(token) })).status).toBe(200);
      const res = await t.app.inject({ method: 'PATCH', url: '/api/users/operator', headers: bearer(admin), payload: body });
      expect(res.statusCode, res.body).toBe(200);
      const next = await fetch(`${otherBase}/api/deployment/status`, { headers: bearer(token) });
      expect(next.status, change).toBe(401);
      // Back to operator, enabled, for the next round.
      await t.app.inject({ method: 'PATCH', url: '/api/users/operator', headers: bearer(admin), payload: { role: 'operator', disabled: false } });
    }
  });
});

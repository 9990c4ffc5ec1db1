// The real server process: secrets never printed, bad settings stop it with one line, SIGTERM stops it cleanly.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry } from '../helpers/shared/process.ts';
import { createUser } from '../../src/state/users.ts';

const SECRETS = {
  JWT_SECRET: 'JWTSECRETVALUE-5b1c0e8f-4d2a-4c1e-9a7b-3f6d8e2c1a90',
  ENCRYPTION_KEY: 'ENCKEYVALUE-7c2d1f90-5e3b-4d2f-8b8c-4a7e9f3d2b01',
  SERVICE_TOKEN: 'SVCTOKENVALUE-8d3e2a01-6f4c-4e3a-9c9d-5b8f0a4e3c12',
  DATABASE_PASSWORD: 'DBPASSWORDVALUE-9e4f3b12',
};

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await createUser(db.database.db, { username: 'ops', password: 'ops-password-1', role: 'operator' });
});
afterAll(async () => db?.drop());

describe('the server process', () => {
  it('never prints a secret: login, bad login, service token, error paths, debug logging', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'installer-proc-'));
    const proc = runEntry('src/main.ts', {
      DATABASE_URL: db.url, DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'trace', ...SECRETS,
    });
    try {
      const base = await proc.url;
      const login = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'ops', password: 'ops-password-1' }) });
      expect(login.status).toBe(200);
      const { token } = (await login.json()) as { token: string };
      const bad = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'ops', password: SECRETS.JWT_SECRET }) });
      expect(bad.status).toBe(401);
      const svc = await fetch(`${base}/api/auth/me`, { headers: { authorization: `Bearer ${SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'u-1' } });
      expect(svc.status).toBe(200);
      const leak = await fetch(`${base}/api/no-such-route?token=${SECRETS.SERVICE_TOKEN}&key=${SECRETS.ENCRYPTION_KEY}`, { headers: { authorization: `Bearer ${token}` } });
      expect(leak.status).toBe(404);
      const badToken = await fetch(`${base}/api/version`, { headers: { authorization: `Bearer ${SECRETS.DATABASE_PASSWORD}` } });
      expect(badToken.status).toBe(401);
      const badBody = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"username": "${SECRETS.ENCRYPTION_KEY}"` });
      expect(badBody.status).toBe(400);
      expect(await badBody.text()).not.toContain(SECRETS.ENCRYPTION_KEY);
    } finally {
      expect(await proc.stop()).toBe(0);
    }
    const out = proc.output();
    expect(out).toContain('signed in');
    expect(out).toContain('sign-in refused');
    expect(out.split('\n').length).toBeGreaterThan(8);
    // An operator reads this output: no runtime or library warning belongs in it.
    expect(out).not.toMatch(/\(node:\d+\) .*Warning/);
    for (const [name, value] of Object.entries(SECRETS)) {
      expect(out.includes(value), `${name} appeared in the output`).toBe(false);
    }
  });

  it('creates a first admin whose password is only in a root-only file', async () => {
    const fresh = await createTestDatabase();
    const dataDir = mkdtempSync(path.join(tmpdir(), 'installer-proc-'));
    const proc = runEntry('src/main.ts', { DATABASE_URL: fresh.url, DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1' });
    try {
      const base = await proc.url;
      const file = path.join(dataDir, 'secrets', 'initial-admin-password');
      expect(statSync(file).mode & 0o777).toBe(0o600);
      const password = readFileSync(file, 'utf8').trim();
      const res = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'admin', password }) });
      expect(res.status).toBe(200);
      expect(proc.output()).toContain(file);
      expect(proc.output()).not.toContain(password);
      // Generated secrets live beside it, owner-only.
      for (const f of ['jwt-secret', 'encryption-key', 'service-token']) {
        expect(statSync(path.join(dataDir, 'secrets', f)).mode & 0o777).toBe(0o600);
        expect(proc.output()).not.toContain(readFileSync(path.join(dataDir, 'secrets', f), 'utf8').trim());
      }
    } finally {
      await proc.stop();
      await fresh.drop();
    }
  });

  it('stops with one line naming the bad variable and exit code 78', async () => {
    const secret = 'too-short-secret';
    const proc = runEntry('src/main.ts', { DATABASE_URL: db.url, JWT_SECRET: secret });
    expect(await proc.exited).toBe(78);
    const lines = proc.output().trim().split('\n');
    expect(lines).toEqual(['installer: configuration error: JWT_SECRET: must be at least 32 characters']);
    const port = runEntry('src/main.ts', { PORT: '99999' });
    expect(await port.exited).toBe(78);
    expect(port.output()).toMatch(/^installer: configuration error: PORT: /);
  });
});

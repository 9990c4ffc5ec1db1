// The platform's configuration masked by default (docs/adr/0039-actor-kinds-and-config-reveal.md), on a
// listening server and the machine's Postgres: GET /api/deployment/config shows every key and no
// value to every caller (a URL's password hides under any key name); an admin reveals one value at a
// time with POST /api/deployment/config/{key}/reveal, each reveal an audit row naming the key and
// never the value, and no log line carries the value.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';

const VALUES = {
  DATABASE_URL: 'postgres://app:pg-pass-7c1e@db:5432/app',
  REDIS_URL: 'redis://:redis-pass-93ab@redis:6379/0',
  SENTRY_DSN: 'https://dsn-key-55f0@sentry.example.com/4',
  OWNER: 'owner-alice-2d4',
  API_TOKEN: 'api-token-value-8e1',
};
const PENDING = 'postgres://app:pending-pass-41d@db2:5432/app';

let t: TestApp;
let base: string;
let dir: string;
beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'platform-reveal-'));
  writeFileSync(path.join(dir, 'docker-compose.yml'), 'services:\n  web:\n    image: installer-rig/busybox:latest\n');
  const env = Object.entries(VALUES).map(([k, v]) => `${k}=${v}`);
  writeFileSync(path.join(dir, '.env'), [...env, 'INSTALLER_URL=http://installer-backend:8080', `INSTALLER_SERVICE_TOKEN=${TEST_SECRETS.SERVICE_TOKEN}`, ''].join('\n'));
  t = await startTestApp({ env: { PLATFORM_DIR: dir } });
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => {
  await t?.close();
  rmSync(dir, { recursive: true, force: true });
});

const bearer = async (role: 'viewer' | 'operator' | 'admin') => ({ authorization: `Bearer ${await t.token(role)}` });
const service = (forwarded?: string) => ({ authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, ...(forwarded ? { 'x-actor-user-id': forwarded } : {}) });

async function call(method: string, url: string, headers: Record<string, string>, body?: unknown) {
  const res = await fetch(`${base}${url}`, {
    method,
    headers: { ...headers, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, headers: res.headers, text: await res.text() };
}
const reveal = async (key: string, headers: Record<string, string>) => call('POST', `/api/deployment/config/${key}/reveal`, headers);
const reveals = () => t.db.database.db.selectFrom('deployment_actions').selectAll().where('kind', '=', 'config-reveal').orderBy('id').execute();
const everyValue = [...Object.values(VALUES), PENDING, TEST_SECRETS.SERVICE_TOKEN, 'installer-backend:8080'];

describe("the platform's configuration", () => {
  it('is masked for every caller: keys and a placeholder, never a value', async () => {
    const change = await call('PUT', '/api/deployment/config', await bearer('operator'), { set: { DATABASE_URL: PENDING }, unset: ['OWNER'] });
    expect(change.status, change.text).toBe(202);
    for (const [who, headers] of [
      ['viewer', await bearer('viewer')],
      ['operator', await bearer('operator')],
      ['admin', await bearer('admin')],
      ['control plane', service('admin')],
    ] as const) {
      const res = await call('GET', '/api/deployment/config', headers);
      expect(res.status, who).toBe(200);
      for (const v of everyValue) expect(res.text, `${who}: ${v}`).not.toContain(v);
      expect(JSON.parse(res.text).entries, who).toEqual([
        { key: 'DATABASE_URL', value: '********', secret: false, pending: true },
        { key: 'REDIS_URL', value: '********', secret: false, pending: false },
        { key: 'SENTRY_DSN', value: '********', secret: false, pending: false },
        { key: 'OWNER', value: null, secret: false, pending: true },
        { key: 'API_TOKEN', value: '********', secret: true, pending: false },
        { key: 'INSTALLER_URL', value: '********', secret: true, pending: false },
        { key: 'INSTALLER_SERVICE_TOKEN', value: '********', secret: true, pending: false },
      ]);
    }
  });

  it('reveals one value to an admin, audited by key and never by value, and logged without it', async () => {
    const logsBefore = t.logs.length;
    const redis = await reveal('REDIS_URL', await bearer('admin'));
    expect(redis.status, redis.text).toBe(200);
    expect(JSON.parse(redis.text)).toEqual({ key: 'REDIS_URL', value: VALUES.REDIS_URL, pending: false });
    expect(redis.headers.get('cache-control')).toBe('no-store');
    // A pending change is what the next apply-config writes: that is the value revealed.
    const db = await reveal('DATABASE_URL', await bearer('admin'));
    expect(JSON.parse(db.text)).toEqual({ key: 'DATABASE_URL', value: PENDING, pending: true });

    const rows = await reveals();
    expect(rows).toMatchObject([
      { actor: 'admin', actor_kind: 'user', status: 'completed', detail: 'revealed the value of REDIS_URL' },
      { actor: 'admin', actor_kind: 'user', status: 'completed', detail: 'revealed the value of DATABASE_URL (a pending change)' },
    ]);
    // The audit trail as an auditor reads it (list and export) names the key only.
    const list = await call('GET', '/api/deployment/actions?kind=config-reveal', await bearer('viewer'));
    expect(JSON.parse(list.text).map((r: { detail: string }) => r.detail)).toEqual(['revealed the value of DATABASE_URL (a pending change)', 'revealed the value of REDIS_URL']);
    const csv = await call('GET', '/api/deployment/actions.csv?kind=config-reveal', await bearer('viewer'));
    expect(csv.text).toContain('revealed the value of REDIS_URL');
    const newLogs = t.logs.slice(logsBefore).join('');
    expect(newLogs).toContain('platform configuration value revealed');
    expect(newLogs).toContain('"key":"REDIS_URL"');
    for (const text of [list.text, csv.text, newLogs, JSON.stringify(rows)]) {
      for (const v of everyValue) expect(text).not.toContain(v);
    }
  });

  it('refuses everyone but an admin, the installer keys to all, and a bad or unknown key with a clear 4xx; none of it is audited', async () => {
    const before = (await reveals()).length;
    for (const [who, headers] of [
      ['viewer', await bearer('viewer')],
      ['operator', await bearer('operator')],
      ['control plane', service()],
      ['control plane forwarding "admin"', service('admin')],
    ] as const) {
      const res = await reveal('REDIS_URL', headers);
      expect(res.status, who).toBe(403);
      expect(res.text, who).not.toContain(VALUES.REDIS_URL);
    }
    expect((await reveal('REDIS_URL', {})).status).toBe(401);
    for (const key of ['INSTALLER_SERVICE_TOKEN', 'INSTALLER_URL']) {
      const res = await reveal(key, await bearer('admin'));
      expect(res.status, key).toBe(403);
      expect(JSON.parse(res.text).message).toBe(`${key} is written by the installer for the control plane and is never revealed`);
    }
    const unknown = await reveal('NO_SUCH_KEY', await bearer('admin'));
    expect(unknown.status).toBe(404);
    expect(JSON.parse(unknown.text).message).toBe("the platform's configuration has no key NO_SUCH_KEY");
    for (const key of ['1BAD', 'A-B', 'a%20b']) {
      const res = await reveal(key, await bearer('admin'));
      expect(res.status, key).toBe(400);
      expect(JSON.parse(res.text).message, key).toContain('must be a .env key');
    }
    expect((await reveals()).length).toBe(before);
  });
});

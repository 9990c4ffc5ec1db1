// The installer's own keys in the platform's .env (INSTALLER_URL, INSTALLER_SERVICE_TOKEN): the
// configuration API shows them masked and refuses to set or unset them, so the installer stays
// the only writer of its address and token there.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';

let t: TestApp;
beforeAll(async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'platform-keys-'));
  writeFileSync(path.join(dir, 'docker-compose.yml'), 'services:\n  web:\n    image: installer-rig/busybox:latest\n');
  writeFileSync(path.join(dir, '.env'), `OWNER=alice\nINSTALLER_URL=http://installer-backend:8080\nINSTALLER_SERVICE_TOKEN=${TEST_SECRETS.SERVICE_TOKEN}\n`);
  t = await startTestApp({ env: { PLATFORM_DIR: dir } });
});
afterAll(async () => t?.close());

const as = async (role: 'viewer' | 'operator' | 'admin') => ({ authorization: `Bearer ${await t.token(role)}` });

describe("the installer's keys in the platform .env", () => {
  it('are shown masked by GET /api/deployment/config', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/api/deployment/config', headers: await as('viewer') });
    expect(res.statusCode).toBe(200);
    expect(res.json().entries).toEqual([
      { key: 'OWNER', value: '********', secret: false, pending: false },
      { key: 'INSTALLER_URL', value: '********', secret: true, pending: false },
      { key: 'INSTALLER_SERVICE_TOKEN', value: '********', secret: true, pending: false },
    ]);
    expect(res.body).not.toContain(TEST_SECRETS.SERVICE_TOKEN);
    expect(res.body).not.toContain('installer-backend:8080');
  });

  it('cannot be set or unset through PUT /api/deployment/config (400 naming them); nothing is stored', async () => {
    for (const payload of [
      { set: { INSTALLER_SERVICE_TOKEN: 'x'.repeat(40) } },
      { set: { OWNER: 'bob', INSTALLER_URL: 'http://elsewhere:1' } },
      { unset: ['INSTALLER_SERVICE_TOKEN'] },
    ]) {
      const res = await t.app.inject({ method: 'PUT', url: '/api/deployment/config', headers: await as('admin'), payload });
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().message).toContain('INSTALLER_URL, INSTALLER_SERVICE_TOKEN and INSTALLER_TLS_FINGERPRINT256 are written by the installer');
    }
    expect(await t.db.database.db.selectFrom('platform_config_changes').selectAll().execute()).toEqual([]);
  });
});

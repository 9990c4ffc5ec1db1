// The platform .env as the API reads it: the observer (in this process, as with INSTALLER_ROLE=all)
// reads the file and stores its entries sealed with the encryption key, key names in clear; GET
// /api/deployment/config answers from that row, and a job's end makes the row stale, since deploy
// and apply-config write the file (docs/adr/0023-observed-state.md).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { createJob, finishJob } from '../../src/state/jobs.ts';

const SECRET = 'customer-secret-value-9f2c';
let dir: string;
let t: TestApp;

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'observed-env-'));
  writeFileSync(path.join(dir, '.env'), `PLAIN=one\nCUSTOMER_DB_PASSWORD=${SECRET}\n`);
  t = await startTestApp({ env: { PLATFORM_DIR: dir } });
});
afterAll(async () => {
  await t?.close();
  rmSync(dir, { recursive: true, force: true });
});

const config = async () => {
  const res = await t.app.inject({ method: 'GET', url: '/api/deployment/config', headers: { authorization: `Bearer ${await t.token('viewer')}` } });
  expect(res.statusCode, res.body).toBe(200);
  return new Map((res.json() as { entries: { key: string; value: string | null }[] }).entries.map((e) => [e.key, e.value]));
};
/** A value in clear: every value is masked in the list, and an admin reveals one at a time. */
const revealed = async (key: string) => {
  const res = await t.app.inject({ method: 'POST', url: `/api/deployment/config/${key}/reveal`, headers: { authorization: `Bearer ${await t.token('admin')}` } });
  expect(res.statusCode, res.body).toBe(200);
  return (res.json() as { value: string | null }).value;
};

describe('the platform .env as observed state', () => {
  it('answers from the row, which holds the values sealed and only the key names in clear', async () => {
    expect((await config()).get('PLAIN')).toBe('********');
    expect(await revealed('PLAIN')).toBe('one');
    const row = await t.db.database.db.selectFrom('observed_state').select(['data', 'conditions']).where('key', '=', 'platformEnv').executeTakeFirstOrThrow();
    const stored = JSON.stringify(row.data);
    expect(stored).not.toContain(SECRET);
    expect(stored).not.toContain('one');
    expect((row.data as { keys: string[] }).keys).toEqual(['PLAIN', 'CUSTOMER_DB_PASSWORD']);
    expect(row.conditions).toEqual([expect.objectContaining({ type: 'EnvRead', status: 'True' })]);
  });

  it('reads the file again once a job has ended after the last observation', async () => {
    await config();
    writeFileSync(path.join(dir, '.env'), `PLAIN=two\nCUSTOMER_DB_PASSWORD=${SECRET}\n`);
    // A job (which may have written the file) ends after the row was observed: the read is fresh.
    const jobId = await createJob(t.db.database.db, { kind: 'apply-config', params: {}, actor: { id: 'ops' } });
    await finishJob(t.db.database.db, jobId, { phase: 'completed', detail: null, exitCode: 0 });
    expect((await config()).get('PLAIN')).toBe('********');
    expect(await revealed('PLAIN')).toBe('two');
  });
});

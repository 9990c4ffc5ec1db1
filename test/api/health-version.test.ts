import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { buildApp } from '../../src/api/app.ts';
import { openDatabase } from '../../src/db/database.ts';
import { createLogger } from '../../src/logger.ts';
import { INSTANCE_HEADER } from '../../src/contracts/instance.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => t?.close());

describe('GET /api/health', () => {
  it('answers ok/up without a token while the database answers', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/api/health' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ status: 'ok', db: 'up' });
  });

  it('names the process that answered: the same id on every answer, another one after a restart', async () => {
    const ids = async (app: typeof t.app) => (await app.inject({ method: 'GET', url: '/api/health' })).headers[INSTANCE_HEADER];
    const first = await ids(t.app);
    expect(first).toMatch(/^[0-9a-f-]{36}$/);
    expect(await ids(t.app)).toBe(first);
    const restarted = await buildApp({ ...t.wired.deps, logger: createLogger({ level: 'silent', secrets: [] }) });
    try {
      const second = await ids(restarted);
      expect(second).toMatch(/^[0-9a-f-]{36}$/);
      expect(second).not.toBe(first);
    } finally {
      await restarted.close();
    }
  });

  it('answers 503 starting until the process reconciles, then ok', async () => {
    let reconciling = false;
    const app = await buildApp({ ...t.wired.deps, reconciling: () => reconciling, logger: createLogger({ level: 'silent', secrets: [] }) });
    try {
      const before = await app.inject({ method: 'GET', url: '/api/health' });
      expect(before.statusCode).toBe(503);
      expect(before.json()).toEqual({ status: 'starting', db: 'up' });
      reconciling = true;
      const after = await app.inject({ method: 'GET', url: '/api/health' });
      expect(after.statusCode).toBe(200);
      expect(after.json()).toEqual({ status: 'ok', db: 'up' });
    } finally {
      await app.close();
    }
  });

  it('answers 503 with db down when the database does not', async () => {
    const dead = await openDatabase({ url: 'postgres://postgres@127.0.0.1:1/none', dataDir: '/nonexistent' });
    const app = await buildApp({ ...t.wired.deps, database: dead, logger: createLogger({ level: 'silent', secrets: [] }) });
    try {
      const started = Date.now();
      const res = await app.inject({ method: 'GET', url: '/api/health' });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toEqual({ status: 'error', db: 'down' });
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      await app.close();
      await dead.close();
    }
  });
});

describe('GET /api/version', () => {
  it('says so instead of inventing values when not in a container', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/api/version', headers: { authorization: `Bearer ${await t.token('viewer')}` } });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ inContainer: false, image: null, digest: null, note: expect.stringContaining('not running in a container') });
  });
});

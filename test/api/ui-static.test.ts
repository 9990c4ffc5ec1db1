// The operator UI's static serving (src/api/ui.ts): built files by path, index.html for the app's
// own paths, never for /api, and a plain 503 when the UI was not built.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { uiRoutes } from '../../src/api/ui.ts';

const apps: FastifyInstance[] = [];
async function serve(root: string): Promise<FastifyInstance> {
  const app = Fastify();
  app.get('/api/known', async () => ({ ok: true }));
  app.setNotFoundHandler((req, reply) => reply.status(404).send({ code: 'not_found', url: req.url }));
  await app.register(uiRoutes, { root });
  await app.ready();
  apps.push(app);
  return app;
}
afterAll(async () => {
  for (const a of apps) await a.close();
});

let built: string;
beforeAll(() => {
  built = mkdtempSync(path.join(tmpdir(), 'ui-dist-'));
  mkdirSync(path.join(built, 'assets'));
  writeFileSync(path.join(built, 'index.html'), '<!doctype html><title>ui</title>');
  writeFileSync(path.join(built, 'assets', 'index-abc123.js'), 'console.log(1)');
  writeFileSync(path.join(tmpdir(), 'ui-secret.txt'), 'outside');
});

describe('UI static serving', () => {
  it('serves files, falls back to index.html for app paths, and leaves /api alone', async () => {
    const app = await serve(built);
    const index = await app.inject({ url: '/' });
    expect(index.statusCode).toBe(200);
    expect(index.headers['content-type']).toContain('text/html');
    expect(index.headers['cache-control']).toBe('no-cache');
    expect(index.headers['content-security-policy']).toContain("script-src 'self'");
    const deep = await app.inject({ url: '/jobs/123?x=1' });
    expect(deep.statusCode).toBe(200);
    expect(deep.body).toBe(index.body);
    const js = await app.inject({ url: '/assets/index-abc123.js' });
    expect(js.statusCode).toBe(200);
    expect(js.headers['cache-control']).toContain('immutable');
    expect((await app.inject({ url: '/assets/missing-1.js' })).statusCode).toBe(404);
    expect((await app.inject({ url: '/api/known' })).json()).toEqual({ ok: true });
    const api = await app.inject({ url: '/api/unknown' });
    expect(api.statusCode).toBe(404);
    expect(api.json()).toMatchObject({ code: 'not_found' });
    // Never a file outside the build.
    for (const url of ['/../ui-secret.txt', '/%2e%2e/ui-secret.txt', '/assets/..%2f..%2fui-secret.txt']) {
      const r = await app.inject({ url });
      expect(r.body, url).not.toContain('outside');
    }
    // A malformed escape is Fastify's own 400, never a crash.
    expect((await app.inject({ url: '/%E0%A4%A' })).statusCode).toBe(400);
  });

  it('answers 503 with what to do when the UI is not built', async () => {
    const app = await serve(mkdtempSync(path.join(tmpdir(), 'ui-empty-')));
    const r = await app.inject({ url: '/' });
    expect(r.statusCode).toBe(503);
    expect(r.body).toContain('npm run build:ui');
  });
});

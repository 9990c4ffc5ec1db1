// scripts/healthcheck.sh, the image's HEALTHCHECK, under bash against real listeners: the backend's
// own /api/health (the test app on Postgres), and servers that answer what a backend in trouble
// would: 503 with the database down, ok without the database, nothing at all, or no listener.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { ROOT } from '../helpers/shared/process.ts';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';

const SCRIPT = path.join(ROOT, 'scripts/healthcheck.sh');

/** The script's exit code with PORT set, as the engine runs it (no arguments). */
function check(port: number): Promise<number> {
  return new Promise((resolve) => {
    execFile('bash', [SCRIPT], { env: { PATH: process.env.PATH, PORT: String(port) }, timeout: 10_000 }, (err) => {
      resolve(err ? (typeof err.code === 'number' ? err.code : -1) : 0);
    });
  });
}

/** A listener that answers /api/health with `status` and `body`, or never answers when `status` is null. */
async function serve(status: number | null, body = ''): Promise<{ port: number; close: () => Promise<void> }> {
  const server = http.createServer((_req, res) => {
    if (status === null) return; // accepted, never answered
    res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
    res.end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => t?.close());

describe('scripts/healthcheck.sh', () => {
  it("passes on the backend's own healthy answer", async () => {
    const address = await t.app.listen({ host: '127.0.0.1', port: 0 });
    expect(await check(Number(new URL(address).port))).toBe(0);
  });

  it.each([
    ['503 with the database down', 503, '{"status":"error","db":"down"}'],
    ['200 without the database', 200, '{"status":"ok","db":"down"}'],
    ['200 with another body', 200, '{"status":"starting"}'],
    ['404', 404, '{"status":"ok","db":"up"}'],
  ])('fails on %s', async (_name, status, body) => {
    const s = await serve(status, body);
    try {
      expect(await check(s.port)).toBe(1);
    } finally {
      await s.close();
    }
  });

  it('fails when nothing listens, and when the listener never answers', async () => {
    // A port just freed: nothing listens on it.
    const gone = await serve(200, '{"status":"ok","db":"up"}');
    await gone.close();
    expect(await check(gone.port)).toBe(1);
    const s = await serve(null);
    try {
      // Exit code 1 is the script giving up on its own (its read waits 2 s); killed by the 10 s
      // timeout above, it would have no exit code.
      expect(await check(s.port)).toBe(1);
    } finally {
      await s.close();
    }
  });
});

// The real server process stopped with SIGTERM while a client holds a response it never reads:
// the backend ends that connection after its drain (src/listeners.ts, DRAIN_MS) and exits 0 having
// closed everything. On plain HTTP (the control plane's and the healthcheck's port) it used to wait
// for the client until its 8 s watchdog exited 1, and a self-update's switch waited with it; HTTPS
// connections were already ended once the app had closed, and stay so.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry, type Running } from '../helpers/shared/process.ts';

const SECRETS = {
  JWT_SECRET: 'JWTSECRETVALUE-0b7e4c21-3f5a-4d6b-9c8d-1e2f3a4b5c6d',
  ENCRYPTION_KEY: 'ENCKEYVALUE-1c8f5d32-4a6b-4e7c-8d9e-2f3a4b5c6d7e',
  SERVICE_TOKEN: 'SVCTOKENVALUE-2d9a6e43-5b7c-4f8d-9e0f-3a4b5c6d7e8f',
};
// The viewer's script, 1.6 MB: thirty of them pipelined on one connection are far more than the
// socket buffers hold, so the server is still writing while the client reads nothing.
const LARGE = '/api/docs/static/swagger-ui-bundle.js';
const PIPELINED = 30;

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => db?.drop());

/** Sends the pipelined requests, waits for the first bytes of the answer, then stops reading. */
async function stallOn(socket: net.Socket): Promise<void> {
  const request = `GET ${LARGE} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`;
  socket.write(request.repeat(PIPELINED));
  const first = await new Promise<Buffer>((resolve, reject) => {
    socket.once('data', resolve);
    socket.once('error', reject);
  });
  socket.pause();
  expect(first.toString('latin1')).toMatch(/^HTTP\/1\.1 200 /);
}

/** Resolves when the server has ended the connection (the client drains what was sent before). */
function endedByServer(socket: net.Socket): Promise<void> {
  return new Promise((resolve) => {
    socket.once('close', () => resolve());
    socket.on('error', () => {});
    socket.on('data', () => {});
    socket.resume();
  });
}

async function stopWhileStalled(proc: Running, connect: () => Promise<net.Socket>): Promise<void> {
  await proc.url;
  const socket = await connect();
  await stallOn(socket);
  const code = await proc.stop('SIGTERM');
  expect(code, proc.output()).toBe(0);
  expect(proc.output()).toContain('"msg":"shutting down"');
  expect(proc.output()).not.toContain('shutdown took too long');
  await endedByServer(socket);
}

describe('a SIGTERM while a client holds a response it does not read', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'installer-drain-'));
  const env = (extra: Record<string, string> = {}) => ({ DATABASE_URL: db.url, DATA_DIR: dataDir, HOST: '127.0.0.1', PORT: '0', ...SECRETS, ...extra });

  it('ends that connection after the drain and exits 0 (plain HTTP)', async () => {
    const proc = runEntry('src/main.ts', env());
    try {
      await stopWhileStalled(proc, async () => {
        const { port } = new URL(await proc.url);
        const socket = net.connect(Number(port), '127.0.0.1');
        await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
        return socket;
      });
    } finally {
      await proc.stop('SIGKILL');
    }
  });

  it('ends that connection after the drain and exits 0 (HTTPS)', async () => {
    const proc = runEntry('src/main.ts', env({ HTTPS_PORT: '0' }));
    try {
      await stopWhileStalled(proc, async () => {
        await proc.url;
        const m = /"httpsAddress":"https:\/\/[^"]+:(\d+)"/.exec(proc.output());
        if (!m) throw new Error(`no HTTPS address in the output:\n${proc.output()}`);
        // The generated certificate is not what this test is about: it is not verified here.
        const socket = tls.connect({ port: Number(m[1]), host: '127.0.0.1', rejectUnauthorized: false });
        await new Promise((resolve, reject) => socket.once('secureConnect', resolve).once('error', reject));
        return socket;
      });
    } finally {
      await proc.stop('SIGKILL');
    }
  });
});

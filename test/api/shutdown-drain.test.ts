// The real server process stopped with SIGTERM while a client holds a response it never reads:
// the backend ends that connection after its drain (src/listeners.ts, DRAIN_MS) and exits 0 having
// closed everything. On plain HTTP (the control plane's and the healthcheck's port) it used to wait
// for the client until its 8 s watchdog exited 1, and a self-update's switch waited with it; HTTPS
// connections were already ended once the app had closed, and stay so. A job's event stream, which
// ends only with its job, is ended by the app itself as it closes, not cut by the drain.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry, type Running } from '../helpers/shared/process.ts';
import { openDatabase } from '../../src/db/database.ts';
import { createJob } from '../../src/state/jobs.ts';

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
  // API_DOCS=on: the large answer is the API document viewer's script (off by default in production).
  const env = (extra: Record<string, string> = {}) => ({ DATABASE_URL: db.url, DATA_DIR: dataDir, HOST: '127.0.0.1', PORT: '0', API_DOCS: 'on', ...SECRETS, ...extra });

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

describe("a SIGTERM while a job's event stream is open", () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'installer-drain-'));

  /** A job that stays queued: the process below serves the API alone, so nothing claims it. */
  async function queuedJob(): Promise<string> {
    const database = await openDatabase({ url: db.url, dataDir });
    try {
      return await createJob(database.db, { kind: 'restart', params: { services: ['web'] }, actor: { id: 'test' } });
    } finally {
      await database.close();
    }
  }

  /** How the response ended: 'ended' when the server finished it, else the error that cut it. */
  async function ending(res: Response): Promise<string> {
    const reader = res.body!.getReader();
    try {
      for (;;) if ((await reader.read()).done) return 'ended';
    } catch (err) {
      return `cut: ${(err as Error).message}`;
    }
  }

  it('ends the stream as the app closes (the drain does not cut it) and exits 0', async () => {
    // A self-update's job is such a job: it ends only once the next backend is up, and an operator
    // watching its page held the stopping backend, and the switch, for the whole drain.
    const proc = runEntry('src/main.ts', { DATABASE_URL: db.url, DATA_DIR: dataDir, HOST: '127.0.0.1', PORT: '0', INSTALLER_ROLE: 'api', ...SECRETS });
    try {
      const url = await proc.url;
      const jobId = await queuedJob();
      const res = await fetch(`${url}/api/deployment/jobs/${jobId}/logs`, { headers: { authorization: `Bearer ${SECRETS.SERVICE_TOKEN}` } });
      expect(res.status).toBe(200);
      const ended = ending(res);
      const code = await proc.stop('SIGTERM');
      expect(code, proc.output()).toBe(0);
      expect(await ended).toBe('ended');
      expect(proc.output()).not.toContain('shutdown took too long');
    } finally {
      await proc.stop('SIGKILL');
    }
  });
});

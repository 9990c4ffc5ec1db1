// A Postgres container of the test's own, stopped, killed, paused and started again without
// touching the machine's Postgres. Everything is real; a container that cannot start fails the test.
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { docker, freePort, run, uniqueName } from './rig.ts';
import { eventually } from '../shared/eventually.ts';

export const PG_IMAGE = 'installer-rig/postgres:15';
export interface DedicatedPostgres {
  name: string;
  port: number;
  /** The URL without the password (the backend gets it as DATABASE_PASSWORD). */
  url: string;
  password: string;
  /** Waits until a query succeeds; returns how long that took. */
  ready(timeoutMs?: number): Promise<number>;
  query<T extends pg.QueryResultRow>(text: string): Promise<T[]>;
  stop(): Promise<void>;
  kill(): Promise<void>;
  pause(): Promise<void>;
  unpause(): Promise<void>;
  start(): Promise<void>;
  remove(): Promise<void>;
}

/** A Postgres 15 container on a free 127.0.0.1 port, password-protected, under a unique name. */
export async function startDedicatedPostgres(): Promise<DedicatedPostgres> {
  const name = uniqueName('installer-faults-pg');
  const port = await freePort();
  const password = randomBytes(18).toString('base64url');
  // The rig's engine runs with --bridge=none: a published port needs a user-defined network.
  await docker(['network', 'create', name], { timeoutMs: 60_000 });
  try {
    await docker(['run', '-d', '--name', name, '--network', name, '-p', `127.0.0.1:${port}:5432`, '-e', `POSTGRES_PASSWORD=${password}`, '-e', 'POSTGRES_DB=installer', '--stop-timeout', '10', PG_IMAGE], {
      timeoutMs: 60_000,
    });
  } catch (err) {
    await run('docker', ['rm', '-f', '-v', name]);
    await run('docker', ['network', 'rm', name]);
    throw err;
  }
  const url = `postgres://postgres@127.0.0.1:${port}/installer`;
  const query = async <T extends pg.QueryResultRow>(text: string): Promise<T[]> => {
    // pg lets the connection string's fields win over a separate password.
    const c = new pg.Client({ connectionString: url.replace('postgres@', `postgres:${encodeURIComponent(password)}@`), connectionTimeoutMillis: 2_000 });
    c.on('error', () => {});
    try {
      await c.connect();
      return (await c.query<T>(text)).rows;
    } finally {
      await c.end().catch(() => {});
    }
  };
  const p: DedicatedPostgres = {
    name,
    port,
    url,
    password,
    query,
    async ready(timeoutMs = 60_000) {
      const started = Date.now();
      try {
        await eventually(() => query('select 1').then(() => true), `the dedicated Postgres ${name} to answer`, timeoutMs, 100);
      } catch (err) {
        const logs = await run('docker', ['logs', '--tail', '40', name]);
        throw new Error(`${(err as Error).message}\n${logs.stdout}\n${logs.stderr}`);
      }
      return Date.now() - started;
    },
    stop: async () => void (await docker(['stop', name], { timeoutMs: 60_000 })),
    kill: async () => void (await docker(['kill', name], { timeoutMs: 60_000 })),
    pause: async () => void (await docker(['pause', name], { timeoutMs: 60_000 })),
    unpause: async () => void (await docker(['unpause', name], { timeoutMs: 60_000 })),
    start: async () => void (await docker(['start', name], { timeoutMs: 60_000 })),
    async remove() {
      await run('docker', ['rm', '-f', '-v', name], { timeoutMs: 60_000 });
      await run('docker', ['network', 'rm', name], { timeoutMs: 60_000 });
    },
  };
  try {
    await p.ready();
  } catch (err) {
    await p.remove();
    throw err;
  }
  return p;
}

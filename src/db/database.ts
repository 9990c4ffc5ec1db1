// Opens the installer's database: Postgres through pg when DATABASE_URL is set, otherwise an
// embedded PGlite in the data directory, guarded by a lock file so two processes never share it.
import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { mkdirSync, openSync, writeSync, closeSync, readFileSync, unlinkSync } from 'node:fs';
import path from 'node:path';
import type { DB } from './schema.ts';

export type Notify = (payload: string) => void;

export interface Database {
  db: Kysely<DB>;
  kind: 'postgres' | 'pglite';
  /** Subscribes to a NOTIFY channel; returns an unsubscribe function. */
  listen(channel: string, onNotify: Notify): Promise<() => Promise<void>>;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  url?: string;
  password?: string;
  dataDir: string;
  /** Pool size for Postgres. */
  poolSize?: number;
  /** Milliseconds a single query may run before the server cancels it. */
  statementTimeoutMs?: number;
}

export class DatabaseLockedError extends Error {}

export async function openDatabase(opts: DatabaseOptions): Promise<Database> {
  return opts.url ? openPostgres(opts.url, opts) : openPglite(opts.dataDir);
}

function openPostgres(url: string, opts: DatabaseOptions): Database {
  // pg lets the connection string's fields win over separate options, so a password given apart
  // from the URL goes into it.
  const withPassword = new URL(url);
  if (opts.password !== undefined && !withPassword.password) withPassword.password = encodeURIComponent(opts.password);
  const config: pg.PoolConfig = {
    connectionString: withPassword.toString(),
    max: opts.poolSize ?? 10,
    connectionTimeoutMillis: 5_000,
    statement_timeout: opts.statementTimeoutMs ?? 30_000,
    application_name: 'installer',
  };
  const pool = new pg.Pool(config);
  // An idle client losing its server (Postgres restart) must not crash the process.
  pool.on('error', () => {});
  const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
  const listeners = new Set<pg.Client>();
  return {
    db,
    kind: 'postgres',
    async listen(channel, onNotify) {
      if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`invalid channel name ${channel}`);
      const client = new pg.Client(config);
      client.on('error', () => {});
      await client.connect();
      client.on('notification', (n) => {
        if (n.channel === channel) onNotify(n.payload ?? '');
      });
      await client.query(`LISTEN ${channel}`);
      listeners.add(client);
      return async () => {
        listeners.delete(client);
        await client.end().catch(() => {});
      };
    },
    async close() {
      await Promise.all([...listeners].map((c) => c.end().catch(() => {})));
      await db.destroy();
    },
  };
}

async function openPglite(dataDir: string): Promise<Database> {
  const dir = path.resolve(dataDir, 'pglite');
  mkdirSync(dir, { recursive: true });
  const release = acquireLock(path.resolve(dataDir, 'pglite.lock'));
  try {
    const { PGlite } = await import('@electric-sql/pglite');
    const { PGliteDialect } = await import('kysely-pglite-dialect');
    const client = await PGlite.create(dir);
    const db = new Kysely<DB>({ dialect: new PGliteDialect(client) });
    return {
      db,
      kind: 'pglite',
      async listen(channel, onNotify) {
        const unlisten = await client.listen(channel, onNotify);
        return async () => unlisten();
      },
      async close() {
        await db.destroy();
        if (!client.closed) await client.close();
        release();
      },
    };
  } catch (err) {
    release();
    throw err;
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

// Locks this process holds. A lock file with our own pid that is not in this set was left by an
// earlier process that had the same pid (PID 1 in a restarted container) and is stale.
const heldLocks = new Set<string>();

/** Takes an exclusive lock file holding our pid; a lock left by a dead process is taken over. */
export function acquireLock(lockPath: string): () => void {
  lockPath = path.resolve(lockPath);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(lockPath, 'wx', 0o600);
      writeSync(fd, String(process.pid));
      closeSync(fd);
      heldLocks.add(lockPath);
      return () => {
        heldLocks.delete(lockPath);
        try {
          if (readFileSync(lockPath, 'utf8').trim() === String(process.pid)) unlinkSync(lockPath);
        } catch {
          /* already gone */
        }
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const holder = Number.parseInt(readFileSync(lockPath, 'utf8').trim(), 10);
      const ours = holder === process.pid;
      if (Number.isInteger(holder) && (ours ? heldLocks.has(lockPath) : pidAlive(holder))) {
        throw new DatabaseLockedError(
          `the embedded database in ${path.dirname(lockPath)} is in use by process ${holder}; stop it or set DATABASE_URL`,
        );
      }
      unlinkSync(lockPath); // stale: its process is gone
    }
  }
  throw new DatabaseLockedError(`could not take the lock ${lockPath}`);
}

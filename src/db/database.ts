// Opens the installer's database: Postgres through pg when DATABASE_URL is set, otherwise an
// embedded PGlite in the data directory, guarded by a lock file so two processes never share it.
import { Kysely, PostgresDialect, type PostgresPool, type PostgresPoolClient } from 'kysely';
import pg from 'pg';
import { mkdirSync, openSync, writeSync, closeSync, readFileSync, unlinkSync } from 'node:fs';
import path from 'node:path';
import type { DB } from './schema.ts';
import { importModule } from './import-module.ts';

export type Notify = (payload: string) => void;

export interface Database {
  db: Kysely<DB>;
  kind: 'postgres' | 'pglite';
  /** Subscribes to a NOTIFY channel; returns an unsubscribe function. */
  listen(channel: string, onNotify: Notify): Promise<() => Promise<void>>;
  /** The embedded database only: a gzipped tar of its data directory, taken in the process (a backup). */
  dumpDataDir?: () => Promise<Uint8Array>;
  /**
   * Runs `fn` on a connection of its own without the statement timeout (nor the client's query
   * timeout): the schema migrations, whose index builds and rewrites may rightly take longer.
   */
  withoutTimeouts<T>(fn: (db: Kysely<DB>) => Promise<T>): Promise<T>;
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
  const statementTimeout = opts.statementTimeoutMs ?? STATEMENT_TIMEOUT_MS;
  const config: pg.PoolConfig = {
    connectionString: withPassword.toString(),
    max: opts.poolSize ?? 10,
    // Bounds both a new connection and the wait for a free one in the pool
    // (docs/adr/0012-dependency-faults.md): a request never queues longer for a dead server.
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    // The server cancels a statement after this; the client gives up a little later, for a
    // server that no longer answers at all (a partition rather than a restart).
    statement_timeout: statementTimeout,
    query_timeout: statementTimeout + QUERY_TIMEOUT_GRACE_MS,
    // Finds a silently dropped connection instead of waiting on it for the OS default of hours.
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    application_name: 'installer',
  };
  const pool = new pg.Pool(config);
  // An idle client losing its server (Postgres restart) must not crash the process.
  pool.on('error', () => {});
  const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool: discardingBroken(pool) }) });
  const listeners = new Set<Listener>();
  return {
    db,
    kind: 'postgres',
    async withoutTimeouts(fn) {
      const { statement_timeout: _s, query_timeout: _q, ...unbounded } = config;
      const own = new pg.Pool({ ...unbounded, max: 1 });
      own.on('error', () => {});
      // Set on the session too: a role's or database's own statement_timeout would apply otherwise.
      own.on('connect', (client) => void client.query('set statement_timeout = 0').catch(() => {}));
      const single = new Kysely<DB>({ dialect: new PostgresDialect({ pool: discardingBroken(own) }) });
      try {
        return await fn(single);
      } finally {
        await single.destroy();
      }
    },
    async listen(channel, onNotify) {
      if (!/^[a-z_][a-z0-9_]*$/.test(channel)) throw new Error(`invalid channel name ${channel}`);
      const listener = new Listener(config, channel, onNotify);
      await listener.connect(); // the first connection must work: boot fails loudly otherwise
      listeners.add(listener);
      return async () => {
        listeners.delete(listener);
        await listener.close();
      };
    },
    async close() {
      await Promise.all([...listeners].map((l) => l.close()));
      listeners.clear();
      await db.destroy();
    },
  };
}

/**
 * The pool as Kysely sees it, with two differences (docs/adr/0012-dependency-faults.md):
 * - A checked-out client has an 'error' listener. pg-pool listens only on idle clients, and a
 *   server that goes away between two queries of a transaction (no query active) makes the client
 *   emit 'error': unheard, that would crash the process. The client is then dropped on release.
 * - A client whose query hit query_timeout is dropped on release instead of pooled again: its
 *   query is still outstanding on a server that stopped answering, and later ones would queue behind.
 */
function discardingBroken(pool: pg.Pool): PostgresPool {
  return {
    options: pool.options,
    Client: pg.Client,
    async connect(): Promise<PostgresPoolClient> {
      const client = await pool.connect();
      let broken = false;
      const onError = () => {
        broken = true;
      };
      client.on('error', onError);
      const query = ((...args: unknown[]) => {
        const r = (client.query as (...a: unknown[]) => unknown)(...args);
        if (!(r instanceof Promise)) return r; // a cursor
        return r.catch((err: unknown) => {
          if ((err as Error | null)?.message === 'Query read timeout') broken = true;
          throw err;
        });
      }) as PostgresPoolClient['query'];
      return {
        query,
        // Kysely reads the backend pid from here to cancel a query.
        get processID() {
          return (client as unknown as { processID?: number }).processID;
        },
        release: (destroy?: boolean) => {
          client.off('error', onError);
          client.release(Boolean(destroy) || broken);
        },
      };
    },
    end: () => pool.end(),
  };
}

/** Milliseconds to connect to Postgres, or to wait for a free pooled connection. */
export const CONNECT_TIMEOUT_MS = 5_000;
/** Default server-side statement timeout. */
export const STATEMENT_TIMEOUT_MS = 30_000;
/** How much longer than the statement timeout the client waits before it gives a query up. */
export const QUERY_TIMEOUT_GRACE_MS = 5_000;
/** Pauses between attempts to re-establish a lost LISTEN connection: doubling, capped. */
export const LISTEN_RETRY_MS = { first: 500, max: 5_000 };

/**
 * One LISTEN connection that comes back by itself. When the server goes away (restart, kill,
 * network) the client is dropped and a new one is connected with backoff until it works; the
 * subscriber is then woken once, since notifications sent meanwhile are lost.
 */
class Listener {
  private client: pg.Client | null = null;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;
  private delay = LISTEN_RETRY_MS.first;

  constructor(
    private readonly config: pg.ClientConfig,
    private readonly channel: string,
    private readonly onNotify: Notify,
  ) {}

  async connect(): Promise<void> {
    const client = new pg.Client(this.config);
    let ready = false;
    let lost = false;
    const onLost = () => {
      if (!ready || lost) return; // a failed connect is reported by connect() itself
      lost = true;
      if (this.client === client) this.client = null;
      client.end().catch(() => {});
      this.scheduleReconnect();
    };
    client.on('error', onLost);
    client.on('end', onLost);
    client.on('notification', (n) => {
      if (n.channel === this.channel) this.onNotify(n.payload ?? '');
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${this.channel}`);
    } catch (err) {
      // Not awaited: ending a client whose connect failed half-way may never settle.
      client.end().catch(() => {});
      throw err;
    }
    if (this.closed) {
      await client.end().catch(() => {});
      return;
    }
    ready = true;
    this.client = client;
    this.delay = LISTEN_RETRY_MS.first;
  }

  private scheduleReconnect(): void {
    if (this.closed || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.connect().then(
        () => {
          if (!this.closed) this.onNotify(''); // anything sent while it was away
        },
        () => {
          this.delay = Math.min(this.delay * 2, LISTEN_RETRY_MS.max);
          this.scheduleReconnect();
        },
      );
    }, this.delay);
    this.timer.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    const c = this.client;
    this.client = null;
    await c?.end().catch(() => {});
  }
}

async function openPglite(dataDir: string): Promise<Database> {
  const dir = path.resolve(dataDir, 'pglite');
  mkdirSync(dir, { recursive: true });
  const release = acquireLock(path.resolve(dataDir, 'pglite.lock'));
  try {
    const { PGlite } = await importModule<typeof import('@electric-sql/pglite')>('@electric-sql/pglite');
    const { PGliteDialect } = await import('kysely-pglite-dialect');
    const client = await PGlite.create(dir);
    const db = new Kysely<DB>({ dialect: new PGliteDialect(client) });
    return {
      db,
      kind: 'pglite',
      withoutTimeouts: (fn) => fn(db),
      async listen(channel, onNotify) {
        const unlisten = await client.listen(channel, onNotify);
        return async () => unlisten();
      },
      async dumpDataDir() {
        return new Uint8Array(await (await client.dumpDataDir('gzip')).arrayBuffer());
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

// A real Postgres database of its own for each test file, migrated, dropped afterwards.
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { openDatabase, type Database } from '../../../src/db/database.ts';
import { migrateToLatest } from '../../../src/db/migrate.ts';

export const ADMIN_URL = process.env.TEST_DATABASE_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

function urlFor(name: string): string {
  const u = new URL(ADMIN_URL);
  u.pathname = `/${name}`;
  return u.toString();
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: ADMIN_URL, connectionTimeoutMillis: 5_000 });
  try {
    await c.connect();
  } catch (err) {
    throw new Error(`tests need the machine's Postgres at ${ADMIN_URL}: ${(err as Error).message}`);
  }
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

export interface TestDatabase {
  url: string;
  name: string;
  database: Database;
  drop(): Promise<void>;
}

export async function createTestDatabase(opts: { migrate?: boolean } = {}): Promise<TestDatabase> {
  const name = `installer_t_${randomBytes(6).toString('hex')}`;
  await admin((c) => c.query(`CREATE DATABASE ${name}`));
  const url = urlFor(name);
  const database = await openDatabase({ url, dataDir: '/nonexistent', poolSize: 5 });
  if (opts.migrate !== false) await migrateToLatest(database.db);
  return {
    url,
    name,
    database,
    async drop() {
      await database.close();
      await admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    },
  };
}

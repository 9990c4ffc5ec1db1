// Runs the Kysely migrations in migrations/. A schema that is *ahead* of this build (a newer
// release migrated it, then was rolled back) is reported, not treated as corruption: this build
// must tolerate it, and there are no down-migrations.
import { sql, type Kysely } from 'kysely';
import { Migrator, type Migration, type MigrationProvider } from 'kysely/migration';
import { readdir } from 'node:fs/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import path from 'node:path';
import { importModule } from './import-module.ts';
import type { Database } from './database.ts';

const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));
const MIGRATION_TABLE = 'kysely_migration';

class DirectoryProvider implements MigrationProvider {
  constructor(private readonly dir: string) {}
  async getMigrations(): Promise<Record<string, Migration>> {
    const files = (await readdir(this.dir)).filter((f) => /^\d{4}_[a-z0-9_]+\.(ts|js)$/.test(f)).sort();
    const out: Record<string, Migration> = {};
    for (const f of files) {
      out[f.replace(/\.(ts|js)$/, '')] = await importModule<Migration>(pathToFileURL(path.join(this.dir, f)).href);
    }
    return out;
  }
}

export interface MigrationOutcome {
  applied: string[];
  current: string | null;
  /** Migrations recorded in the database that this build does not know. */
  ahead: string[];
}

export async function knownMigrations(dir = MIGRATIONS_DIR): Promise<string[]> {
  return Object.keys(await new DirectoryProvider(dir).getMigrations());
}

export async function migrateToLatest(db: Kysely<any>, dir = MIGRATIONS_DIR): Promise<MigrationOutcome> {
  const known = await knownMigrations(dir);
  const executed = await executedMigrations(db);
  const ahead = executed.filter((m) => !known.includes(m));
  if (ahead.length > 0) {
    const missing = known.filter((m) => !executed.includes(m));
    if (missing.length > 0) {
      throw new Error(
        `the schema has migrations this build does not know (${ahead.join(', ')}) and lacks ones it needs (${missing.join(', ')}); manual recovery needed`,
      );
    }
    return { applied: [], current: await currentMigration(db), ahead };
  }
  const migrator = new Migrator({ db, provider: new DirectoryProvider(dir), migrationTableName: MIGRATION_TABLE });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error');
    throw new Error(`migration ${failed?.migrationName ?? '(unknown)'} failed: ${(error as Error).message ?? String(error)}`);
  }
  return {
    applied: (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName),
    current: await currentMigration(db),
    ahead: [],
  };
}

/**
 * The init's and the migrate CLI's migration: on a connection without the statement timeout, so
 * that an index build or a rewrite on a large table runs to its end instead of failing every update
 * (docs/adr/0045-migrations-checked-for-the-old-build.md).
 */
export function migrateDatabase(database: Database, dir = MIGRATIONS_DIR): Promise<MigrationOutcome> {
  return database.withoutTimeouts((db) => migrateToLatest(db, dir));
}

/** The names of the migrations this database has applied, in order. */
export async function executedMigrations(db: Kysely<any>): Promise<string[]> {
  const exists = await sql<{ present: boolean }>`select to_regclass(${MIGRATION_TABLE}) is not null as present`.execute(db);
  if (!exists.rows[0]?.present) return [];
  const rows = await db.selectFrom(MIGRATION_TABLE).select('name').orderBy('name').execute();
  return rows.map((r: { name: string }) => r.name);
}

/** The name of the newest applied schema migration (recorded as `preUpdateMigration` by a self-update). */
export async function currentMigration(db: Kysely<any>): Promise<string | null> {
  const names = await executedMigrations(db);
  return names.length ? names[names.length - 1]! : null;
}

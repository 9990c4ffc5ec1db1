// The schema migrations run without the 30 s statement timeout (docs/adr/0045-migrations-checked-for-the-old-build.md):
// on a database opened with a short timeout, a migration slower than it fails through the app's
// pool and completes through migrateDatabase, which the init and the migrate CLI use; the app's
// own pool keeps its timeout.
import { afterEach, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { fileURLToPath } from 'node:url';
import { openDatabase, type Database } from '../../src/db/database.ts';
import { migrateDatabase, migrateToLatest } from '../../src/db/migrate.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';

const SLOW = fileURLToPath(new URL('../fixtures/slow-migration/', import.meta.url));

describe('migrations without the statement timeout', () => {
  let t: TestDatabase | undefined;
  let d: Database | undefined;
  afterEach(async () => {
    await d?.close();
    await t?.drop();
    d = t = undefined;
  });

  it('completes a migration slower than the timeout, which the pool would cancel', async () => {
    t = await createTestDatabase({ migrate: false });
    d = await openDatabase({ url: t.url, dataDir: '/nonexistent', statementTimeoutMs: 500 });
    await expect(migrateToLatest(d.db, SLOW)).rejects.toThrow(/0001_slow failed: canceling statement due to statement timeout/);

    const outcome = await migrateDatabase(d, SLOW);
    expect(outcome.applied).toEqual(['0001_slow']);
    const row = await sql<{ statement_timeout: string }>`select statement_timeout from slow_done`.execute(d.db);
    expect(row.rows).toEqual([{ statement_timeout: '0' }]);
    const pool = await sql<{ statement_timeout: string }>`show statement_timeout`.execute(d.db);
    expect(pool.rows[0]!.statement_timeout).toBe('500ms');
  });
});

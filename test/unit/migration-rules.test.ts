// The expand-only rule for migrations (docs/adr/0045-migrations-checked-for-the-old-build.md): the
// check refuses each kind of breach in sample migrations, accepts a marked contract step, and
// passes on the project's own migrations, as CI runs it.
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { breachesOf, checkMigrations, describeCheck } from '../../src/db/migration-rules.ts';

const FIXTURES = fileURLToPath(new URL('../fixtures/migration-rules/', import.meta.url));
const ROOT = fileURLToPath(new URL('../../', import.meta.url));

describe('the migrations check', () => {
  it('refuses every kind of breach in the sample migrations, and only those', async () => {
    const c = await checkMigrations(FIXTURES, {});
    const by = new Map<string, string[]>();
    for (const f of c.refused) by.set(f.migration, [...(by.get(f.migration) ?? []), f.breach]);
    expect(Object.fromEntries(by)).toEqual({
      '0002_drop_column': ['drop'],
      '0003_rename_column': ['rename'],
      '0004_type_change': ['type-change'],
      '0005_set_not_null': ['set-not-null'],
      '0006_not_null_column': ['set-not-null'],
      '0007_backfill': ['backfill'],
      '0008_delete': ['backfill'],
      '0009_check_constraint': ['narrowing-constraint'],
      '0010_drop_table': ['drop'],
      '0011_rename_table': ['rename'],
      '0013_bad_mark': ['drop'],
      '0014_unique_index': ['narrowing-constraint'],
    });
    // The marked contract step passes; the half-marked one is named as such.
    expect(c.problems).toEqual([expect.stringMatching(/^0013_bad_mark: a contract step names the release it ships in/)]);
    expect(describeCheck(c).at(-1)).toMatch(/step = 'contract'/);
  });

  it("accepts the project's migrations, 0004 only because it is grandfathered", async () => {
    const dir = fileURLToPath(new URL('../../migrations/', import.meta.url));
    expect(describeCheck(await checkMigrations(dir))).toEqual([]);
    const strict = await checkMigrations(dir, {});
    expect([...new Set(strict.refused.map((f) => f.migration))]).toEqual(['0004_self_update_undecided']);
  });

  it('reads raw SQL as the builder writes it', () => {
    const created = new Set<string>();
    expect(breachesOf('CREATE TABLE jobs2 (id int)', created)).toEqual([]);
    expect(breachesOf('alter table jobs2 add column x int not null', created)).toEqual([]); // its own new table
    expect(breachesOf('alter table "jobs" add column "x" integer not null', created)).toEqual(['set-not-null']);
    expect(breachesOf('alter table jobs add column x integer default 0 not null', created)).toEqual([]);
    expect(breachesOf("comment on column users.x is 'drop table users; update users'", created)).toEqual([]);
    expect(breachesOf('ALTER TABLE jobs ALTER COLUMN x TYPE bigint', created)).toEqual(['type-change']);
    expect(breachesOf('alter index jobs_x rename to jobs_y', created)).toEqual(['rename']);
    expect(breachesOf('create index concurrently jobs_x on jobs (x)', created)).toEqual([]);
  });

  it('fails the CI command on a breach, naming the migration and the rule', () => {
    const node = process.execPath;
    const bad = spawnSync(node, ['--import', 'tsx', 'scripts/check-migrations.ts', FIXTURES], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/check-migrations: 0002_drop_column drops a table, column, constraint or index/);
    const good = spawnSync(node, ['--import', 'tsx', 'scripts/check-migrations.ts'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
    expect(good.stderr).toBe('');
    expect(good.status).toBe(0);
  });
});

// The database backup of a self-update's preflight, for the embedded database on a real PGlite:
// the file is a copy of the data directory that a new PGlite opens with the schema of the moment it
// was taken, the last N are kept, and a backup that cannot be written fails with nothing left over.
// The file names and the retention rule are those of the Postgres backup too (test/e2e/self-update-backup.test.ts).
import { describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { openDatabase } from '../../src/db/database.ts';
import { currentMigration, migrateToLatest } from '../../src/db/migrate.ts';
import { BACKUP_SPACE, backupFileName, backupsToRemove, checkSpace, EmbeddedBackup, estimateNextBackup } from '../../src/adapters/database-backup.ts';

const DIGEST = 'sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef';

describe('backup file names and retention', () => {
  it('names the UTC time to the millisecond and the build it was taken from', () => {
    const at = new Date('2026-11-25T00:15:00.123Z');
    expect(backupFileName(at, DIGEST, 'dump')).toBe('installer-20261125T001500123Z-sha256-0123456789ab.dump');
    expect(backupFileName(at, null, 'tar.gz')).toBe('installer-20261125T001500123Z-unknown.tar.gz');
    // An image id (no registry digest) is named the same way; anything else is `unknown`.
    expect(backupFileName(at, 'sha256:fedcba9876543210', 'dump')).toBe('installer-20261125T001500123Z-sha256-fedcba987654.dump');
    expect(backupFileName(at, '../../etc/passwd', 'dump')).toBe('installer-20261125T001500123Z-unknown.dump');
  });

  it('keeps the newest N of its own files, drops unfinished ones and never touches others', () => {
    const names = [
      'installer-20261125T001500000Z-sha256-aaaaaaaaaaaa.dump',
      'installer-20261124T001500000Z-sha256-bbbbbbbbbbbb.dump',
      'installer-20261126T001500000Z-unknown.dump',
      'installer-20261123T001500000Z-sha256-cccccccccccc.dump.partial',
      'operator-copy.dump',
      'lost+found',
    ];
    // A copy a restart interrupted (`.partial`) goes too; it never counts as a backup.
    const partial = 'installer-20261123T001500000Z-sha256-cccccccccccc.dump.partial';
    expect(backupsToRemove(names, 2)).toEqual(['installer-20261124T001500000Z-sha256-bbbbbbbbbbbb.dump', partial]);
    expect(backupsToRemove(names, 1)).toEqual(['installer-20261124T001500000Z-sha256-bbbbbbbbbbbb.dump', 'installer-20261125T001500000Z-sha256-aaaaaaaaaaaa.dump', partial]);
    expect(backupsToRemove(names, 5)).toEqual([partial]);
    expect(backupsToRemove(['operator.dump.partial', 'lost+found'], 1)).toEqual([]);
  });

  it('never removes a backup an unresolved schema alarm names, nor counts it', () => {
    const oldest = 'installer-20261120T001500000Z-sha256-aaaaaaaaaaaa.dump';
    const names = [oldest, 'installer-20261121T001500000Z-sha256-bbbbbbbbbbbb.dump', 'installer-20261122T001500000Z-sha256-cccccccccccc.dump'];
    expect(backupsToRemove(names, 1)).toEqual([oldest, names[1]]);
    expect(backupsToRemove(names, 1, [oldest])).toEqual([names[1]]);
    expect(backupsToRemove(names, 2, [oldest])).toEqual([]);
  });

  it('estimates the next backup and refuses a volume without room, saying how much is needed and free', () => {
    expect(estimateNextBackup(null, 8_000_000)).toEqual({ bytes: 8_000_000, basis: "the database's size, there being no backup yet" });
    expect(estimateNextBackup(2 * 1024 * 1024, 8_000_000)).toEqual({ bytes: 3 * 1024 * 1024, basis: "the last backup's 2.0 MiB times 1.5" });
    expect(() => checkSpace('/backups', 3 * 1024 * 1024, estimateNextBackup(2 * 1024 * 1024, 1))).not.toThrow();
    let err: (Error & { code?: string }) | undefined;
    try {
      checkSpace('/backups', 1024 * 1024, estimateNextBackup(2 * 1024 * 1024, 1));
    } catch (e) {
      err = e as Error & { code?: string };
    }
    expect(err?.code).toBe(BACKUP_SPACE);
    expect(err?.message).toBe(
      "not enough free space for the backup in /backups: it needs about 3.0 MiB (the last backup's 2.0 MiB times 1.5), 1.0 MiB is free; " +
        'free space there or lower SELF_UPDATE_BACKUPS_KEEP (docs/deploy.md, "A full backups volume")',
    );
  });
});

describe('backup of the embedded database', () => {
  it('writes a copy that a new PGlite opens with the schema of its moment, keeping the last N', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'installer-pglite-'));
    const backups = path.join(mkdtempSync(path.join(tmpdir(), 'installer-backups-')), 'backups');
    const d = await openDatabase({ dataDir });
    try {
      await migrateToLatest(d.db);
      const before = await currentMigration(d.db);
      expect(d.dumpDataDir).toBeDefined();
      const b = new EmbeddedBackup(d.dumpDataDir!, backups);
      const first = await b.backup(DIGEST, 2);
      expect(first).toMatchObject({ file: expect.stringMatching(/^installer-\d{8}T\d{9}Z-sha256-0123456789ab\.tar\.gz$/), removed: [], pruneProblem: null });
      // A file of the operator's in the same directory is never removed.
      writeFileSync(path.join(backups, 'operator-copy.tar.gz'), 'kept');
      // What a later build does to the schema after the backup.
      await sql`insert into kysely_migration (name, timestamp) values ('0099_later_build', now())`.execute(d.db);

      // The backup opens with the schema of its moment, without the later migration.
      const { PGlite } = await import('@electric-sql/pglite');
      const restored = await PGlite.create({ loadDataDir: new Blob([readFileSync(path.join(backups, first.file))]) });
      try {
        const names = (await restored.query<{ name: string }>('select name from kysely_migration order by name')).rows.map((r) => r.name);
        expect(names.at(-1)).toBe(before);
        expect(names).not.toContain('0099_later_build');
      } finally {
        await restored.close();
      }

      await new Promise((r) => setTimeout(r, 5));
      const second = await b.backup(DIGEST, 2);
      expect(second.removed).toEqual([]);
      await new Promise((r) => setTimeout(r, 5));
      const third = await b.backup(null, 2);
      expect(third.removed).toEqual([first.file]);
      expect(third.file).toMatch(/-unknown\.tar\.gz$/);
      expect(readdirSync(backups).sort()).toEqual(['operator-copy.tar.gz', second.file, third.file].sort());
    } finally {
      await d.close();
    }
  }, 120_000);

  it('a backups directory that cannot be written fails the backup and leaves nothing behind', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'installer-pglite-'));
    const parent = mkdtempSync(path.join(tmpdir(), 'installer-backups-'));
    // A file where the directory should be: neither mkdir nor the write can succeed.
    const blocked = path.join(parent, 'backups');
    writeFileSync(blocked, 'not a directory');
    const d = await openDatabase({ dataDir });
    try {
      await migrateToLatest(d.db);
      const b = new EmbeddedBackup(d.dumpDataDir!, blocked);
      await expect(b.backup(DIGEST, 5)).rejects.toThrow(/^copying the embedded database into .*backups failed: E(EXIST|NOTDIR)$/);
      expect(readdirSync(parent)).toEqual(['backups']);
      expect(readFileSync(blocked, 'utf8')).toBe('not a directory');
    } finally {
      await d.close();
    }
  }, 120_000);
});

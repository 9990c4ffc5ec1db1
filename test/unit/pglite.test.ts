// The embedded default database: migrations run on PGlite, and its lock keeps a second process out.
import { describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { openDatabase, DatabaseLockedError, acquireLock } from '../../src/db/database.ts';
import { migrateToLatest, currentMigration, knownMigrations } from '../../src/db/migrate.ts';
import { createUser, verifyCredentials } from '../../src/state/users.ts';
import { listActionsPage, recordStarted } from '../../src/state/actions.ts';
import { runEntry } from '../helpers/shared/process.ts';

describe('embedded PGlite', () => {
  it('migrates, stores and reads back', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'installer-pglite-'));
    const d = await openDatabase({ dataDir: dir });
    try {
      expect(d.kind).toBe('pglite');
      const out = await migrateToLatest(d.db);
      expect(out.applied).toEqual(await knownMigrations());
      expect(await currentMigration(d.db)).toBe(out.applied.at(-1));
      await createUser(d.db, { username: 'amy', password: 'amy-password', role: 'viewer' });
      expect((await verifyCredentials(d.db, 'amy', 'amy-password'))?.role).toBe('viewer');
      expect(await verifyCredentials(d.db, 'amy', 'wrong')).toBeNull();
      expect((await migrateToLatest(d.db)).applied).toEqual([]);
    } finally {
      await d.close();
    }
  }, 60_000);

  it('pages and filters the audit trail with the same queries as Postgres', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'installer-pglite-'));
    const d = await openDatabase({ dataDir: dir });
    try {
      await migrateToLatest(d.db);
      for (let i = 0; i < 7; i++) await recordStarted(d.db, { kind: i % 2 ? 'stop' : 'restart', actor: { id: i < 5 ? 'amy' : 'bo' }, detail: `a${i}` });
      const filter = { actor: 'amy', kinds: ['restart' as const], since: '2000-01-01T00:00:00.000000Z' };
      const first = await listActionsPage(d.db, filter, { limit: 2 });
      expect(first.map((r) => r.detail)).toEqual(['a4', 'a2']);
      const next = await listActionsPage(d.db, filter, { before: String(first.at(-1)!.id), limit: 2 });
      expect(next.map((r) => r.detail)).toEqual(['a0']);
    } finally {
      await d.close();
    }
  }, 60_000);

  it('refuses a second process while the first holds the lock, and takes over a stale lock', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'installer-pglite-'));
    const first = await openDatabase({ dataDir: dir });
    try {
      const second = runEntry('src/cli/migrate.ts', { DATA_DIR: dir });
      expect(await second.exited).toBe(1);
      expect(second.output()).toContain(`is in use by process ${process.pid}`);
      await expect(openDatabase({ dataDir: dir })).rejects.toBeInstanceOf(DatabaseLockedError);
    } finally {
      await first.close();
    }
    // A lock file left by a process that no longer exists does not block.
    writeFileSync(path.join(dir, 'pglite.lock'), '2147483646');
    acquireLock(path.join(dir, 'pglite.lock'))();
    // Our own pid, written by an earlier life of this pid (PID 1 after a container restart), is stale too.
    writeFileSync(path.join(dir, 'pglite.lock'), String(process.pid));
    const again = await openDatabase({ dataDir: dir });
    await again.close();
  }, 60_000);
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry } from '../helpers/shared/process.ts';
import { verifyCredentials } from '../../src/state/users.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => db?.drop());

describe('user CLI', () => {
  it('adds a user with the password from stdin, lists it, and resets its password', async () => {
    const env = { DATABASE_URL: db.url, DATA_DIR: '/tmp', LOG_LEVEL: 'warn' };
    const add = runEntry('src/cli/user.ts', env, ['add', 'carol', 'operator'], 'carol-password\n');
    expect(await add.exited).toBe(0);
    expect((await verifyCredentials(db.database.db, 'carol', 'carol-password'))?.role).toBe('operator');
    // Hashed at today's cost, the parameters stored with the hash: scrypt N=2^17, r=8, p=1.
    expect((await db.database.db.selectFrom('users').select('password_hash').where('username', '=', 'carol').executeTakeFirstOrThrow()).password_hash).toMatch(/^scrypt\$131072\$8\$1\$/);
    const list = runEntry('src/cli/user.ts', env, ['list']);
    expect(await list.exited).toBe(0);
    expect(list.output()).toContain('carol\toperator');
    const again = runEntry('src/cli/user.ts', env, ['add', 'carol', 'viewer'], 'other-password\n');
    expect(await again.exited).toBe(1);
    expect(again.output()).toContain('exists');
    const pw = runEntry('src/cli/user.ts', env, ['passwd', 'carol', 'admin'], 'new-password-2\n');
    expect(await pw.exited).toBe(0);
    expect((await verifyCredentials(db.database.db, 'carol', 'new-password-2'))?.role).toBe('admin');
  });

  it('rejects bad names, roles and short passwords without touching the database', async () => {
    const env = { DATABASE_URL: db.url, DATA_DIR: '/tmp' };
    const badName = runEntry('src/cli/user.ts', env, ['add', 'Robert;rm', 'viewer'], 'long-enough\n');
    expect(await badName.exited).toBe(2);
    const badRole = runEntry('src/cli/user.ts', env, ['add', 'dave', 'root'], 'long-enough\n');
    expect(await badRole.exited).toBe(2);
    const short = runEntry('src/cli/user.ts', env, ['add', 'erin', 'viewer'], 'short\n');
    expect(await short.exited).toBe(1);
    expect(short.output()).toContain('at least 12');
  });
});

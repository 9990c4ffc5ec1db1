// Local users. Passwords are stored as scrypt hashes; verification is constant-time.
import { randomBytes, scrypt as scryptCb, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { DB, Role, User } from '../db/schema.ts';

const scrypt = (password: string, salt: Buffer, keylen: number, opts: ScryptOptions) =>
  new Promise<Buffer>((resolve, reject) =>
    scryptCb(password, salt, keylen, opts, (err, key) => (err ? reject(err) : resolve(key))),
  );

const PARAMS = { N: 16384, r: 8, p: 1, keylen: 32 };

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scrypt(password, salt, PARAMS.keylen, { N: PARAMS.N, r: PARAMS.r, p: PARAMS.p });
  return ['scrypt', PARAMS.N, PARAMS.r, PARAMS.p, salt.toString('base64url'), key.toString('base64url')].join('$');
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, hash] = stored.split('$');
  if (scheme !== 'scrypt' || !salt || !hash) return false;
  const expected = Buffer.from(hash, 'base64url');
  const key = await scrypt(password, Buffer.from(salt, 'base64url'), expected.length, {
    N: Number(n), r: Number(r), p: Number(p),
  });
  return key.length === expected.length && timingSafeEqual(key, expected);
}

// A hash of a random password, verified against when the user does not exist, so that an unknown
// user name costs the same time as a wrong password.
let decoyHash: Promise<string> | undefined;

export async function verifyCredentials(db: Kysely<DB>, username: string, password: string): Promise<User | null> {
  const user = await db.selectFrom('users').selectAll().where('username', '=', username).executeTakeFirst();
  decoyHash ??= hashPassword(randomBytes(16).toString('hex'));
  const ok = await verifyPassword(password, user?.password_hash ?? (await decoyHash));
  return user && ok ? user : null;
}

export const USERNAME_RULE = /^[a-z_][a-z0-9_.-]{0,63}$/;

export async function createUser(db: Kysely<DB>, input: { username: string; password: string; role: Role }): Promise<User> {
  return db
    .insertInto('users')
    .values({ username: input.username, password_hash: await hashPassword(input.password), role: input.role })
    .returningAll()
    .executeTakeFirstOrThrow();
}

export async function setPassword(db: Kysely<DB>, username: string, password: string, role?: Role): Promise<boolean> {
  const res = await db
    .updateTable('users')
    .set({ password_hash: await hashPassword(password), updated_at: new Date(), ...(role ? { role } : {}) })
    .where('username', '=', username)
    .executeTakeFirst();
  return Number(res.numUpdatedRows) > 0;
}

export async function findUser(db: Kysely<DB>, username: string): Promise<User | undefined> {
  return db.selectFrom('users').selectAll().where('username', '=', username).executeTakeFirst();
}

export async function countUsers(db: Kysely<DB>): Promise<number> {
  const row = await db.selectFrom('users').select((eb) => eb.fn.countAll<string>().as('n')).executeTakeFirstOrThrow();
  return Number(row.n);
}

export async function listUsers(db: Kysely<DB>): Promise<Pick<User, 'username' | 'role' | 'created_at'>[]> {
  return db.selectFrom('users').select(['username', 'role', 'created_at']).orderBy('username').execute();
}

// Local users. Passwords are stored as scrypt hashes; verification is constant-time.
import { randomBytes, scrypt as scryptCb, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { sql, type Kysely, type Transaction } from 'kysely';
import type { DB, Role, User } from '../db/schema.ts';
import { conflict, notFound } from '../errors.ts';

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

export async function createUser(db: Kysely<DB>, input: { username: string; password: string; role: Role; mustChangePassword?: boolean }): Promise<User> {
  return db
    .insertInto('users')
    .values({ username: input.username, password_hash: await hashPassword(input.password), role: input.role, must_change_password: input.mustChangePassword ?? false })
    .returningAll()
    .executeTakeFirstOrThrow();
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

// ---------------------------------------------------------------------------------------------
// Managing users (docs/adr/0016-user-management.md). Every change that must end a user's tokens
// bumps `token_generation`; every change notifies USERS_CHANNEL in the same transaction, so each
// installer process on this database refreshes what it knows of that user.

/** NOTIFY channel whose payload is the user name that changed ('' = reload everyone). */
export const USERS_CHANNEL = 'installer_users';

export const PASSWORD_MIN = 12;
export const PASSWORD_MAX = 1024;
export const USERNAME_MAX = 64;
export const USERNAME_RULE_TEXT = `1-${USERNAME_MAX} characters: lower-case letters, digits, _ . - (starting with a letter or _)`;
export const PASSWORD_RULE_TEXT = `${PASSWORD_MIN}-${PASSWORD_MAX} characters`;

/** Why a password cannot be used, or null. */
export function passwordProblem(password: string): string | null {
  if (password.length < PASSWORD_MIN) return `the password must be at least ${PASSWORD_MIN} characters`;
  if (password.length > PASSWORD_MAX) return `the password must be at most ${PASSWORD_MAX} characters`;
  return null;
}

/** What the API and the token check know of a user: never the hash. */
export interface UserView {
  /** The row's id: tokens name it as `uid`, so a user deleted and added again under the same name gets none of the old tokens. */
  id: number;
  username: string;
  role: Role;
  disabled: boolean;
  mustChangePassword: boolean;
  tokenGeneration: number;
  createdAt: Date;
  updatedAt: Date;
}

type Db = Kysely<DB> | Transaction<DB>;

function view(u: User): UserView {
  return {
    id: u.id,
    username: u.username,
    role: u.role,
    disabled: u.disabled_at !== null,
    mustChangePassword: u.must_change_password,
    tokenGeneration: u.token_generation,
    createdAt: new Date(u.created_at),
    updatedAt: new Date(u.updated_at),
  };
}

export async function userViews(db: Db, username?: string): Promise<UserView[]> {
  let q = db.selectFrom('users').selectAll().orderBy('username');
  if (username !== undefined) q = q.where('username', '=', username);
  return (await q.execute()).map(view);
}

async function notifyUsers(tx: Db, username: string): Promise<void> {
  await sql`select pg_notify(${USERS_CHANNEL}, ${username})`.execute(tx);
}

/** The user row locked for a change, with every enabled admin locked too (the last-admin rule). */
async function lockForChange(tx: Transaction<DB>, username: string): Promise<{ user: User; enabledAdmins: number }> {
  const admins = await tx.selectFrom('users').select('username').where('role', '=', 'admin').where('disabled_at', 'is', null).orderBy('id').forUpdate().execute();
  const user = await tx.selectFrom('users').selectAll().where('username', '=', username).forUpdate().executeTakeFirst();
  if (!user) throw notFound(`no user ${username}`);
  return { user, enabledAdmins: admins.length };
}

const LAST_ADMIN = 'the last admin cannot be removed, disabled or demoted: make another user admin first';

function isLastAdmin(user: User, enabledAdmins: number): boolean {
  return user.role === 'admin' && user.disabled_at === null && enabledAdmins <= 1;
}

export async function addUser(db: Kysely<DB>, input: { username: string; password: string; role: Role; mustChangePassword: boolean }): Promise<UserView> {
  const hash = await hashPassword(input.password);
  return db.transaction().execute(async (tx) => {
    const row = await tx
      .insertInto('users')
      .values({ username: input.username, password_hash: hash, role: input.role, must_change_password: input.mustChangePassword })
      .onConflict((oc) => oc.column('username').doNothing())
      .returningAll()
      .executeTakeFirst();
    if (!row) throw conflict(`user ${input.username} exists`);
    await notifyUsers(tx, input.username);
    return view(row);
  });
}

/** Changes a user's role or status; either ends the user's tokens. */
export async function changeUser(db: Kysely<DB>, username: string, change: { role?: Role; disabled?: boolean }): Promise<{ before: UserView; after: UserView }> {
  return db.transaction().execute(async (tx) => {
    const { user, enabledAdmins } = await lockForChange(tx, username);
    const demoted = change.role !== undefined && change.role !== 'admin';
    if (isLastAdmin(user, enabledAdmins) && (demoted || change.disabled === true)) throw conflict(LAST_ADMIN);
    const roleChanges = change.role !== undefined && change.role !== user.role;
    const statusChanges = change.disabled !== undefined && change.disabled !== (user.disabled_at !== null);
    if (!roleChanges && !statusChanges) {
      await notifyUsers(tx, username); // nothing to change, but a writer waits for this notice
      return { before: view(user), after: view(user) };
    }
    const row = await tx
      .updateTable('users')
      .set({
        ...(roleChanges ? { role: change.role! } : {}),
        ...(statusChanges ? { disabled_at: change.disabled ? new Date() : null } : {}),
        token_generation: sql<number>`token_generation + 1`,
        updated_at: new Date(),
      })
      .where('id', '=', user.id)
      .returningAll()
      .executeTakeFirstOrThrow();
    await notifyUsers(tx, username);
    return { before: view(user), after: view(row) };
  });
}

/** Sets a new password and ends the user's tokens; `mustChangePassword` when someone else chose it. */
export async function resetPassword(db: Kysely<DB>, username: string, password: string, opts: { mustChangePassword: boolean; role?: Role }): Promise<UserView> {
  const hash = await hashPassword(password);
  return db.transaction().execute(async (tx) => {
    const { user, enabledAdmins } = await lockForChange(tx, username);
    if (opts.role !== undefined && opts.role !== 'admin' && isLastAdmin(user, enabledAdmins)) throw conflict(LAST_ADMIN);
    const row = await tx
      .updateTable('users')
      .set({
        password_hash: hash,
        must_change_password: opts.mustChangePassword,
        ...(opts.role !== undefined ? { role: opts.role } : {}),
        token_generation: sql<number>`token_generation + 1`,
        updated_at: new Date(),
      })
      .where('id', '=', user.id)
      .returningAll()
      .executeTakeFirstOrThrow();
    await notifyUsers(tx, username);
    return view(row);
  });
}

/**
 * A user changes their own password: the current one is checked first. Null when it is wrong
 * (the caller answers without saying which part was wrong).
 */
export async function changeOwnPassword(db: Kysely<DB>, username: string, current: string, next: string): Promise<UserView | null> {
  const user = await findUser(db, username);
  if (!user || user.disabled_at !== null || !(await verifyPassword(current, user.password_hash))) return null;
  return resetPassword(db, username, next, { mustChangePassword: false });
}

export async function deleteUser(db: Kysely<DB>, username: string): Promise<UserView> {
  return db.transaction().execute(async (tx) => {
    const { user, enabledAdmins } = await lockForChange(tx, username);
    if (isLastAdmin(user, enabledAdmins)) throw conflict(LAST_ADMIN);
    await tx.deleteFrom('users').where('id', '=', user.id).execute();
    await notifyUsers(tx, username);
    return view(user);
  });
}

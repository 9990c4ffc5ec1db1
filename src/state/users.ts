// Local users. Passwords are stored as scrypt hashes that carry their parameters; verification is
// constant-time, and a hash with older parameters is replaced at the user's next sign-in.
import { randomBytes, scrypt as scryptCb, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import PQueue from 'p-queue';
import { sql, type Kysely, type Transaction } from 'kysely';
import type { DB, Role, User } from '../db/schema.ts';
import { conflict, notFound } from '../errors.ts';

/**
 * scrypt's parameters for new hashes: N=2^17, r=8, p=1 (OWASP's password storage advice), which
 * takes 128·N·r = 128 MiB and a few hundred milliseconds per hash. Each stored hash names its own
 * (`scrypt$N$r$p$salt$key`), so hashes made with older parameters keep verifying.
 */
export const PASSWORD_HASH = { N: 2 ** 17, r: 8, p: 1, keylen: 32, saltBytes: 16 } as const;

/** The largest parameters a stored hash may name (a damaged row must not make a hash take gigabytes). */
const MAX_N = 2 ** 20;
const MAX_R = 32;
const MAX_P = 16;

/**
 * Hashes run at most two at a time: each holds 128 MiB while it runs, and they share the thread
 * pool with file and DNS work. Sign-in is throttled before it gets here (routes/auth.ts), so the
 * queue stays short.
 */
const hashing = new PQueue({ concurrency: 2 });

const scrypt = (password: string, salt: Buffer, keylen: number, opts: ScryptOptions) =>
  hashing.add(
    () =>
      new Promise<Buffer>((resolve, reject) =>
        // Node refuses a hash above maxmem (32 MiB by default): allow what these parameters need, twice.
        scryptCb(password, salt, keylen, { ...opts, maxmem: 2 * 128 * opts.N! * opts.r! }, (err, key) => (err ? reject(err) : resolve(key))),
      ),
  );

interface StoredHash {
  N: number;
  r: number;
  p: number;
  salt: Buffer;
  key: Buffer;
}

function parseHash(stored: string): StoredHash | null {
  const [scheme, n, r, p, salt, key, ...rest] = stored.split('$');
  if (scheme !== 'scrypt' || !salt || !key || rest.length) return null;
  const N = Number(n);
  const R = Number(r);
  const P = Number(p);
  const fine = (x: number, max: number) => Number.isInteger(x) && x >= 1 && x <= max;
  // N must be a power of two above 1.
  if (!fine(N, MAX_N) || N < 2 || (N & (N - 1)) !== 0 || !fine(R, MAX_R) || !fine(P, MAX_P)) return null;
  return { N, r: R, p: P, salt: Buffer.from(salt, 'base64url'), key: Buffer.from(key, 'base64url') };
}

export async function hashPassword(password: string): Promise<string> {
  const { N, r, p, keylen, saltBytes } = PASSWORD_HASH;
  const salt = randomBytes(saltBytes);
  const key = await scrypt(password, salt, keylen, { N, r, p });
  return ['scrypt', N, r, p, salt.toString('base64url'), key.toString('base64url')].join('$');
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const h = parseHash(stored);
  if (!h || h.key.length === 0) return false;
  const key = await scrypt(password, h.salt, h.key.length, { N: h.N, r: h.r, p: h.p });
  return key.length === h.key.length && timingSafeEqual(key, h.key);
}

/** Whether a stored hash was made with other parameters than today's (it is replaced at the next sign-in). */
export function hashIsOutdated(stored: string): boolean {
  const h = parseHash(stored);
  const want = PASSWORD_HASH;
  return !h || h.N !== want.N || h.r !== want.r || h.p !== want.p || h.key.length !== want.keylen || h.salt.length !== want.saltBytes;
}

// A hash of a random password, verified against when the user does not exist, so that an unknown
// user name costs the same time as a wrong password.
let decoyHash: Promise<string> | undefined;

/** The user when the password is right (disabled or not: sign-in decides); null otherwise. */
export async function verifyCredentials(db: Kysely<DB>, username: string, password: string): Promise<User | null> {
  const user = await db.selectFrom('users').selectAll().where('username', '=', username).executeTakeFirst();
  decoyHash ??= hashPassword(randomBytes(16).toString('hex'));
  const ok = await verifyPassword(password, user?.password_hash ?? (await decoyHash));
  return user && ok ? user : null;
}

/**
 * After a successful sign-in: replaces a hash made with older parameters by one with today's, for
 * the same password. Only if the stored hash is still the one checked (a password changed
 * meanwhile wins). True when it was replaced.
 */
export async function upgradePasswordHash(db: Kysely<DB>, user: Pick<User, 'id' | 'password_hash'>, password: string): Promise<boolean> {
  if (!hashIsOutdated(user.password_hash)) return false;
  const hash = await hashPassword(password);
  const res = await db.updateTable('users').set({ password_hash: hash }).where('id', '=', user.id).where('password_hash', '=', user.password_hash).executeTakeFirst();
  return Number(res.numUpdatedRows) === 1;
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

/** The columns a user's standing is read from: what the token check needs of the row. */
type StandingColumns = Pick<User, 'id' | 'username' | 'role' | 'disabled_at' | 'must_change_password' | 'token_generation'>;

function standingOf(u: StandingColumns) {
  return {
    id: u.id,
    username: u.username,
    role: u.role,
    disabled: u.disabled_at !== null,
    mustChangePassword: u.must_change_password,
    tokenGeneration: u.token_generation,
  };
}

function view(u: User): UserView {
  return { ...standingOf(u), createdAt: new Date(u.created_at), updatedAt: new Date(u.updated_at) };
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

// ---------------------------------------------------------------------------------------------
// Signed-out tokens (docs/adr/0016-user-management.md). Each sign-in token carries an id (`jti`);
// signing out records it until the token expires, and notifies USERS_CHANNEL with the user name,
// so every installer process re-reads that user's standing, revoked ids included.

/** What the token check keeps of each user: the standing, and the ids of their signed-out tokens. */
export interface UserStandingRow extends Pick<UserView, 'id' | 'username' | 'role' | 'disabled' | 'mustChangePassword' | 'tokenGeneration'> {
  revokedTokens: ReadonlySet<string>;
}

/** Every user's standing (or the one named), with the ids of their signed-out tokens not yet expired. */
export async function userStandings(db: Db, username?: string): Promise<UserStandingRow[]> {
  let users = db.selectFrom('users').select(['id', 'username', 'role', 'disabled_at', 'must_change_password', 'token_generation']);
  if (username !== undefined) users = users.where('username', '=', username);
  const rows = await users.execute();
  if (!rows.length) return [];
  let revoked = db.selectFrom('revoked_tokens').select(['user_id', 'jti']).where('expires_at', '>', sql<Date>`now()`);
  if (username !== undefined) revoked = revoked.where('user_id', 'in', rows.map((r) => r.id));
  const byUser = new Map<number, Set<string>>();
  for (const r of await revoked.execute()) {
    let set = byUser.get(r.user_id);
    if (!set) byUser.set(r.user_id, (set = new Set()));
    set.add(r.jti);
  }
  return rows.map((u) => ({ ...standingOf(u), revokedTokens: byUser.get(u.id) ?? new Set<string>() }));
}

/**
 * Signs a token out: its id is refused until `expiresAt`, by this process once the caller has
 * refreshed the user, and by every other one when the notice arrives. Ids of tokens already
 * expired are removed in the same transaction.
 */
export async function revokeToken(db: Kysely<DB>, token: { jti: string; userId: number; username: string; expiresAt: Date }): Promise<void> {
  await db.transaction().execute(async (tx) => {
    await tx
      .insertInto('revoked_tokens')
      .columns(['jti', 'user_id', 'expires_at'])
      .expression((eb) => eb.selectFrom('users').select([eb.val(token.jti).as('jti'), 'id', eb.val(token.expiresAt).as('expires_at')]).where('id', '=', token.userId))
      .onConflict((oc) => oc.column('jti').doNothing())
      .execute();
    await tx.deleteFrom('revoked_tokens').where('expires_at', '<=', sql<Date>`now()`).execute();
    await notifyUsers(tx, token.username);
  });
}

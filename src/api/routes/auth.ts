// Sign-in and sign-out for local users, and a user changing their own password. Tokens are JWTs
// that expire (TOKEN_TTL_SECONDS), name the user's token generation and carry an id (`jti`) that
// sign-out revokes. Every sign-in attempt is counted in the database before its password is
// checked: per client address (an IPv6 client by its /64) and per user name, or, for a device that
// signed in as that user before (its device cookie), per device alone, so that strangers failing
// at a user name do not keep that user out (docs/adr/0016-user-management.md).
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { USERNAME_MAX, type UserView } from '../../state/users.ts';
import type { CountedAttempt, CounterLimit } from '../../state/sign-in-throttle.ts';
import { clientKey, cookieValue, deviceCookieName, DeviceTokens, type Device } from '../../auth/sign-in.ts';
import { AppError, badRequest, forbidden, unauthenticated } from '../../errors.ts';
import { ROLES } from '../../db/schema.ts';
import { ACTOR_KINDS } from '../../contracts/audit.ts';
import { newPasswordSchema } from './users.ts';

const loginBody = z.object({
  // No user name holds a control character, and Postgres text cannot hold NUL: refused as bad input
  // before it reaches the throttle's counters or the users table.
  username: z.string().min(1).max(USERNAME_MAX).regex(/^\P{Cc}+$/u, 'username must not contain control characters'),
  password: z.string().min(1).max(1024),
});

const principalSchema = z.object({
  kind: z.enum(['user', 'service']),
  /** The name audit rows record for this caller: a person the control plane forwards reads `platform:<id>`. */
  username: z.string(),
  actorKind: z.enum(ACTOR_KINDS).describe('Who vouches for the caller: a local user, a person the control plane forwarded, or the control plane itself'),
  role: z.enum(ROLES as [string, ...string[]]),
  /** Users only: they must choose a new password before anything else. */
  mustChangePassword: z.boolean().optional(),
});

const tokenSchema = z.object({
  token: z.string(),
  tokenType: z.literal('Bearer'),
  expiresAt: z.string(),
  user: z.object({ username: z.string(), role: z.string(), mustChangePassword: z.boolean() }),
});

const passwordBody = z.strictObject({
  currentPassword: z.string().min(1, 'currentPassword is required').max(1024),
  newPassword: newPasswordSchema,
});

/** The answer to a wrong password, an unknown user name and a disabled user alike. */
const WRONG = 'wrong user name or password';

/** Expired counters are removed after this many attempts counted by this process. */
const PRUNE_EVERY = 200;

/** A counter with the rule it stands for, as the 429 names it. */
interface Counter extends CounterLimit {
  rule: string;
}

export const authRoutes: FastifyPluginAsyncZod<{ jwtSecret: string }> = async (app, { jwtSecret }) => {
  const auth = app.requests.auth;
  const perClient = app.settings.LOGIN_RATE_LIMIT_PER_MINUTE;
  const perUser = app.settings.LOGIN_FAILURES_PER_USER_PER_MINUTE;
  const devices = new DeviceTokens(jwtSecret);
  let sincePrune = 0;

  /** Counts an attempt on its counters before anything is checked; 429 when one is past its limit. */
  const admitAttempt = async (req: FastifyRequest, reply: FastifyReply, counters: Counter[]): Promise<CountedAttempt[]> => {
    if (++sincePrune >= PRUNE_EVERY) {
      sincePrune = 0;
      void auth.pruneCounters().catch((err: unknown) => req.log.warn({ reason: (err as Error).message }, 'could not prune sign-in counters'));
    }
    const { counted, refusedBy } = await auth.countAttempt(counters);
    if (!refusedBy.length) return counted;
    const longest = refusedBy.reduce((a, b) => (b.retryAfter > a.retryAfter ? b : a));
    const rule = counters.find((c) => c.key === longest.key)!.rule;
    req.log.info({ rule, retryAfter: longest.retryAfter }, 'sign-in attempt refused: too many');
    void reply.header('retry-after', String(longest.retryAfter));
    throw new AppError('rate_limited', `${rule}: try again in ${longest.retryAfter} s`);
  };

  /** The device this request signs in from, if it carries a device token for this very user. */
  const deviceOf = async (req: FastifyRequest, username: string): Promise<Device | null> => {
    const device = devices.verify(username, cookieValue(req.headers.cookie, deviceCookieName(username)));
    if (!device) return null;
    // Only a verified token gets here, so only user names the installer issued tokens for are read.
    const known = app.users.peek(username);
    const standing = known === undefined ? await app.users.fetch(username) : known;
    return standing && standing.id === device.uid ? device : null;
  };

  const issue = (user: Pick<UserView, 'id' | 'username' | 'role' | 'mustChangePassword' | 'tokenGeneration'>) => {
    const token = app.jwt.sign({ sub: user.username, uid: user.id, role: user.role, gen: user.tokenGeneration, jti: randomUUID() });
    const { exp } = app.jwt.decode<{ exp: number }>(token)!;
    return {
      token,
      tokenType: 'Bearer' as const,
      expiresAt: new Date(exp * 1000).toISOString(),
      user: { username: user.username, role: user.role, mustChangePassword: user.mustChangePassword },
    };
  };

  /** The claims of the request's own bearer token (already verified by the auth hook). */
  const ownClaims = (req: FastifyRequest): { jti: string; uid: number; exp: number } => {
    const token = /^Bearer (\S+)$/i.exec(req.headers.authorization ?? '')?.[1];
    const claims = token ? app.jwt.decode<{ jti?: unknown; uid?: unknown; exp?: unknown }>(token) : null;
    if (!claims || typeof claims.jti !== 'string' || typeof claims.uid !== 'number' || typeof claims.exp !== 'number') {
      throw unauthenticated('this token has no id: sign in again');
    }
    return { jti: claims.jti, uid: claims.uid, exp: claims.exp };
  };

  app.post(
    '/api/auth/login',
    {
      config: { access: 'public' },
      schema: {
        tags: ['auth'],
        summary: 'Exchange a user name and password for a bearer token (throttled per address, user name and device: 429 with Retry-After)',
        body: loginBody,
        response: { 200: tokenSchema },
      },
    },
    async (req, reply) => {
      const { username, password } = req.body;
      const device = await deviceOf(req, username);
      const counters: Counter[] = device
        ? [{ key: `device:${device.id}`, limit: perUser, rule: `too many failed sign-ins for this user name from this device (at most ${perUser} a minute)` }]
        : [
            { key: `client:${clientKey(req.ip)}`, limit: perClient, rule: `too many failed sign-ins from this address (at most ${perClient} a minute)` },
            {
              key: `user:${username}`,
              limit: perUser,
              rule: `too many failed sign-ins for this user name from new devices (at most ${perUser} a minute; a browser that signed in as this user before is not held back)`,
            },
          ];
      const counted = await admitAttempt(req, reply, counters);
      const user = await auth.verify(username, password);
      // A disabled user with the right password gets the answer of a wrong one: the same status,
      // body and work (the hash was checked either way), so it does not confirm the password.
      if (!user || user.disabled_at !== null) {
        req.log.info({ username, ...(user ? { disabled: true } : {}) }, 'sign-in refused');
        throw unauthenticated(WRONG);
      }
      await auth.giveBack(counted);
      try {
        if (await auth.upgradeHash(user, password)) req.log.info({ username: user.username }, 'password hash upgraded to the current scrypt parameters');
      } catch (err) {
        req.log.warn({ username: user.username, reason: (err as Error).message }, 'could not upgrade the password hash');
      }
      // This device may now sign in as this user without waiting behind strangers (renewed each time).
      const next = devices.issue(user.username, user.id, device?.id);
      void reply.header(
        'set-cookie',
        `${deviceCookieName(user.username)}=${next.token}; Path=/api/auth/login; Max-Age=${next.maxAgeSeconds}; HttpOnly; SameSite=Strict${req.protocol === 'https' ? '; Secure' : ''}`,
      );
      req.log.info({ username: user.username }, 'signed in');
      return issue({ id: user.id, username: user.username, role: user.role, mustChangePassword: user.must_change_password, tokenGeneration: user.token_generation });
    },
  );

  app.post(
    '/api/auth/logout',
    {
      config: { access: 'viewer', passwordChange: true },
      schema: {
        tags: ['auth'],
        summary: 'Sign out: this token stops working at once, in every installer process',
        response: { 200: z.object({ signedOut: z.literal(true) }) },
      },
    },
    async (req) => {
      const p = req.principal!;
      if (p.kind !== 'user') throw badRequest('the service token cannot be signed out: replace its file to rotate it (docs/access.md)');
      const { jti, uid, exp } = ownClaims(req);
      await app.users.applying(p.username, () => auth.revoke({ jti, userId: uid, username: p.username, expiresAt: new Date(exp * 1000) }));
      req.log.info({ username: p.username }, 'signed out');
      return { signedOut: true as const };
    },
  );

  app.get(
    '/api/auth/me',
    {
      config: { access: 'viewer', passwordChange: true },
      schema: { tags: ['auth'], summary: 'Who the bearer token belongs to', response: { 200: principalSchema } },
    },
    async (req) => {
      const p = req.principal!;
      const actor = req.actor();
      return p.kind === 'user'
        ? { kind: 'user' as const, username: p.username, actorKind: actor.kind, role: p.role, mustChangePassword: p.mustChangePassword ?? false }
        : { kind: 'service' as const, username: actor.id, actorKind: actor.kind, role: p.role };
    },
  );

  app.put(
    '/api/auth/password',
    {
      config: { access: 'viewer', passwordChange: true },
      schema: {
        tags: ['auth'],
        summary: 'Change your own password (the current one is required); answers a new token, as the old ones stop working',
        body: passwordBody,
        response: { 200: tokenSchema },
      },
    },
    async (req, reply) => {
      const p = req.principal!;
      if (p.kind !== 'user') throw forbidden('the service token has no password: rotate its file instead (docs/access.md)');
      if (req.body.newPassword === req.body.currentPassword) throw badRequest('newPassword must differ from currentPassword');
      // Wrong current passwords are counted per sign-in (this token), before the check: a stolen
      // token is no way to guess the password faster than the sign-in route allows, and strangers
      // failing at this user name do not keep its owner from changing the password.
      const { jti } = ownClaims(req);
      const counted = await admitAttempt(req, reply, [
        { key: `session:${jti}`, limit: perUser, rule: `too many wrong current passwords with this sign-in (at most ${perUser} a minute)` },
      ]);
      // A wrong current password throws out of the write, so nobody waits for a notice never sent.
      const user = await app.users.applying(p.username, async () => {
        const changed = await auth.changeOwnPassword(p.username, req.body.currentPassword, req.body.newPassword);
        if (!changed) {
          req.log.info({ actor: p.username }, 'password change refused: wrong current password');
          throw forbidden('the current password is wrong');
        }
        return changed;
      });
      await auth.giveBack(counted);
      req.log.info({ actor: p.username, user: p.username, change: 'password' }, 'user changed');
      return issue(user);
    },
  );
};

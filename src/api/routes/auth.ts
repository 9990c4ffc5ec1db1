// Sign-in for local users, and a user changing their own password. Tokens are JWTs that expire
// (TOKEN_TTL_SECONDS) and name the user's token generation. Sign-in is rate limited per client
// address, and failed sign-ins (and wrong current passwords) are counted per user name across all
// addresses (docs/adr/0016-user-management.md).
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { changeOwnPassword, verifyCredentials, USERNAME_MAX, type UserView } from '../../state/users.ts';
import { AppError, badRequest, forbidden, unauthenticated } from '../../errors.ts';
import { ROLES } from '../../db/schema.ts';
import { newPasswordSchema } from './users.ts';

const loginBody = z.object({
  username: z.string().min(1).max(USERNAME_MAX),
  password: z.string().min(1).max(1024),
});

const principalSchema = z.object({
  kind: z.enum(['user', 'service']),
  username: z.string(),
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

function tooManyAttempts(reply: FastifyReply, seconds: number): AppError {
  void reply.header('retry-after', String(seconds));
  return new AppError('rate_limited', `too many failed sign-ins for this user name: try again in ${seconds} s`);
}

export const authRoutes: FastifyPluginAsyncZod = async (app) => {
  // Failed sign-ins per user name, whatever the address (the route's own limit is per address).
  // A wrong current password on a password change counts against the same user name: a stolen
  // token must not become a way to guess the password without the limit.
  const failuresOf = app.createRateLimit({
    max: app.deps.settings.LOGIN_FAILURES_PER_USER_PER_MINUTE,
    timeWindow: 60_000,
    keyGenerator: (req) => `sign-in-failures:${(req.body as { username?: string }).username ?? (req.principal?.kind === 'user' ? req.principal.username : '')}`,
  });
  /** Throws 429 while the user name has used up its failures. */
  const refuseWhileThrottled = async (req: FastifyRequest, reply: FastifyReply, username: string) => {
    const before = await failuresOf(req, { increment: false });
    if (!before.isAllowed && before.remaining === 0 && before.ttl > 0) {
      req.log.info({ username }, 'refused: too many failed passwords for this user name');
      throw tooManyAttempts(reply, before.ttlInSeconds);
    }
  };

  const issue = (user: Pick<UserView, 'id' | 'username' | 'role' | 'mustChangePassword' | 'tokenGeneration'>) => {
    const token = app.jwt.sign({ sub: user.username, uid: user.id, role: user.role, gen: user.tokenGeneration });
    const { exp } = app.jwt.decode<{ exp: number }>(token)!;
    return {
      token,
      tokenType: 'Bearer' as const,
      expiresAt: new Date(exp * 1000).toISOString(),
      user: { username: user.username, role: user.role, mustChangePassword: user.mustChangePassword },
    };
  };

  app.post(
    '/api/auth/login',
    {
      config: {
        access: 'public',
        rateLimit: { max: app.deps.settings.LOGIN_RATE_LIMIT_PER_MINUTE, timeWindow: '1 minute' },
      },
      schema: {
        tags: ['auth'],
        summary: 'Exchange a user name and password for a bearer token',
        body: loginBody,
        response: { 200: tokenSchema },
      },
    },
    async (req, reply) => {
      await refuseWhileThrottled(req, reply, req.body.username);
      const user = await verifyCredentials(app.deps.database.db, req.body.username, req.body.password);
      if (!user) {
        await failuresOf(req);
        req.log.info({ username: req.body.username }, 'sign-in refused');
        throw unauthenticated('wrong user name or password');
      }
      if (user.disabled_at !== null) {
        req.log.info({ username: user.username }, 'sign-in refused: user disabled');
        throw forbidden('this user is disabled: ask an admin');
      }
      req.log.info({ username: user.username }, 'signed in');
      return issue({ id: user.id, username: user.username, role: user.role, mustChangePassword: user.must_change_password, tokenGeneration: user.token_generation });
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
      return p.kind === 'user'
        ? { kind: 'user' as const, username: p.username, role: p.role, mustChangePassword: p.mustChangePassword ?? false }
        : { kind: 'service' as const, username: req.actor().id, role: p.role };
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
      await refuseWhileThrottled(req, reply, p.username);
      // A wrong current password throws out of the write, so nobody waits for a notice never sent.
      const user = await app.users.applying(p.username, async () => {
        const changed = await changeOwnPassword(app.deps.database.db, p.username, req.body.currentPassword, req.body.newPassword);
        if (!changed) {
          await failuresOf(req);
          req.log.info({ actor: p.username }, 'password change refused: wrong current password');
          throw forbidden('the current password is wrong');
        }
        return changed;
      });
      req.log.info({ actor: p.username, user: p.username, change: 'password' }, 'user changed');
      return issue(user);
    },
  );
};

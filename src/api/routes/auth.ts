// Sign-in for local users. Tokens are JWTs that expire (TOKEN_TTL_SECONDS); the login route is
// rate limited per client address.
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { verifyCredentials } from '../../state/users.ts';
import { unauthenticated } from '../../errors.ts';
import { ROLES } from '../../db/schema.ts';

const loginBody = z.object({
  username: z.string().min(1).max(64),
  password: z.string().min(1).max(1024),
});

const principalSchema = z.object({
  kind: z.enum(['user', 'service']),
  username: z.string(),
  role: z.enum(ROLES as [string, ...string[]]),
});

export const authRoutes: FastifyPluginAsyncZod = async (app) => {
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
        response: {
          200: z.object({
            token: z.string(),
            tokenType: z.literal('Bearer'),
            expiresAt: z.string(),
            user: z.object({ username: z.string(), role: z.string() }),
          }),
        },
      },
    },
    async (req) => {
      const user = await verifyCredentials(app.deps.database.db, req.body.username, req.body.password);
      if (!user) {
        req.log.info({ username: req.body.username }, 'sign-in refused');
        throw unauthenticated('wrong user name or password');
      }
      const token = app.jwt.sign({ sub: user.username, role: user.role });
      const { exp } = app.jwt.decode<{ exp: number }>(token)!;
      req.log.info({ username: user.username }, 'signed in');
      return {
        token,
        tokenType: 'Bearer' as const,
        expiresAt: new Date(exp * 1000).toISOString(),
        user: { username: user.username, role: user.role },
      };
    },
  );

  app.get(
    '/api/auth/me',
    { schema: { tags: ['auth'], summary: 'Who the bearer token belongs to', response: { 200: principalSchema } } },
    async (req) => {
      const p = req.principal!;
      return p.kind === 'user'
        ? { kind: 'user' as const, username: p.username, role: p.role }
        : { kind: 'service' as const, username: req.actor().id, role: p.role };
    },
  );
};

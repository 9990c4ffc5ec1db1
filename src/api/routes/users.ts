// Users, managed by admins (docs/adr/0016-user-management.md): list, add, change the role of,
// disable or enable, reset the password of, and remove. The last enabled admin cannot be
// removed, disabled or demoted. Every change is logged with the acting user, never a password,
// and ends the changed user's tokens on the next request.
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import {
  PASSWORD_MAX, PASSWORD_MIN, USERNAME_MAX, USERNAME_RULE, USERNAME_RULE_TEXT,
  type UserView,
} from '../../state/users.ts';
import { ROLES, type Role } from '../../db/schema.ts';

export const usernameSchema = z
  .string()
  .max(USERNAME_MAX, `username must be at most ${USERNAME_MAX} characters`)
  .regex(USERNAME_RULE, `username must be ${USERNAME_RULE_TEXT}`);

export const newPasswordSchema = z
  .string()
  .min(PASSWORD_MIN, `the password must be at least ${PASSWORD_MIN} characters`)
  .max(PASSWORD_MAX, `the password must be at most ${PASSWORD_MAX} characters`);

const roleSchema = z.enum(ROLES as [Role, ...Role[]], { error: `role must be one of ${ROLES.join(', ')}` });

const userSchema = z.object({
  username: z.string(),
  role: z.string(),
  disabled: z.boolean(),
  mustChangePassword: z.boolean(),
  createdAt: z.string(),
  updatedAt: z.string(),
});

const params = z.strictObject({ username: usernameSchema });

const out = (u: UserView) => ({
  username: u.username,
  role: u.role,
  disabled: u.disabled,
  mustChangePassword: u.mustChangePassword,
  createdAt: u.createdAt.toISOString(),
  updatedAt: u.updatedAt.toISOString(),
});

export const userRoutes: FastifyPluginAsyncZod = async (app) => {
  const { reads, requests } = app;
  /** One line per change, naming who did it; never a password. */
  const logged = (req: FastifyRequest, user: string, change: Record<string, unknown>) => {
    req.log.info({ actor: req.actor().id, user, ...change }, 'user changed');
  };

  app.get(
    '/api/users',
    {
      config: { access: 'admin' },
      schema: { tags: ['users'], summary: 'Local users, their roles and status', response: { 200: z.array(userSchema) } },
    },
    async () => (await reads.users.list()).map(out),
  );

  app.post(
    '/api/users',
    {
      config: { access: 'admin' },
      schema: {
        tags: ['users'],
        summary: 'Add a user; they choose their own password at first sign-in',
        body: z.strictObject({ username: usernameSchema, role: roleSchema, password: newPasswordSchema }),
        response: { 201: userSchema },
      },
    },
    async (req, reply) => {
      const user = await app.users.applying(req.body.username, () => requests.users.add({ ...req.body, mustChangePassword: true }));
      logged(req, user.username, { change: 'added', role: user.role });
      return reply.status(201).send(out(user));
    },
  );

  app.patch(
    '/api/users/:username',
    {
      config: { access: 'admin' },
      schema: {
        tags: ['users'],
        summary: "Change a user's role, or disable or enable them; their tokens stop working",
        params,
        body: z
          .strictObject({ role: roleSchema.optional(), disabled: z.boolean({ error: 'disabled must be true or false' }).optional() })
          .refine((b) => b.role !== undefined || b.disabled !== undefined, 'give role or disabled'),
        response: { 200: userSchema },
      },
    },
    async (req) => {
      const { before, after } = await app.users.applying(req.params.username, () => requests.users.change(req.params.username, req.body));
      const change: Record<string, unknown> = {};
      if (before.role !== after.role) Object.assign(change, { change: 'role', from: before.role, role: after.role });
      if (before.disabled !== after.disabled) Object.assign(change, { change: after.disabled ? 'disabled' : 'enabled' });
      if (Object.keys(change).length) logged(req, after.username, change);
      return out(after);
    },
  );

  app.put(
    '/api/users/:username/password',
    {
      config: { access: 'admin' },
      schema: {
        tags: ['users'],
        summary: "Reset a user's password; they choose a new one at their next sign-in, and their tokens stop working",
        params,
        body: z.strictObject({ password: newPasswordSchema }),
        response: { 200: userSchema },
      },
    },
    async (req) => {
      const user = await app.users.applying(req.params.username, () => requests.users.resetPassword(req.params.username, req.body.password, { mustChangePassword: true }));
      logged(req, user.username, { change: 'password-reset' });
      return out(user);
    },
  );

  app.delete(
    '/api/users/:username',
    {
      config: { access: 'admin' },
      schema: {
        tags: ['users'],
        summary: 'Remove a user; their tokens stop working',
        params,
        response: { 200: z.object({ removed: z.string() }) },
      },
    },
    async (req) => {
      const user = await app.users.applying(req.params.username, () => requests.users.remove(req.params.username));
      logged(req, user.username, { change: 'removed', role: user.role });
      return { removed: user.username };
    },
  );

};

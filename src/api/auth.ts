// Authentication and roles for every route. Every route declares `config.access`: 'public' or the
// least role it needs (viewer < operator < admin); the app refuses to start with a route that does
// not (app.ts), and the need is read from the route the router matched, never from the URL string
// (docs/adr/0002-roles.md). A bearer token is either a JWT issued by /api/auth/login or the
// service token. A JWT works while its `uid` names the user's row, its `gen` is that user's
// current token generation, the user is enabled and its id (`jti`) was not signed out
// (docs/adr/0016-user-management.md); a user who must choose a password reaches only the routes
// marked `config.passwordChange`.
import fp from 'fastify-plugin';
import fastifyJwt from '@fastify/jwt';
import { hash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Role } from '../db/schema.ts';
import { actorOf, hasRole, type Actor, type Principal } from '../auth/actor.ts';
import { VerifiedTokens } from '../auth/verified-tokens.ts';
import type { UserDirectory, UserStanding } from '../auth/user-directory.ts';
import { AppError, forbidden, unauthenticated, badRequest } from '../errors.ts';

/**
 * `admin-or-service`: an admin, or the service token (the platform's control plane, which is an
 * operator otherwise): for desired state the control plane owns alongside admins, such as the
 * update policy.
 */
export type Access = 'public' | Role | 'admin-or-service';

declare module 'fastify' {
  interface FastifyContextConfig {
    access?: Access;
    /** Reachable by a user who must choose a new password first (who am I, change my password). */
    passwordChange?: boolean;
  }
  interface FastifyRequest {
    principal: Principal | null;
    /** The acting user for audit rows; throws 401 on a public route. */
    actor(): Actor;
  }
}

declare module '@fastify/jwt' {
  interface FastifyJWT {
    payload: { sub: string; uid: number; role: Role; gen: number; jti: string };
    user: { sub: string; uid: number; role: Role; gen: number; jti: string; iat: number; exp: number };
  }
}

export interface AuthOptions {
  jwtSecret: string;
  /** The service tokens accepted now (re-read so that replacing their file rotates them). */
  serviceTokens: () => readonly string[];
  serviceActorName: string;
  tokenTtlSeconds: number;
  /** Users' token generations and status, checked on every request with a JWT. */
  users: UserDirectory;
}

const sha256 = (s: string) => hash('sha256', s, 'buffer');

// The accepted tokens' digests, computed once per set: the set is the same array until the
// token file changes, and every authenticated request compares against it.
interface Accepted {
  digests: Buffer[];
  /** Whether any accepted token has a dot (generated ones are base64url and have none). */
  dotted: boolean;
}
const acceptedSets = new WeakMap<readonly string[], Accepted>();
function acceptedOf(tokens: readonly string[]): Accepted {
  let a = acceptedSets.get(tokens);
  if (!a) acceptedSets.set(tokens, (a = { digests: tokens.map(sha256), dotted: tokens.some((t) => t.includes('.')) }));
  return a;
}

const ROLES: readonly Role[] = ['viewer', 'operator', 'admin'];

interface Claims {
  sub?: unknown;
  uid?: unknown;
  role?: unknown;
  gen?: unknown;
  jti?: unknown;
  exp?: unknown;
}
/** Verified tokens kept: one per signed-in client is what is needed. */
const JWT_CACHE_SIZE = 1000;

const ACTOR_HEADER = /^[\p{L}\p{N} ._@+\-:|]{1,200}$/u;

function actorHeader(req: FastifyRequest, name: string): string | null {
  const raw = req.headers[name];
  if (raw === undefined) return null;
  const value = Array.isArray(raw) ? raw[0] : raw;
  if (value === undefined || value === '') return null;
  if (!ACTOR_HEADER.test(value)) throw badRequest(`header ${name} must be 1-200 letters, digits, spaces or . _ @ + - : |`);
  return value;
}

/**
 * The role a request needs, from the route the router matched: never from the request line, which
 * the router decodes and normalises its own way. A request that matched no route (the not-found
 * handler) needs none and gets nothing but the 404. A route without a declared access cannot
 * exist (app.ts's route table refuses to start with one, `undeclaredAccess`); were one to slip
 * through, it is refused, not opened.
 */
function accessOf(req: FastifyRequest): Access | 'not-found' | undefined {
  if (req.is404) return 'not-found';
  return req.routeOptions.config?.access;
}

const ACCESS_VALUES: readonly Access[] = ['public', 'viewer', 'operator', 'admin', 'admin-or-service'];

/** The message that stops the app when a route declares no access, or an unknown one. */
export function undeclaredAccess(method: string, url: string, access: unknown): string | null {
  if (ACCESS_VALUES.includes(access as Access)) return null;
  return access === undefined
    ? `route ${method} ${url} declares no access: set config.access to 'public', 'viewer', 'operator', 'admin' or 'admin-or-service'`
    : `route ${method} ${url} declares an unknown access ${JSON.stringify(access)}: use 'public', 'viewer', 'operator', 'admin' or 'admin-or-service'`;
}

function bearer(req: FastifyRequest): string {
  const header = req.headers.authorization;
  if (!header) throw unauthenticated('missing bearer token: send Authorization: Bearer <token>');
  const m = /^Bearer ([^\s]+)$/i.exec(header);
  if (!m) throw unauthenticated('malformed Authorization header: expected "Bearer <token>"');
  return m[1]!;
}

export const authPlugin = fp(
  async (app: FastifyInstance, opts: AuthOptions) => {
    await app.register(fastifyJwt, {
      secret: opts.jwtSecret,
      sign: { expiresIn: opts.tokenTtlSeconds },
    });
    // Verified tokens are kept here, keyed by the token itself, until they expire. (fast-jwt's own
    // cache keys by a digest of the token, which costs as much as the rest of the authentication;
    // given a key of the token itself, it warns about key collisions on every start.)
    const verified = new VerifiedTokens<Claims>(JWT_CACHE_SIZE);
    const users = opts.users;
    app.addHook('onReady', async () => users.start());
    app.addHook('onClose', async () => users.stop());

    app.decorateRequest('principal', null);
    app.decorateRequest('actor', function (this: FastifyRequest): Actor {
      if (!this.principal) throw unauthenticated('this action needs a signed-in caller');
      return actorOf(this.principal, opts.serviceActorName);
    });

    /** The signed-in user as the directory knows them now; a changed, disabled or removed one is refused. */
    function admit(claims: Claims & { sub: string }, standing: UserStanding | null): Principal {
      if (!standing || standing.disabled || claims.uid !== standing.id || claims.gen !== standing.tokenGeneration) {
        throw unauthenticated('this token no longer works (the user was changed, disabled or removed): sign in again');
      }
      if (typeof claims.jti !== 'string' || standing.revokedTokens.has(claims.jti)) throw unauthenticated('this token was signed out: sign in again');
      return { kind: 'user', username: claims.sub, role: standing.role, mustChangePassword: standing.mustChangePassword };
    }

    /** The caller; a promise only when the token's user must first be read from the database. */
    function authenticate(req: FastifyRequest): Principal | Promise<Principal> {
      const token = bearer(req);
      // Compare with every accepted token, so the time taken does not tell which one matched. A
      // JWT has dots; when no accepted token has one, it cannot be one of them, and skipping the
      // hash tells a caller only whether the token it sent had a dot.
      const accepted = acceptedOf(opts.serviceTokens());
      let isService = false;
      if (accepted.dotted || !token.includes('.')) {
        const presented = sha256(token);
        for (const d of accepted.digests) isService = timingSafeEqual(presented, d) || isService;
      }
      if (isService) {
        return {
          kind: 'service',
          role: 'operator',
          forwardedUserId: actorHeader(req, 'x-actor-user-id'),
          forwardedEmail: actorHeader(req, 'x-actor-email'),
        };
      }
      let claims = verified.get(token);
      if (!claims) {
        try {
          // The plugin's global verifier (HS256 with this secret), called directly: the token is
          // already taken from the header.
          claims = app.jwt.verify<Claims>(token);
        } catch (err) {
          const code = (err as { code?: string }).code ?? '';
          if (code === 'FAST_JWT_EXPIRED') throw unauthenticated('token expired: sign in again');
          if (code.startsWith('FAST_JWT') || code.startsWith('FST_JWT')) throw unauthenticated('invalid token');
          throw err;
        }
        verified.set(token, claims);
      }
      if (typeof claims.sub !== 'string' || !ROLES.includes(claims.role as Role)) throw unauthenticated('token lacks a subject or role');
      const subject = claims as Claims & { sub: string };
      const standing = users.peek(subject.sub);
      if (standing !== undefined) return admit(subject, standing);
      return users.fetch(subject.sub).then((s) => admit(subject, s));
    }

    function check(req: FastifyRequest, access: Access, principal: Principal): Error | undefined {
      req.principal = principal;
      if (principal.kind === 'user' && principal.mustChangePassword && !req.routeOptions.config?.passwordChange) {
        return new AppError('password_change_required', 'choose a new password first (PUT /api/auth/password)');
      }
      if (access === 'admin-or-service') {
        if (principal.kind !== 'service' && !hasRole(principal, 'admin')) return forbidden('this needs the admin role or the service token');
        return undefined;
      }
      if (!hasRole(principal, access as Role)) return forbidden(`this needs the ${access} role`);
      return undefined;
    }

    // A callback hook: authentication is synchronous, and a promise per request would cost a
    // microtask turn for nothing.
    app.addHook('onRequest', (req, _reply, done) => {
      let failure: Error | undefined;
      try {
        const access = accessOf(req);
        if (access === undefined) {
          failure = forbidden('this route declares no access, so nobody may use it');
        } else if (access !== 'public' && access !== 'not-found') {
          const principal = authenticate(req);
          if (principal instanceof Promise) {
            principal.then(
              (p) => done(check(req, access, p)),
              (err: unknown) => done(err as Error),
            );
            return;
          }
          failure = check(req, access, principal);
        }
      } catch (err) {
        failure = err as Error;
      }
      done(failure);
    });
  },
  { name: 'auth' },
);

// The access matrix, generated from the app's route table (not a hand list): every route against
// no token, a malformed header, a bad signature, an expired token, each role and the service token
// with and without actor headers. Allowed calls may fail for their own reasons (400, 404, 409) but
// never with 401/403 or a 5xx; refused ones get exactly 401 or 403.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSigner } from 'fast-jwt';
import { randomUUID } from 'node:crypto';
import { startTestApp, PASSWORDS, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';

let t: TestApp;
let base: string;
beforeAll(async () => {
  t = await startTestApp();
  base = await t.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => t?.close());

const RANK: Record<string, number> = { viewer: 1, operator: 2, admin: 3 };

interface Credential {
  name: string;
  headers: () => Promise<Record<string, string>>;
  /** The role it authenticates as, or null when it must be refused with 401. */
  role: string | null;
}

const credentials = (): Credential[] => {
  const forged = createSigner({ key: 'not-the-secret-not-the-secret-not-the-secret' })({ sub: 'admin', role: 'admin' });
  const expired = createSigner({ key: TEST_SECRETS.JWT_SECRET })({ sub: 'admin', role: 'admin', iat: 1_000, exp: 2_000 });
  const service = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}` };
  return [
    { name: 'no token', headers: async () => ({}), role: null },
    { name: 'malformed', headers: async () => ({ authorization: 'Bearer' }), role: null },
    { name: 'bad signature', headers: async () => ({ authorization: `Bearer ${forged}` }), role: null },
    { name: 'expired', headers: async () => ({ authorization: `Bearer ${expired}` }), role: null },
    { name: 'viewer', headers: async () => ({ authorization: `Bearer ${await t.token('viewer')}` }), role: 'viewer' },
    { name: 'operator', headers: async () => ({ authorization: `Bearer ${await t.token('operator')}` }), role: 'operator' },
    { name: 'admin', headers: async () => ({ authorization: `Bearer ${await t.token('admin')}` }), role: 'admin' },
    { name: 'service token', headers: async () => service, role: 'operator' },
    { name: 'service token with actor', headers: async () => ({ ...service, 'x-actor-user-id': 'u-1', 'x-actor-email': 'u1@example.com' }), role: 'operator' },
  ];
};

/** A new sign-in of a role (user name = role name). */
async function freshHeaders(role: string): Promise<Record<string, string>> {
  const res = await t.app.inject({ method: 'POST', url: '/api/auth/login', remoteAddress: '127.0.3.1', payload: { username: role, password: PASSWORDS[role as keyof typeof PASSWORDS] } });
  expect(res.statusCode, res.body).toBe(200);
  return { authorization: `Bearer ${res.json().token as string}` };
}

const fill = (url: string) => url.replace(/:jobId/g, randomUUID()).replace(/:service/g, 'web').replace(/:([A-Za-z]+)/g, 'x');

async function call(method: string, url: string, headers: Record<string, string>): Promise<number> {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 10_000);
  try {
    const hasBody = method === 'POST' || method === 'PUT';
    const res = await fetch(`${base}${url}`, {
      method,
      headers: { ...headers, ...(hasBody ? { 'content-type': 'application/json' } : {}), accept: 'application/json, text/event-stream' },
      ...(hasBody ? { body: '{}' } : {}),
      signal: ctl.signal,
    });
    ctl.abort(); // streams stay open: the status is all this test reads
    return res.status;
  } catch (err) {
    if ((err as Error).name === 'AbortError') return -1; // no answer (not even headers) in 10 s
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

describe('access matrix from the route table', () => {
  // First: the matrix below starts a self-update, and while one is in flight no job is accepted.
  it('records the right actor for each kind of caller', async () => {
    const expected: [string, string, string | null, string][] = [
      ['operator', 'operator', null, 'user'],
      ['admin', 'admin', null, 'user'],
      ['service token', 'platform-control-plane', null, 'control-plane'],
      // A forwarded id never reads as a local user or one of the installer's own actors.
      ['service token with actor', 'platform:u-1', 'u1@example.com', 'platform-user'],
    ];
    const creds = credentials();
    for (const [name, actor, email, kind] of expected) {
      const headers = await creds.find((c) => c.name === name)!.headers();
      const res = await t.app.inject({ method: 'POST', url: '/api/deployment/jobs', headers, payload: { action: 'stop' } });
      expect(res.statusCode, name).toBe(202);
      const row = await t.db.database.db.selectFrom('deployment_jobs').selectAll().where('job_id', '=', res.json().jobId).executeTakeFirstOrThrow();
      expect([row.actor, row.actor_email, row.actor_kind], name).toEqual([actor, email, kind]);
    }
  });

  it('every route answers every credential as its declared role says', async () => {
    // Every route the app has, /metrics and the UI's files included.
    const routes = t.app.routeTable;
    expect(routes.length).toBeGreaterThan(15);
    expect(routes.map((r) => r.url)).toContain('/metrics');
    const wrong: string[] = [];
    let cases = 0;
    for (const route of routes) {
      for (const cred of credentials()) {
        // Signing out ends the token it is sent with: that route gets a token of the role's own,
        // so the one the other routes share keeps working.
        const headers = route.url === '/api/auth/logout' && cred.role && !cred.name.startsWith('service') ? await freshHeaders(cred.name) : await cred.headers();
        const status = await call(route.method, fill(route.url), headers);
        cases++;
        let ok: boolean;
        if (route.access === 'public') ok = status !== 401 && status !== 403 && status < 500;
        else if (cred.role === null) ok = status === 401;
        else if (route.access === 'admin-or-service') {
          // Admins, and the control plane with the service token (an operator elsewhere).
          ok = cred.role === 'admin' || cred.name.startsWith('service token') ? status !== 401 && status !== 403 && status < 500 : status === 403;
        } else if (RANK[cred.role]! >= RANK[route.access]!) ok = status !== 401 && status !== 403 && status < 500;
        else ok = status === 403;
        if (!ok) wrong.push(`${route.method} ${route.url} [${route.access}] as ${cred.name}: ${status}`);
      }
    }
    expect(wrong).toEqual([]);
    expect(cases).toBe(routes.length * 9);
    console.log(`access matrix: ${routes.length} routes × 9 credentials = ${cases} cases`);
  }, 120_000);
});

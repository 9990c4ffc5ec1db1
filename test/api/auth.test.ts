import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSigner } from 'fast-jwt';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_MINUTE: '5' } });
});
afterAll(async () => t?.close());

let addr = 0;
const login = (payload: unknown, extra: Record<string, unknown> = {}) =>
  t.app.inject({ method: 'POST', url: '/api/auth/login', remoteAddress: `127.0.2.${++addr}`, payload: payload as object, ...extra });
const get = (url: string, headers: Record<string, string> = {}) => t.app.inject({ method: 'GET', url, headers });

describe('sign-in', () => {
  it('issues an expiring bearer token for a right password', async () => {
    const res = await login({ username: 'operator', password: 'operator-password-1' });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.tokenType).toBe('Bearer');
    expect(body.user).toEqual({ username: 'operator', role: 'operator', mustChangePassword: false });
    const ttl = Date.parse(body.expiresAt) - Date.now();
    expect(ttl).toBeGreaterThan(11 * 3600 * 1000);
    expect(ttl).toBeLessThanOrEqual(12 * 3600 * 1000);
    const me = await get('/api/auth/me', { authorization: `Bearer ${body.token}` });
    expect(me.json()).toEqual({ kind: 'user', username: 'operator', actorKind: 'user', role: 'operator', mustChangePassword: false });
  });

  it('refuses a wrong password and an unknown user with the same 401', async () => {
    const wrong = await login({ username: 'admin', password: 'nope-nope' });
    const unknown = await login({ username: 'ghost', password: 'nope-nope' });
    for (const res of [wrong, unknown]) {
      expect(res.statusCode).toBe(401);
      expect(res.json()).toEqual({ statusCode: 401, error: 'Unauthorized', message: 'wrong user name or password', code: 'unauthenticated' });
    }
  });

  it('refuses a user name with a control character as bad input, on a listening socket', async () => {
    const base = await t.app.listen({ host: '127.0.0.1', port: 0 });
    for (const username of ['\u0000', 'admin\u0000', 'ad\nmin']) {
      const res = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username, password: 'admin-password-1' }) });
      expect(res.status, JSON.stringify(username)).toBe(400);
      expect(((await res.json()) as { message: string }).message).toContain('username must not contain control characters');
    }
  });

  it('names the missing field of a bad login body', async () => {
    const res = await login({ username: 'admin' });
    expect(res.statusCode).toBe(400);
    expect(res.json().message).toContain('body.password');
  });

  it('rate limits sign-in attempts from one address', async () => {
    const codes: number[] = [];
    for (let i = 0; i < 8; i++) {
      const res = await t.app.inject({ method: 'POST', url: '/api/auth/login', remoteAddress: '10.9.9.9', payload: { username: 'x', password: 'y' } });
      codes.push(res.statusCode);
    }
    expect(codes.slice(0, 5).every((c) => c === 401)).toBe(true);
    expect(codes.slice(5).every((c) => c === 429)).toBe(true);
    const last = await t.app.inject({ method: 'POST', url: '/api/auth/login', remoteAddress: '10.9.9.9', payload: { username: 'x', password: 'y' } });
    expect(last.json()).toMatchObject({ statusCode: 429, code: 'rate_limited' });
  });
});

describe('bearer tokens', () => {
  it('401 without a token, with a malformed header, a bad signature or an expired token', async () => {
    const forged = createSigner({ key: 'another-secret-another-secret-another-secret' })({ sub: 'admin', role: 'admin' });
    const expired = createSigner({ key: TEST_SECRETS.JWT_SECRET })({ sub: 'admin', role: 'admin', iat: 1_000, exp: 2_000 });
    const cases: [Record<string, string>, string][] = [
      [{}, 'missing bearer token'],
      [{ authorization: 'Basic abc' }, 'malformed Authorization header'],
      [{ authorization: 'Bearer not-a-jwt' }, 'invalid token'],
      [{ authorization: `Bearer ${forged}` }, 'invalid token'],
      [{ authorization: `Bearer ${expired}` }, 'token expired'],
    ];
    for (const [headers, message] of cases) {
      const res = await get('/api/version', headers);
      expect(res.statusCode, JSON.stringify(headers)).toBe(401);
      expect(res.json().message).toContain(message);
      expect(res.json().statusCode).toBe(401);
    }
  });

  it('a token accepted before (and so remembered) is refused once it expires', async () => {
    // uid: the admin's row id, as a token from sign-in names it; gen: the admin's token generation
    // (1 until its password, role or status changes); jti: the token's own id.
    const { uid } = JSON.parse(Buffer.from((await t.token('admin')).split('.')[1]!, 'base64url').toString()) as { uid: number };
    const exp = Math.floor(Date.now() / 1000) + 2; // after the sign-in above, which takes a while
    const shortLived = createSigner({ key: TEST_SECRETS.JWT_SECRET })({ sub: 'admin', uid, role: 'admin', gen: 1, jti: 'short-lived-1', exp });
    for (let i = 0; i < 3; i++) expect((await get('/api/version', { authorization: `Bearer ${shortLived}` })).statusCode).toBe(200);
    await new Promise((r) => setTimeout(r, exp * 1000 - Date.now() + 50));
    const late = await get('/api/version', { authorization: `Bearer ${shortLived}` });
    expect(late.statusCode).toBe(401);
    expect(late.json().message).toContain('token expired');
  });

  it('a remembered token does not stand for another one that differs in its signature', async () => {
    const good = await t.token('admin');
    expect((await get('/api/users', { authorization: `Bearer ${good}` })).statusCode).toBe(200);
    // A character inside the signature (the last one carries unused bits).
    const i = good.length - 5;
    const tampered = good.slice(0, i) + (good[i] === 'A' ? 'B' : 'A') + good.slice(i + 1);
    const res = await get('/api/users', { authorization: `Bearer ${tampered}` });
    expect(res.statusCode).toBe(401);
    expect(res.json().message).toContain('invalid token');
  });

  it('403 for a valid token without the needed role, 200 with it', async () => {
    for (const role of ['viewer', 'operator'] as const) {
      const res = await get('/api/users', { authorization: `Bearer ${await t.token(role)}` });
      expect(res.statusCode).toBe(403);
      expect(res.json()).toMatchObject({ statusCode: 403, error: 'Forbidden', message: 'this needs the admin role' });
    }
    const ok = await get('/api/users', { authorization: `Bearer ${await t.token('admin')}` });
    expect(ok.statusCode).toBe(200);
    expect(ok.json().map((u: { username: string }) => u.username).sort()).toEqual(['admin', 'operator', 'viewer']);
  });

  it('accepts the service token and names the forwarded user (as platform:<id>), or the service actor when none is forwarded', async () => {
    const auth = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}` };
    const forwarded = await get('/api/auth/me', { ...auth, 'x-actor-user-id': 'u-42', 'x-actor-email': 'ops@example.com' });
    expect(forwarded.json()).toEqual({ kind: 'service', username: 'platform:u-42', actorKind: 'platform-user', role: 'operator' });
    const bare = await get('/api/auth/me', auth);
    expect(bare.json()).toEqual({ kind: 'service', username: 'platform-control-plane', actorKind: 'control-plane', role: 'operator' });
    const bad = await get('/api/auth/me', { ...auth, 'x-actor-user-id': 'a\u0007b' });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().message).toContain('x-actor-user-id');
  });

  it('does not take a near-miss of the service token', async () => {
    const near = TEST_SECRETS.SERVICE_TOKEN.slice(0, -1) + 'x';
    expect((await get('/api/auth/me', { authorization: `Bearer ${near}` })).statusCode).toBe(401);
  });
});

describe('error shape', () => {
  it('unknown routes, bad JSON and wrong content types share one body shape', async () => {
    const admin = { authorization: `Bearer ${await t.token('admin')}` };
    const notFound = await get('/api/nope', admin);
    expect(notFound.statusCode).toBe(404);
    expect(notFound.json()).toEqual({ statusCode: 404, error: 'Not Found', message: 'Route GET /api/nope not found', code: 'not_found' });
    const badJson = await login('{"username":', { headers: { 'content-type': 'application/json' } });
    expect(badJson.statusCode).toBe(400);
    expect(Object.keys(badJson.json()).sort()).toEqual(['code', 'error', 'message', 'statusCode']);
    const wrongType = await login('<x/>', { headers: { 'content-type': 'text/xml' } });
    expect(wrongType.statusCode).toBe(415);
    expect(wrongType.json()).toMatchObject({ statusCode: 415, code: 'unsupported_media_type' });
  });

  it('serves the OpenAPI document without a token', async () => {
    const res = await get('/api/docs/json');
    expect(res.statusCode).toBe(200);
    const doc = res.json();
    expect(doc.openapi).toMatch(/^3\./);
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/api/health', '/api/version', '/api/auth/login']));
  });
});

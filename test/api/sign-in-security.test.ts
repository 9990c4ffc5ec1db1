// Sign-in security on real listening servers: two API processes' worth of apps on one Postgres
// database, each on 127.0.0.1, called over real HTTP from several loopback source addresses
// (docs/adr/0016-user-management.md):
// - throttling counts an attempt before its password is checked, atomically and in the database:
//   50 concurrent wrong passwords from 5 addresses, split between the two apps, check exactly the
//   limit and refuse the rest with 429, Retry-After and a message naming the rule;
// - strangers at the limit for `admin` do not keep out the admin, whose browser signed in before
//   (its device cookie), through either app; a new browser waits, and the device is throttled too;
// - a client address at its limit holds back new devices only, an IPv6 client counts by its /64;
// - sign-out revokes the token in both apps at once, and old revocations are pruned;
// - a disabled user with the right password gets exactly the answer of a wrong password;
// - new passwords are hashed with scrypt N=2^17, and an older hash is replaced at sign-in.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'node:http';
import { scrypt, randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { startTestApp, PASSWORDS, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { hashIsOutdated, verifyPassword } from '../../src/state/users.ts';

const LIMIT = 10;
let a: TestApp;
let b: TestApp;
let baseA: string;
let baseB: string;
/** Taken before the tests below hold the name `admin` back for new devices. */
let adminToken: string;

const env = { LOGIN_RATE_LIMIT_PER_MINUTE: String(LIMIT), LOGIN_FAILURES_PER_USER_PER_MINUTE: String(LIMIT) };
beforeAll(async () => {
  a = await startTestApp({ env });
  b = await startTestApp({ env, db: a.db });
  for (const t of [a, b]) await t.app.listen({ host: '127.0.0.1', port: 0 });
  baseA = `http://127.0.0.1:${(a.app.server.address() as AddressInfo).port}`;
  baseB = `http://127.0.0.1:${(b.app.server.address() as AddressInfo).port}`;
  adminToken = await a.token('admin');
}, 60_000);
afterAll(async () => {
  await b?.close();
  await a?.close({ drop: true });
});

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  json: () => Record<string, unknown>;
  ms: number;
}

/** One real HTTP request, from the given loopback source address. */
function http(base: string, method: string, path: string, opts: { from?: string; body?: unknown; headers?: Record<string, string> } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    const req = request(`${base}${path}`, { method, headers, ...(opts.from ? { localAddress: opts.from } : {}), agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body, json: () => JSON.parse(body) as Record<string, unknown>, ms: performance.now() - started }));
    });
    req.on('error', reject);
    req.end(opts.body === undefined ? undefined : JSON.stringify(opts.body));
  });
}

const login = (base: string, from: string, username: string, password: string, cookie?: string) =>
  http(base, 'POST', '/api/auth/login', { from, body: { username, password }, ...(cookie ? { headers: { cookie } } : {}) });

const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

/** The device cookie a sign-in answer sets, as a browser would send it back. */
function deviceCookie(res: Answer): string {
  const set = [res.headers['set-cookie'] ?? []].flat();
  expect(set).toHaveLength(1);
  expect(set[0]).toMatch(/; Path=\/api\/auth\/login; Max-Age=\d+; HttpOnly; SameSite=Strict$/);
  return set[0]!.split(';')[0]!;
}

/** Password checks that failed, as both apps logged them (one line per check). */
const failedChecks = (username: string) =>
  [...a.logs, ...b.logs].filter((l) => l.includes('"msg":"sign-in refused"') && l.includes(`"username":"${username}"`)).length;

const count = (xs: number[], x: number) => xs.filter((y) => y === x).length;

describe('sign-in throttling', () => {
  it('counts before checking: 50 concurrent wrong passwords from 5 addresses over two apps check exactly the limit', async () => {
    const before = failedChecks('operator');
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, i) => login(i % 2 ? baseB : baseA, `127.0.0.${2 + (i % 5)}`, 'operator', `wrong-guess-${i}`)),
    );
    const codes = answers.map((r) => r.status);
    expect({ 401: count(codes, 401), 429: count(codes, 429) }).toEqual({ 401: LIMIT, 429: 50 - LIMIT });
    expect(failedChecks('operator') - before).toBe(LIMIT);
    console.log(`sign-in throttle: 50 concurrent wrong passwords for one user from 5 addresses over 2 apps: ${failedChecks('operator') - before} checked (401), ${count(codes, 429)} refused unchecked (429)`);
    for (const r of answers.filter((x) => x.status === 429)) {
      const retry = Number(r.headers['retry-after']);
      expect(retry).toBeGreaterThanOrEqual(1);
      expect(retry).toBeLessThanOrEqual(60);
      expect(r.json()).toEqual({
        statusCode: 429,
        error: 'Too Many Requests',
        code: 'rate_limited',
        message: `too many failed sign-ins for this user name from new devices (at most ${LIMIT} a minute; a browser that signed in as this user before is not held back): try again in ${retry} s`,
      });
    }
    // The attempts refused by the user name's counter were given back on the addresses' counters:
    // another user name signs in from each of those addresses.
    for (let i = 0; i < 5; i++) expect((await login(baseA, `127.0.0.${2 + i}`, 'viewer', PASSWORDS.viewer)).status).toBe(200);
  }, 120_000);

  it('strangers at the limit for admin do not keep out the admin whose browser signed in before', async () => {
    // The admin signed in from this browser earlier: it holds a device cookie for `admin`.
    const first = await login(baseA, '127.0.0.20', 'admin', PASSWORDS.admin);
    expect(first.status).toBe(200);
    const cookie = deviceCookie(first);
    // A viewer's device cookie renamed for `admin` is no device cookie for admin: it names its user.
    const viewerCookie = deviceCookie(await login(baseA, '127.0.0.21', 'viewer', PASSWORDS.viewer)).replace('installer_device.viewer=', 'installer_device.admin=');

    const before = failedChecks('admin');
    const attack = (n: number, offset: number) =>
      Promise.all(Array.from({ length: n }, (_, i) => login(i % 2 ? baseB : baseA, `127.0.0.${12 + (i % 5)}`, 'admin', `attack-${offset + i}`, i % 3 ? undefined : viewerCookie)));
    const wave1 = (await attack(30, 0)).map((r) => r.status);
    expect({ 401: count(wave1, 401), 429: count(wave1, 429) }).toEqual({ 401: LIMIT, 429: 30 - LIMIT });
    // While a second wave runs, the admin signs in through both apps with the right password.
    const [wave2, viaA, viaB] = await Promise.all([
      attack(20, 30),
      login(baseA, '127.0.0.20', 'admin', PASSWORDS.admin, cookie),
      login(baseB, '127.0.0.22', 'admin', PASSWORDS.admin, cookie),
    ]);
    expect(wave2.map((r) => r.status)).toEqual(Array(20).fill(429));
    expect([viaA.status, viaB.status]).toEqual([200, 200]);
    const me = await http(baseB, 'GET', '/api/auth/me', { headers: { authorization: `Bearer ${(viaA.json() as { token: string }).token}` } });
    expect(me.json()).toMatchObject({ username: 'admin', role: 'admin' });
    expect(failedChecks('admin') - before).toBe(LIMIT);

    // A browser that never signed in as admin waits like the strangers, and is told so.
    const fresh = await login(baseA, '127.0.0.23', 'admin', PASSWORDS.admin);
    expect(fresh.status).toBe(429);
    expect(fresh.json().message).toMatch(/from new devices .*a browser that signed in as this user before is not held back\): try again in \d+ s$/);
    console.log(
      `sign-in throttle: admin under attack (50 wrong passwords from 5 addresses, ${LIMIT} checked): the admin's browser signed in through both apps with 200 in ${viaA.ms.toFixed(0)} / ${viaB.ms.toFixed(0)} ms; a new browser got 429`,
    );
    // A tampered device cookie is no device cookie: one bit of the MAC flipped, or its last
    // character spelled with the two bits no byte uses set (it decodes to the same MAC).
    const mac = cookie.slice(-43);
    const bytes = Buffer.from(mac, 'base64url');
    bytes[16]! ^= 0x01;
    const respelled = mac.slice(0, 42) + B64URL[B64URL.indexOf(mac[42]!) ^ 0x03];
    expect(Buffer.from(respelled, 'base64url')).toEqual(Buffer.from(mac, 'base64url'));
    for (const tampered of [cookie.slice(0, -43) + bytes.toString('base64url'), cookie.slice(0, -43) + respelled])
      expect((await login(baseA, '127.0.0.20', 'admin', PASSWORDS.admin, tampered)).status).toBe(429);

    // The device is throttled on its own: the limit of failures from it, then 429 even for it.
    const own = await Promise.all(Array.from({ length: LIMIT + 5 }, (_, i) => login(i % 2 ? baseB : baseA, '127.0.0.20', 'admin', `typo-${i}`, cookie)));
    expect({ 401: count(own.map((r) => r.status), 401), 429: count(own.map((r) => r.status), 429) }).toEqual({ 401: LIMIT, 429: 5 });
    const held = await login(baseA, '127.0.0.20', 'admin', PASSWORDS.admin, cookie);
    expect(held.status).toBe(429);
    expect(held.json().message).toMatch(new RegExp(`^too many failed sign-ins for this user name from this device \\(at most ${LIMIT} a minute\\): try again in \\d+ s$`));
  }, 120_000);

  it('an address at its limit holds back new devices only (a proxy does not lock everyone out)', async () => {
    // The viewer signed in from a browser before, elsewhere; the proxy address then fails its limit.
    const cookie = deviceCookie(await login(baseA, '127.0.0.31', 'viewer', PASSWORDS.viewer));
    const proxy = '127.0.0.30';
    const guesses = await Promise.all(Array.from({ length: LIMIT }, (_, i) => login(i % 2 ? baseB : baseA, proxy, `someone-${i}`, 'wrong-password')));
    expect(guesses.map((r) => r.status)).toEqual(Array(LIMIT).fill(401));
    const refused = await login(baseB, proxy, 'nobody-yet', 'some-password');
    expect(refused.status).toBe(429);
    expect(refused.json().message).toMatch(new RegExp(`^too many failed sign-ins from this address \\(at most ${LIMIT} a minute\\): try again in \\d+ s$`));
    expect(Number(refused.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    // The viewer's browser, behind the same address, signs in.
    expect((await login(baseB, proxy, 'viewer', PASSWORDS.viewer, cookie)).status).toBe(200);
  }, 60_000);

  it('an IPv6 client counts by its /64', async () => {
    // The listener is IPv4 here; the address a request comes from is set as a proxy-less socket's would be.
    const from = (remoteAddress: string, i: number) =>
      a.app.inject({ method: 'POST', url: '/api/auth/login', remoteAddress, payload: { username: `v6-user-${i}`, password: 'wrong-password' } });
    const codes: number[] = [];
    for (let i = 0; i < LIMIT + 1; i++) codes.push((await from(i % 2 ? '2001:db8:7:1::1' : '2001:db8:7:1:ffff:ffff:ffff:9', i)).statusCode);
    expect(codes).toEqual([...Array(LIMIT).fill(401), 429]);
    expect((await from('2001:db8:7:2::1', 99)).statusCode).toBe(401); // the next /64 is another client
  }, 60_000);
});

describe('sign-out', () => {
  it('revokes the token in both apps on the next request; other tokens of the user keep working', async () => {
    const other = (await login(baseA, '127.0.0.40', 'viewer', PASSWORDS.viewer)).json() as { token: string };
    for (let round = 0; round < 5; round++) {
      const signIn = await login(round % 2 ? baseB : baseA, '127.0.0.40', 'viewer', PASSWORDS.viewer);
      expect(signIn.status).toBe(200);
      const auth = { authorization: `Bearer ${(signIn.json() as { token: string }).token}` };
      expect((await http(baseB, 'GET', '/api/deployment/status', { headers: auth })).status).toBe(200);
      const out = await http(round % 2 ? baseB : baseA, 'POST', '/api/auth/logout', { headers: auth });
      expect(out.status, out.body).toBe(200);
      expect(out.json()).toEqual({ signedOut: true });
      for (const base of [baseA, baseB]) {
        const after = await http(base, 'GET', '/api/deployment/status', { headers: auth });
        expect(after.status, `round ${round}`).toBe(401);
        expect(after.json()).toMatchObject({ code: 'unauthenticated', message: 'this token was signed out: sign in again' });
      }
    }
    expect((await http(baseB, 'GET', '/api/auth/me', { headers: { authorization: `Bearer ${other.token}` } })).status).toBe(200);
    const service = await http(baseA, 'POST', '/api/auth/logout', { headers: { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}` } });
    expect(service.status).toBe(400);
    expect(service.json().message).toContain('the service token cannot be signed out');
  }, 120_000);

  it('prunes revocations of tokens that have expired', async () => {
    const db = a.db.database.db;
    const { id } = await db.selectFrom('users').select('id').where('username', '=', 'viewer').executeTakeFirstOrThrow();
    await db.insertInto('revoked_tokens').values({ jti: 'expired-long-ago', user_id: id, expires_at: new Date(Date.now() - 60_000) }).execute();
    const signIn = await login(baseA, '127.0.0.41', 'viewer', PASSWORDS.viewer);
    const token = (signIn.json() as { token: string }).token;
    const { jti, exp } = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { jti: string; exp: number };
    expect((await http(baseA, 'POST', '/api/auth/logout', { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    const rows = await db.selectFrom('revoked_tokens').select(['jti', 'expires_at']).where('user_id', '=', id).execute();
    expect(rows.map((r) => r.jti)).not.toContain('expired-long-ago');
    // The tokens signed out before (the test above) stay until they expire, as does this one.
    expect(rows.length).toBeGreaterThanOrEqual(6);
    expect(rows.find((r) => r.jti === jti)?.expires_at.getTime()).toBe(exp * 1000);
    expect(rows.every((r) => r.expires_at.getTime() > Date.now())).toBe(true);
  });
});

describe('a disabled user', () => {
  it('with the right password gets exactly the answer of a wrong password, in about the same time', async () => {
    const admin = { authorization: `Bearer ${adminToken}` };
    const add = await http(baseA, 'POST', '/api/users', { headers: admin, body: { username: 'dora', role: 'viewer', password: 'dora-password-1' } });
    expect(add.status, add.body).toBe(201);
    expect((await http(baseA, 'PATCH', '/api/users/dora', { headers: admin, body: { disabled: true } })).status).toBe(200);
    const right: Answer[] = [];
    const wrong: Answer[] = [];
    for (let i = 0; i < 4; i++) {
      right.push(await login(baseB, `127.0.0.${51 + i}`, 'dora', 'dora-password-1'));
      wrong.push(await login(baseB, `127.0.0.${51 + i}`, 'dora', 'not-doras-password'));
    }
    for (const r of [...right, ...wrong]) {
      expect(r.status).toBe(401);
      expect(r.body).toBe('{"statusCode":401,"error":"Unauthorized","message":"wrong user name or password","code":"unauthenticated"}');
      expect(r.headers['set-cookie']).toBeUndefined();
    }
    // Both ran the password hash: neither is much faster than the other.
    const median = (xs: Answer[]) => xs.map((x) => x.ms).sort((p, q) => p - q)[2]!;
    const ratio = median(right) / median(wrong);
    // (An answer that skipped the hash would take a few ms against hundreds: a ratio near 0.01. The
    // bounds leave a loaded machine's noise, a factor of a few over four samples, well inside.)
    expect(ratio, `right ${median(right).toFixed(0)} ms, wrong ${median(wrong).toFixed(0)} ms`).toBeGreaterThan(1 / 10);
    expect(ratio).toBeLessThan(10);
  }, 120_000);
});

describe('password hashes', () => {
  it('new ones use scrypt N=2^17; an older one verifies and is replaced at the next sign-in', async () => {
    const db = a.db.database.db;
    const stored = async (username: string) => (await db.selectFrom('users').select('password_hash').where('username', '=', username).executeTakeFirstOrThrow()).password_hash;
    expect(await stored('admin')).toMatch(/^scrypt\$131072\$8\$1\$[\w-]{22}\$[\w-]{43}$/);
    // A hash the way earlier versions made it: N=2^14.
    const salt = randomBytes(16);
    const key = await new Promise<Buffer>((resolve, reject) => scrypt('olga-password-1', salt, 32, { N: 16384, r: 8, p: 1 }, (e, k) => (e ? reject(e) : resolve(k))));
    const old = ['scrypt', 16384, 8, 1, salt.toString('base64url'), key.toString('base64url')].join('$');
    await db.insertInto('users').values({ username: 'olga', password_hash: old, role: 'viewer' }).execute();
    expect(hashIsOutdated(old)).toBe(true);
    expect((await login(baseA, '127.0.0.60', 'olga', 'not-olgas-password')).status).toBe(401);
    expect(await stored('olga')).toBe(old); // a wrong password changes nothing
    expect((await login(baseA, '127.0.0.60', 'olga', 'olga-password-1')).status).toBe(200);
    const upgraded = await stored('olga');
    expect(upgraded).toMatch(/^scrypt\$131072\$8\$1\$/);
    expect(hashIsOutdated(upgraded)).toBe(false);
    expect(await verifyPassword('olga-password-1', upgraded)).toBe(true);
    expect(a.logs.some((l) => l.includes('"msg":"password hash upgraded to the current scrypt parameters"') && l.includes('"username":"olga"'))).toBe(true);
    // Signing in again keeps the hash; the old password still works, a wrong one does not.
    expect((await login(baseB, '127.0.0.60', 'olga', 'olga-password-1')).status).toBe(200);
    expect(await stored('olga')).toBe(upgraded);
    expect((await login(baseB, '127.0.0.60', 'olga', 'olga-password-2')).status).toBe(401);
  }, 60_000);
});

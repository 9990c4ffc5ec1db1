// Users managed from the API: admins add, change the role of, disable, reset and remove users; a
// user changes their own password. Every change ends the changed user's tokens on the very next
// request, the last admin stays, bad input is refused naming the rule, sign-in is throttled per
// user name across addresses (for devices that never signed in as that user), and changes are
// logged with the acting user (never a password).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, PASSWORDS, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_MINUTE: '1000', LOGIN_FAILURES_PER_USER_PER_MINUTE: '4' } });
});
afterAll(async () => t?.close());

let addr = 0;
/** Each sign-in from its own address, so that only the per-user limit can answer 429. */
const login = (username: string, password: string) =>
  t.app.inject({ method: 'POST', url: '/api/auth/login', remoteAddress: `10.20.${Math.floor(++addr / 250)}.${addr % 250}`, payload: { username, password } });
const call = (method: string, url: string, token: string, payload?: object) =>
  t.app.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${token}` }, ...(payload ? { payload } : {}) });
const tokenOf = async (username: string, password: string) => {
  const res = await login(username, password);
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as { token: string; user: { mustChangePassword: boolean; role: string } };
};
let admin: string;
beforeAll(async () => {
  admin = await t.token('admin');
});

/** Adds a user through the API and lets them choose their password, as a new user would. */
async function onboard(username: string, role: string, password: string): Promise<string> {
  const add = await call('POST', '/api/users', admin, { username, role, password: 'temporary-password-1' });
  expect(add.statusCode, add.body).toBe(201);
  const first = await tokenOf(username, 'temporary-password-1');
  expect(first.user.mustChangePassword).toBe(true);
  const changed = await call('PUT', '/api/auth/password', first.token, { currentPassword: 'temporary-password-1', newPassword: password });
  expect(changed.statusCode, changed.body).toBe(200);
  return changed.json().token as string;
}

describe('users from the API', () => {
  it('an added user must choose a password at first sign-in, and can do nothing else until then', async () => {
    const add = await call('POST', '/api/users', admin, { username: 'dana', role: 'operator', password: 'temporary-password-1' });
    expect(add.statusCode, add.body).toBe(201);
    expect(add.json()).toMatchObject({ username: 'dana', role: 'operator', disabled: false, mustChangePassword: true });
    const first = await tokenOf('dana', 'temporary-password-1');
    expect(first.user).toEqual({ username: 'dana', role: 'operator', mustChangePassword: true });
    const blocked = await call('GET', '/api/deployment/status', first.token);
    expect(blocked.statusCode).toBe(403);
    expect(blocked.json()).toMatchObject({ code: 'password_change_required' });
    expect((await call('GET', '/api/auth/me', first.token)).json()).toMatchObject({ username: 'dana', mustChangePassword: true });

    const changed = await call('PUT', '/api/auth/password', first.token, { currentPassword: 'temporary-password-1', newPassword: 'dana-chose-this-1' });
    expect(changed.statusCode, changed.body).toBe(200);
    expect(changed.json().user).toEqual({ username: 'dana', role: 'operator', mustChangePassword: false });
    const fresh = changed.json().token as string;
    expect((await call('GET', '/api/deployment/status', fresh)).statusCode).toBe(200);
    // The token from before the change stops working at once.
    const old = await call('GET', '/api/auth/me', first.token);
    expect(old.statusCode).toBe(401);
    expect(old.json().message).toContain('sign in again');
    expect((await login('dana', 'temporary-password-1')).statusCode).toBe(401);
    expect((await login('dana', 'dana-chose-this-1')).json().user.mustChangePassword).toBe(false);

    const list = await call('GET', '/api/users', admin);
    expect(list.statusCode).toBe(200);
    expect(list.json().find((u: { username: string }) => u.username === 'dana')).toMatchObject({ role: 'operator', disabled: false, mustChangePassword: false });
    expect(JSON.stringify(list.json())).not.toContain('hash');
  });

  it('a user changes their own password only with the right current one (403 without saying more)', async () => {
    const token = await onboard('erin', 'viewer', 'erin-password-01');
    const wrong = await call('PUT', '/api/auth/password', token, { currentPassword: 'not-the-password', newPassword: 'erin-password-02' });
    expect(wrong.statusCode).toBe(403);
    expect(wrong.json()).toMatchObject({ statusCode: 403, message: 'the current password is wrong' });
    expect((await call('GET', '/api/auth/me', token)).statusCode).toBe(200); // nothing changed
    const short = await call('PUT', '/api/auth/password', token, { currentPassword: 'erin-password-01', newPassword: 'short-pw' });
    expect(short.statusCode).toBe(400);
    expect(short.json().message).toContain('body.newPassword: the password must be at least 12 characters');
    const ok = await call('PUT', '/api/auth/password', token, { currentPassword: 'erin-password-01', newPassword: 'erin-password-02' });
    expect(ok.statusCode).toBe(200);
    expect((await call('GET', '/api/auth/me', token)).statusCode).toBe(401);
    expect((await call('GET', '/api/auth/me', ok.json().token)).statusCode).toBe(200);
    // The service token is no user: it has no password to change here.
    const svc = await t.app.inject({ method: 'PUT', url: '/api/auth/password', headers: { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}` }, payload: { currentPassword: 'a', newPassword: 'long-enough-password' } });
    expect(svc.statusCode).toBe(403);
    expect(svc.json().message).toContain('service token has no password');
  });

  it('demoting, disabling, resetting or removing a user ends their tokens on the next request', async () => {
    const fred = await onboard('fred', 'admin', 'fred-password-01');
    expect((await call('GET', '/api/users', fred)).statusCode).toBe(200);

    const demote = await call('PATCH', '/api/users/fred', admin, { role: 'viewer' });
    expect(demote.statusCode, demote.body).toBe(200);
    expect(demote.json()).toMatchObject({ role: 'viewer' });
    expect((await call('GET', '/api/users', fred)).statusCode).toBe(401);
    const asViewer = await tokenOf('fred', 'fred-password-01');
    expect(asViewer.user.role).toBe('viewer');
    expect((await call('GET', '/api/users', asViewer.token)).statusCode).toBe(403);
    expect((await call('GET', '/api/version', asViewer.token)).statusCode).toBe(200);

    const disable = await call('PATCH', '/api/users/fred', admin, { disabled: true });
    expect(disable.json()).toMatchObject({ disabled: true });
    expect((await call('GET', '/api/version', asViewer.token)).statusCode).toBe(401);
    // A disabled user with the right password gets the answer of a wrong one: nothing confirms the password.
    const refused = await login('fred', 'fred-password-01');
    expect(refused.statusCode).toBe(401);
    expect(refused.json()).toEqual({ statusCode: 401, error: 'Unauthorized', message: 'wrong user name or password', code: 'unauthenticated' });
    expect((await call('PATCH', '/api/users/fred', admin, { disabled: false })).json()).toMatchObject({ disabled: false });

    const again = await tokenOf('fred', 'fred-password-01');
    const reset = await call('PUT', '/api/users/fred/password', admin, { password: 'fred-temporary-01' });
    expect(reset.statusCode, reset.body).toBe(200);
    expect(reset.json()).toMatchObject({ mustChangePassword: true });
    expect((await call('GET', '/api/version', again.token)).statusCode).toBe(401);
    expect((await login('fred', 'fred-password-01')).statusCode).toBe(401);
    const afterReset = await tokenOf('fred', 'fred-temporary-01');
    expect(afterReset.user.mustChangePassword).toBe(true);

    const removed = await call('DELETE', '/api/users/fred', admin);
    expect(removed.statusCode, removed.body).toBe(200);
    expect(removed.json()).toEqual({ removed: 'fred' });
    expect((await call('GET', '/api/auth/me', afterReset.token)).statusCode).toBe(401);
    expect((await login('fred', 'fred-temporary-01')).statusCode).toBe(401);
    expect((await call('DELETE', '/api/users/fred', admin)).statusCode).toBe(404);
    // Added again under the same name, fred is another user: a token of the removed one (whose
    // generation the new row starts at) still does not work.
    const firstOfNew = await call('POST', '/api/users', admin, { username: 'fred', role: 'admin', password: 'temporary-password-1' });
    expect(firstOfNew.statusCode, firstOfNew.body).toBe(201);
    const readded = await call('PATCH', '/api/users/fred', admin, { role: 'viewer' });
    expect(readded.statusCode, readded.body).toBe(200);
    expect((await call('GET', '/api/auth/me', afterReset.token)).statusCode).toBe(401);
    expect((await call('GET', '/api/auth/me', fred)).statusCode).toBe(401);
    expect((await call('DELETE', '/api/users/fred', admin)).statusCode).toBe(200);
    expect((await call('PATCH', '/api/users/nobody', admin, { role: 'viewer' })).json()).toMatchObject({ statusCode: 404, message: 'no user nobody' });
  });

  it('the last admin cannot be removed, disabled or demoted', async () => {
    // Only `admin` is an enabled admin here.
    for (const [method, url, body] of [
      ['DELETE', '/api/users/admin', undefined],
      ['PATCH', '/api/users/admin', { disabled: true }],
      ['PATCH', '/api/users/admin', { role: 'operator' }],
    ] as const) {
      const res = await call(method, url, admin, body);
      expect(res.statusCode, `${method} ${JSON.stringify(body)}`).toBe(409);
      expect(res.json().message).toContain('the last admin cannot be removed, disabled or demoted');
    }
    expect((await call('GET', '/api/users', admin)).statusCode).toBe(200); // still an admin, token intact
    // With a second admin, the first one can step down; then the second is the last.
    const gail = await onboard('gail', 'admin', 'gail-password-01');
    const stepDown = await call('PATCH', '/api/users/admin', gail, { role: 'operator' });
    expect(stepDown.statusCode, stepDown.body).toBe(200);
    expect((await call('DELETE', '/api/users/gail', gail)).statusCode).toBe(409);
    expect((await call('PATCH', '/api/users/admin', gail, { role: 'admin' })).statusCode).toBe(200);
    admin = (await tokenOf('admin', PASSWORDS.admin)).token;
    expect((await call('DELETE', '/api/users/gail', admin)).statusCode).toBe(200);
  });

  it('refuses bad input with a 400 naming the rule', async () => {
    const cases: [object, string][] = [
      [{ username: 'hank', role: 'viewer', password: 'eleven-char' }, 'body.password: the password must be at least 12 characters'],
      [{ username: 'hank', role: 'root', password: 'long-enough-password' }, 'body.role: role must be one of viewer, operator, admin'],
      [{ username: 'ha\u0007nk', role: 'viewer', password: 'long-enough-password' }, 'body.username: username must be 1-64 characters'],
      [{ username: 'h'.repeat(65), role: 'viewer', password: 'long-enough-password' }, 'body.username: username must be at most 64 characters'],
      [{ username: 'hank', role: 'viewer', password: 'long-enough-password', admin: true }, 'body'],
    ];
    for (const [body, message] of cases) {
      const res = await call('POST', '/api/users', admin, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json().message, JSON.stringify(body)).toContain(message);
    }
    const badPath = await call('PATCH', `/api/users/${encodeURIComponent('a\nb')}`, admin, { role: 'viewer' });
    expect(badPath.statusCode).toBe(400);
    expect(badPath.json().message).toContain('params.username');
    const nothing = await call('PATCH', '/api/users/viewer', admin, {});
    expect(nothing.statusCode).toBe(400);
    expect(nothing.json().message).toContain('give role or disabled');
    const dup = await call('POST', '/api/users', admin, { username: 'viewer', role: 'viewer', password: 'long-enough-password' });
    expect(dup.statusCode).toBe(409);
    expect(dup.json().message).toBe('user viewer exists');
    expect((await call('POST', '/api/users', await t.token('operator'), { username: 'ivy', role: 'viewer', password: 'long-enough-password' })).statusCode).toBe(403);
  });

  it('logs every change with the acting user and never a password', () => {
    const changes = t.logs.filter((l) => l.includes('"user changed"')).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(changes).toEqual(expect.arrayContaining([
      expect.objectContaining({ actor: 'admin', user: 'dana', change: 'added', role: 'operator' }),
      expect.objectContaining({ actor: 'dana', user: 'dana', change: 'password' }),
      expect.objectContaining({ actor: 'admin', user: 'fred', change: 'role', from: 'admin', role: 'viewer' }),
      expect.objectContaining({ actor: 'admin', user: 'fred', change: 'disabled' }),
      expect.objectContaining({ actor: 'admin', user: 'fred', change: 'password-reset' }),
      expect.objectContaining({ actor: 'admin', user: 'fred', change: 'removed' }),
      expect.objectContaining({ actor: 'gail', user: 'admin', change: 'role', from: 'admin', role: 'operator' }),
    ]));
    const all = t.logs.join('\n');
    for (const pw of ['temporary-password-1', 'dana-chose-this-1', 'fred-password-01', 'fred-temporary-01', 'erin-password-02', 'long-enough-password']) {
      expect(all.includes(pw), pw).toBe(false);
    }
  });
});

describe('sign-in throttling per user name', () => {
  it('failures from many addresses hold the name for new devices, even with the right password, and the 429 says when to retry', async () => {
    await onboard('jill', 'viewer', 'jill-password-01');
    const codes: number[] = [];
    for (let i = 0; i < 4; i++) codes.push((await login('jill', `guess-number-${i}`)).statusCode); // each from a new address
    expect(codes).toEqual([401, 401, 401, 401]);
    const locked = await login('jill', 'jill-password-01');
    expect(locked.statusCode).toBe(429);
    const seconds = Number(locked.headers['retry-after']);
    expect(seconds).toBeGreaterThan(0);
    expect(seconds).toBeLessThanOrEqual(60);
    expect(locked.json()).toMatchObject({ statusCode: 429, code: 'rate_limited' });
    expect(locked.json().message).toMatch(/try again in \d+ s/);
    // Another user name is not affected.
    expect((await login('viewer', PASSWORDS.viewer)).statusCode).toBe(200);
  });

  it('wrong current passwords on a password change are throttled per sign-in, and strangers failing at the name do not block it', async () => {
    const token = await onboard('kurt', 'viewer', 'kurt-password-01');
    const second = (await tokenOf('kurt', 'kurt-password-01')).token;
    const codes: number[] = [];
    for (let i = 0; i < 4; i++) {
      codes.push((await call('PUT', '/api/auth/password', token, { currentPassword: `guess-number-${i}`, newPassword: 'kurt-password-02' })).statusCode);
    }
    expect(codes).toEqual([403, 403, 403, 403]);
    // Four wrong current passwords with this token: even the right one is refused with it now.
    const change = await call('PUT', '/api/auth/password', token, { currentPassword: 'kurt-password-01', newPassword: 'kurt-password-02' });
    expect(change.statusCode).toBe(429);
    expect(Number(change.headers['retry-after'])).toBeGreaterThan(0);
    expect(change.json().message).toMatch(/^too many wrong current passwords with this sign-in \(at most 4 a minute\): try again in \d+ s$/);
    expect((await call('GET', '/api/auth/me', token)).statusCode).toBe(200); // the password did not change
    // Strangers fail at kurt's name until it is held for new devices: kurt's other sign-in still
    // changes the password, with the right current one.
    for (let i = 0; i < 4; i++) expect((await login('kurt', `stranger-guess-${i}`)).statusCode).toBe(401);
    expect((await login('kurt', 'kurt-password-01')).statusCode).toBe(429);
    const ok = await call('PUT', '/api/auth/password', second, { currentPassword: 'kurt-password-01', newPassword: 'kurt-password-02' });
    expect(ok.statusCode, ok.body).toBe(200);
  });
});

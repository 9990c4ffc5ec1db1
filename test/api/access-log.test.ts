// The one access line per request, at the level its outcome earns (docs/adr/0015-access-log-levels.md),
// on the real app and a real Postgres database.
import { afterEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';

interface Line {
  level: string;
  msg: string;
  method?: string;
  url?: string;
  statusCode?: number;
  reqId?: string;
}

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

/** The access lines written since `from`, for one URL. */
function accessLines(app: TestApp, url: string, from = 0): Line[] {
  return app.logs
    .slice(from)
    .map((l) => JSON.parse(l) as Line)
    .filter((l) => (l.msg === 'request completed' || l.msg === 'request errored') && l.url === url);
}

describe('access log levels', () => {
  it('at info: a successful read writes no line; a change, a refusal and a miss each write one', async () => {
    t = await startTestApp({ logs: null, logLevel: 'info' });
    const auth = { authorization: `Bearer ${await t.token('viewer')}` };

    const read = await t.app.inject({ method: 'GET', url: '/api/deployment/actions', headers: auth });
    expect(read.statusCode).toBe(200);
    const version = await t.app.inject({ method: 'GET', url: '/api/version', headers: auth });
    expect(version.statusCode).toBe(200);
    expect(accessLines(t, '/api/deployment/actions')).toEqual([]);
    expect(accessLines(t, '/api/version')).toEqual([]);

    // The sign-in the token came from is a change of state: it is logged.
    const signIn = accessLines(t, '/api/auth/login');
    expect(signIn).toHaveLength(1);
    expect(signIn[0]).toMatchObject({ level: 'info', method: 'POST', statusCode: 200 });

    const from = t.logs.length;
    const refused = await t.app.inject({ method: 'POST', url: '/api/auth/login', remoteAddress: '127.0.2.1', payload: { username: 'viewer', password: 'not-the-password' } });
    expect(refused.statusCode).toBe(401);
    expect(accessLines(t, '/api/auth/login', from)).toMatchObject([{ level: 'info', method: 'POST', statusCode: 401 }]);

    const unauthenticated = await t.app.inject({ method: 'GET', url: '/api/deployment/actions' });
    expect(unauthenticated.statusCode).toBe(401);
    expect(accessLines(t, '/api/deployment/actions', from)).toMatchObject([{ level: 'info', method: 'GET', statusCode: 401 }]);

    const badQuery = await t.app.inject({ method: 'GET', url: '/api/deployment/actions?limit=-1', headers: auth });
    expect(badQuery.statusCode).toBe(400);
    expect(accessLines(t, '/api/deployment/actions?limit=-1', from)).toMatchObject([{ level: 'info', statusCode: 400 }]);

    const missing = await t.app.inject({ method: 'GET', url: '/api/no-such-route', headers: auth });
    expect(missing.statusCode).toBe(404);
    expect(accessLines(t, '/api/no-such-route', from)).toMatchObject([{ level: 'info', statusCode: 404 }]);

    // Every line carries its request's id (each request's logger binds it when it first writes).
    const all = t.logs.slice(from).map((l) => JSON.parse(l) as Line).filter((l) => l.msg === 'request completed');
    expect(all).toHaveLength(4);
    expect(new Set(all.map((l) => l.reqId)).size).toBe(4);
  });

  it('at debug: a successful read writes its line at debug, with its request id', async () => {
    t = await startTestApp({ logs: null, logLevel: 'debug' });
    const res = await t.app.inject({
      method: 'GET',
      url: '/api/deployment/actions?limit=5',
      headers: { authorization: `Bearer ${await t.token('admin')}` },
    });
    expect(res.statusCode).toBe(200);
    const lines = accessLines(t, '/api/deployment/actions?limit=5');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 'debug', method: 'GET', statusCode: 200 });
    expect(lines[0]!.reqId).toBeTruthy();
  });
});

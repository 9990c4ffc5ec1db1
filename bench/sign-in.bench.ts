// Sign-in cost on a real listening server and the machine's Postgres: the time of one sign-in with
// the right password and of one with a wrong password (median of BENCH_SIGN_IN_CALLS sequential
// calls each, default 10, after 2 warm-up calls), so the figure is the password hash's cost as a
// client sees it. Its password hash is scrypt (docs/adr/0016-user-management.md).
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { median } from './stats.ts';
import type { Bench, Figure } from './run.ts';
import { startTestApp, PASSWORDS } from '../test/helpers/api/app.ts';

const CALLS = Number(process.env.BENCH_SIGN_IN_CALLS ?? 10);
const WARMUP = 2;

function post(base: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; setCookie: string[] }> {
  return new Promise((resolve, reject) => {
    const req = request(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, setCookie: res.headers['set-cookie'] ?? [] }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

const bench: Bench = async (log) => {
  // High limits: the figure is the hash's cost, not the throttle's.
  const t = await startTestApp({ env: { LOGIN_RATE_LIMIT_PER_MINUTE: '100000', LOGIN_FAILURES_PER_USER_PER_MINUTE: '100000' }, logLevel: 'warn' });
  try {
    await t.app.listen({ host: '127.0.0.1', port: 0 });
    const base = `http://127.0.0.1:${(t.app.server.address() as AddressInfo).port}`;
    const time = async (password: string, expected: number) => {
      const times: number[] = [];
      for (let i = 0; i < WARMUP + CALLS; i++) {
        const s = performance.now();
        const res = await post(base, { username: 'admin', password });
        const ms = performance.now() - s;
        if (res.status !== expected) throw new Error(`sign-in answered ${res.status}, not ${expected}`);
        if (i >= WARMUP) times.push(ms);
      }
      return median(times);
    };
    const right = await time(PASSWORDS.admin, 200);
    const wrong = await time('not-the-admin-password', 401);
    log(`${CALLS} sign-ins each, sequential, after ${WARMUP} warm-up calls`);
    const figures: Figure[] = [
      { name: 'sign-in with the right password, median', value: right, unit: 'ms', goal: '≤ 1000 ms', ok: right <= 1000 },
      { name: 'sign-in with a wrong password, median', value: wrong, unit: 'ms' },
    ];
    return figures;
  } finally {
    await t.close();
  }
};
export default bench;

// Access from the request line as an attacker writes it. Every route the app registered that is not
// public (the route table, not a hand list) is asked, over raw sockets so that no client rewrites
// the path, in every form a client or a proxy can produce: percent-encoded letters in each
// segment, encoded and doubled slashes, dot segments, other cases, a trailing slash, `;`
// parameters, absolute-form targets and HEAD; without a token, with a forged one and, where the
// route needs more than a viewer, with a viewer's. Each answer is a refusal (401/403), not found
// (404) or a bad request (400): the project's error body, never the route's data.
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSigner } from 'fast-jwt';
import { buildApp, type RouteEntry } from '../../src/api/app.ts';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';

let t: TestApp;
let port: number;
beforeAll(async () => {
  t = await startTestApp();
  await t.app.listen({ host: '127.0.0.1', port: 0 });
  port = (t.app.server.address() as net.AddressInfo).port;
});
afterAll(async () => t?.close());

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** One request written byte for byte on its own connection; the answer as it came. */
function raw(method: string, target: string, headers: Record<string, string>, body = ''): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`${method} ${target}: no complete answer in 10 s`));
    }, 10_000);
    socket.on('data', (c) => chunks.push(c));
    socket.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    socket.on('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      const head = end < 0 ? text : text.slice(0, end);
      const [statusLine = '', ...lines] = head.split('\r\n');
      const m = /^HTTP\/1\.1 (\d{3}) /.exec(statusLine);
      if (!m) return reject(new Error(`${method} ${target}: not an HTTP answer: ${JSON.stringify(text.slice(0, 200))}`));
      const hs: Record<string, string> = {};
      for (const l of lines) {
        const i = l.indexOf(':');
        if (i > 0) hs[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
      }
      resolve({ status: Number(m[1]), headers: hs, body: end < 0 ? '' : text.slice(end + 4) });
    });
    const lines = [`${method} ${target} HTTP/1.1`, `Host: 127.0.0.1:${port}`, 'Connection: close', 'Accept: application/json, text/event-stream'];
    for (const [k, v] of Object.entries(headers)) lines.push(`${k}: ${v}`);
    if (body) lines.push('Content-Type: application/json', `Content-Length: ${Buffer.byteLength(body)}`);
    socket.write(`${lines.join('\r\n')}\r\n\r\n${body}`);
  });
}

const fill = (url: string) => url.replace(/:jobId/g, '3f0c2a9e-0d7b-4c1e-9a55-7b1f3c8d2e10').replace(/:service/g, 'web').replace(/:([A-Za-z]+)/g, 'x');
const encodeChar = (c: string) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`;
const encodeFirstLetter = (seg: string) => seg.replace(/[A-Za-z]/, encodeChar);

/** The request-line forms of a path, each with a name. */
function forms(path: string): [string, string][] {
  const segs = path.split('/').slice(1);
  const join = (s: string[]) => `/${s.join('/')}`;
  const out: [string, string][] = [['plain', path]];
  segs.forEach((seg, i) => {
    if (!/[A-Za-z]/.test(seg)) return;
    out.push([`letter encoded in segment ${i + 1}`, join(segs.map((s, j) => (j === i ? encodeFirstLetter(s) : s)))]);
    out.push([`segment ${i + 1} encoded in lower-case hex`, join(segs.map((s, j) => (j === i ? s.replace(/[A-Za-z]/g, (c) => encodeChar(c).toLowerCase()) : s)))]);
  });
  out.push(['every letter encoded', join(segs.map((s) => s.replace(/[A-Za-z]/g, encodeChar)))]);
  if (segs.length > 1) {
    out.push(['%2F for the first inner slash', `/${segs[0]}%2F${segs.slice(1).join('/')}`]);
    out.push(['%2f for every inner slash', `/${segs.join('%2f')}`]);
    out.push(['a doubled inner slash', `/${segs[0]}//${segs.slice(1).join('/')}`]);
    out.push(['a dot segment inside', `/${segs[0]}/./${segs.slice(1).join('/')}`]);
    out.push(['a .. segment inside', `/${segs[0]}/x/../${segs.slice(1).join('/')}`]);
    out.push(['a backslash for the first inner slash', `/${segs[0]}\\${segs.slice(1).join('/')}`]);
  }
  out.push(
    ['a doubled leading slash', `//${segs.join('/')}`],
    ['a leading dot segment', `/./${segs.join('/')}`],
    ['a leading .. segment', `/x/../${segs.join('/')}`],
    ['encoded dot segments', `/x/%2e%2e/${segs.join('/')}`],
    ['through a public route', `/api/health/../../${segs.join('/')}`],
    ['upper case', path.toUpperCase()],
    ['first segment upper case', join([segs[0]!.toUpperCase(), ...segs.slice(1)])],
    ['a trailing slash', `${path}/`],
    ['a trailing /.', `${path}/.`],
    ['a ; parameter at the end', `${path};x`],
    ['a ; parameter in the first segment', join([`${segs[0]};x`, ...segs.slice(1)])],
    ['an encoded ; parameter', `${path}%3Bx`],
    ['a fragment', `${path}#x`],
    ['a query', `${path}?x=1`],
    ['absolute form', `http://127.0.0.1:${port}${path}`],
    ['absolute form, another host, upper-case scheme', `HTTP://example.com${path}`],
    ['absolute form, encoded letter', `http://127.0.0.1:${port}${join([encodeFirstLetter(segs[0]!), ...segs.slice(1)])}`],
  );
  return out;
}

const forged = createSigner({ key: 'not-the-secret-not-the-secret-not-the-secret' })({ sub: 'admin', uid: 1, role: 'admin', gen: 0 });

/** Why an answer is not a refusal, or null when it is one. */
function notRefused(a: Answer, method: string): string | null {
  if (![400, 401, 403, 404].includes(a.status)) return `answered ${a.status}`;
  if (method === 'HEAD') return a.body === '' ? null : 'a HEAD answer with a body';
  let body: unknown;
  try {
    body = JSON.parse(a.body);
  } catch {
    return `a ${a.status} whose body is not the error shape: ${JSON.stringify(a.body.slice(0, 120))}`;
  }
  const keys = Object.keys(body as object).sort().join(',');
  return keys === 'code,error,message,statusCode' && (body as { statusCode: number }).statusCode === a.status ? null : `a ${a.status} with another body: ${a.body.slice(0, 120)}`;
}

/** Runs the jobs `width` at a time. */
async function pool<T>(jobs: (() => Promise<T>)[], width: number): Promise<T[]> {
  const results: T[] = new Array(jobs.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < jobs.length) {
        const i = next++;
        results[i] = await jobs[i]!();
      }
    }),
  );
  return results;
}

describe('access from the request line, for every route and every form', () => {
  it('an encoded form reaches the route it names (so the forms below ask the routes themselves)', async () => {
    const admin = { Authorization: `Bearer ${await t.token('admin')}` };
    for (const target of ['/%61pi/version', '/api/%64eployment/status', `http://127.0.0.1:${port}/%61pi/system/update-policy`]) {
      const withToken = await raw('GET', target, admin);
      expect(withToken.status, target).toBe(200);
      const without = await raw('GET', target, {});
      expect(without.status, target).toBe(401);
      expect(JSON.parse(without.body)).toMatchObject({ statusCode: 401, code: 'unauthenticated' });
    }
  });

  it('refuses or does not find every non-public route in every form, without a token, with a forged one, and with a viewer where more is needed', async () => {
    const viewer = { Authorization: `Bearer ${await t.token('viewer')}` };
    const table: RouteEntry[] = t.app.routeTable;
    const guarded = table.filter((r) => r.access !== 'public');
    expect(guarded.length).toBeGreaterThan(35);
    expect(guarded.map((r) => r.url)).toEqual(expect.arrayContaining(['/api/deployment/jobs', '/api/deployment/actions.csv', '/api/deployment/config', '/api/version', '/metrics']));

    interface Case {
      what: string;
      method: string;
      target: string;
      headers: Record<string, string>;
      plain: boolean;
      expected: number;
    }
    const cases: Case[] = [];
    const formCounts = new Set<number>();
    for (const route of guarded) {
      const path = fill(route.url);
      const creds: [string, Record<string, string>, number][] = [
        ['no token', {}, 401],
        ['forged token', { Authorization: `Bearer ${forged}` }, 401],
      ];
      if (route.access !== 'viewer') creds.push(['viewer token', viewer, 403]);
      const methods = route.method === 'GET' ? ['GET', 'HEAD'] : [route.method];
      const routeForms = forms(path);
      formCounts.add(routeForms.length);
      for (const method of methods) {
        for (const [form, target] of routeForms) {
          for (const [cred, headers, expected] of creds) {
            cases.push({ what: `${method} ${target} (${route.method} ${route.url}, ${form}, ${cred})`, method, target, headers, plain: form === 'plain', expected });
          }
        }
      }
    }

    const answers = await pool(
      cases.map((c) => () => raw(c.method, c.target, c.headers, c.method === 'POST' || c.method === 'PUT' || c.method === 'PATCH' ? '{}' : '')),
      8,
    );
    const wrong: string[] = [];
    const byStatus = new Map<number, number>();
    cases.forEach((c, i) => {
      const a = answers[i]!;
      byStatus.set(a.status, (byStatus.get(a.status) ?? 0) + 1);
      // The plain path reaches its route: exactly the refusal its access calls for.
      if (c.plain && a.status !== c.expected) wrong.push(`${c.what}: ${a.status}, expected ${c.expected}`);
      const why = notRefused(a, c.method);
      if (why) wrong.push(`${c.what}: ${why}`);
    });
    expect(wrong.slice(0, 40)).toEqual([]);
    // Most non-plain forms are decoded by the router to the route itself, and refused there.
    const reached = (byStatus.get(401) ?? 0) + (byStatus.get(403) ?? 0);
    expect(reached).toBeGreaterThan(cases.filter((c) => c.plain).length * 3);
    const summary = [...byStatus.entries()].sort(([a], [b]) => a - b).map(([s, n]) => `${s}: ${n}`).join(', ');
    console.log(
      `request-line access: ${guarded.length} non-public routes × ${[...formCounts].sort((a, b) => a - b).join('-')} forms (GET also as HEAD) × 2-3 credentials = ${cases.length} requests, none answered with data (${summary})`,
    );
  }, 300_000);

  it('answers an unknown path with a 404 that carries only the path, whoever asks', async () => {
    for (const target of ['/api/nothing-here', '/%61pi/nothing-here', '/API/deployment/jobs', '/api', '/metrics/', `http://127.0.0.1:${port}/api/nothing-here`]) {
      const a = await raw('GET', target, {});
      expect(a.status, target).toBe(404);
      expect(JSON.parse(a.body), target).toMatchObject({ statusCode: 404, code: 'not_found' });
    }
  });
});

describe('every route declares its access', () => {
  it('refuses to start with a route that declares none, or an unknown one, naming it', async () => {
    for (const [config, message] of [
      [undefined, /route GET \/api\/undeclared declares no access/],
      [{ access: 'admn' }, /route GET \/api\/undeclared declares an unknown access "admn"/],
    ] as const) {
      const app = await buildApp(t.wired.deps);
      const start = async () => {
        await app.register(async (p) => {
          p.get('/api/undeclared', config ? { config: config as never } : {}, async () => ({ secret: true }));
        });
        await app.listen({ host: '127.0.0.1', port: 0 });
      };
      await expect(start()).rejects.toThrow(message);
      expect(app.server.listening).toBe(false);
      await app.close().catch(() => undefined);
    }
  });
});

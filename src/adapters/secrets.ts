// Secrets the installer owns: read from settings when given, otherwise generated once into the
// secrets directory (mode 0600) so that restarts and the control plane see the same values.
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync, chmodSync, existsSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Settings } from '../config.ts';

export interface InstallerSecrets {
  jwtSecret: string;
  encryptionKey: string;
  serviceToken: string;
  databasePassword?: string;
  /** Where the service token lives, so the control plane can be handed it. */
  serviceTokenFile: string;
  /** The file re-read for a rotated service token; null when the token came from the environment. */
  serviceTokenWatchFile?: string | null;
}

const FILES = {
  jwtSecret: 'jwt-secret',
  encryptionKey: 'encryption-key',
  serviceToken: 'service-token',
} as const;

export function secretsDir(settings: Pick<Settings, 'SECRETS_DIR'>): string {
  mkdirSync(settings.SECRETS_DIR, { recursive: true, mode: 0o700 });
  return settings.SECRETS_DIR;
}

function readOrCreate(dir: string, file: string, make: () => string): string {
  const p = path.join(dir, file);
  if (existsSync(p)) {
    const v = readFileSync(p, 'utf8').trim();
    if (v.length >= 32) return v;
  }
  const v = make();
  writeFileSync(p, `${v}\n`, { mode: 0o600 });
  chmodSync(p, 0o600);
  return v;
}

const random = () => randomBytes(32).toString('base64url');

export function loadSecrets(settings: Pick<Settings, 'SECRETS_DIR' | 'secrets'> & Partial<Pick<Settings, 'secretFiles'>>): InstallerSecrets {
  const dir = secretsDir(settings);
  const s = settings.secrets;
  const serviceTokenFile = path.join(dir, FILES.serviceToken);
  return {
    jwtSecret: s.JWT_SECRET ?? readOrCreate(dir, FILES.jwtSecret, random),
    encryptionKey: s.ENCRYPTION_KEY ?? readOrCreate(dir, FILES.encryptionKey, random),
    serviceToken: s.SERVICE_TOKEN ?? readOrCreate(dir, FILES.serviceToken, random),
    ...(s.DATABASE_PASSWORD !== undefined ? { databasePassword: s.DATABASE_PASSWORD } : {}),
    serviceTokenFile,
    // Replacing this file rotates the service token without a restart (ServiceTokens below). A
    // token given in the environment cannot change while the process lives.
    serviceTokenWatchFile: settings.secretFiles?.SERVICE_TOKEN ?? (s.SERVICE_TOKEN === undefined ? serviceTokenFile : null),
  };
}

/** At most this many tokens are accepted at once: the current one and the one being retired. */
const MAX_SERVICE_TOKENS = 2;
const MIN_SERVICE_TOKEN_LENGTH = 32;

export interface ServiceTokensOptions {
  /** The token read at boot. */
  initial: string;
  /** The file to re-read when it changes; null for a token that cannot rotate. */
  file: string | null;
  /** Called with each token before it is first accepted, so that scrubbers learn it first. */
  learn: (token: string) => void;
  warn: (details: Record<string, unknown>, message: string) => void;
  info: (details: Record<string, unknown>, message: string) => void;
}

/**
 * The service tokens accepted now. The file is checked (one stat) on every use and re-read when it
 * changed, so an operator rotates the token by replacing the file: the first line is the token,
 * an optional second line keeps the previous token valid until the control plane has the new one.
 * A file that is missing or holds no valid token refuses the service token (fails closed) until
 * it is fixed; what was wrong is logged, never a value.
 */
export class ServiceTokens {
  private tokens: string[];
  private stamp: string | null = null;

  constructor(private readonly opts: ServiceTokensOptions) {
    this.tokens = [opts.initial];
    opts.learn(opts.initial);
    if (opts.file) {
      this.stamp = this.stampOf(opts.file);
      this.reload(opts.file, false);
    }
  }

  current(): readonly string[] {
    const file = this.opts.file;
    if (file) {
      const stamp = this.stampOf(file);
      if (stamp !== this.stamp) {
        this.stamp = stamp;
        this.reload(file, true);
      }
    }
    return this.tokens;
  }

  private stampOf(file: string): string {
    try {
      const st = statSync(file);
      return `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
    } catch (err) {
      return `missing:${(err as NodeJS.ErrnoException).code ?? 'error'}`;
    }
  }

  private reload(file: string, announce: boolean): void {
    let content: string;
    try {
      content = readFileSync(file, 'utf8');
    } catch (err) {
      this.tokens = [];
      this.opts.warn({ file, code: (err as NodeJS.ErrnoException).code ?? 'error' }, 'the service token file cannot be read: the service token is refused until it is restored');
      return;
    }
    const lines = content.split(/\r?\n/).map((l) => l.trim()).filter((l) => l !== '');
    // Learn every line as a secret before judging it: even a rejected line must never be logged.
    for (const l of lines) this.opts.learn(l);
    const problem =
      lines.length === 0 ? 'it is empty'
        : lines.length > MAX_SERVICE_TOKENS ? `it has ${lines.length} lines; at most ${MAX_SERVICE_TOKENS} (the new token, then the previous one) are allowed`
          : lines.some((l) => l.length < MIN_SERVICE_TOKEN_LENGTH || /\s/.test(l)) ? `each line must be one token of at least ${MIN_SERVICE_TOKEN_LENGTH} characters without spaces`
            : null;
    if (problem) {
      this.tokens = [];
      this.opts.warn({ file }, `the service token file is not valid (${problem}): the service token is refused until it is fixed`);
      return;
    }
    const changed = lines.join('\n') !== this.tokens.join('\n');
    this.tokens = lines;
    if (announce && changed) this.opts.info({ file, tokens: lines.length }, 'service token file changed: accepting the tokens it holds now');
  }
}

/** Writes the first admin's password to a file only its owner can read; returns the path. */
export function writeInitialAdminPassword(settings: Pick<Settings, 'SECRETS_DIR'>, password: string): string {
  const p = path.join(secretsDir(settings), 'initial-admin-password');
  writeFileSync(p, `${password}\n`, { mode: 0o600 });
  chmodSync(p, 0o600);
  return p;
}

// Secrets the installer owns: read from settings when given, otherwise generated once into the
// secrets directory (mode 0600) so that restarts and the control plane see the same values.
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync, chmodSync, existsSync } from 'node:fs';
import path from 'node:path';
import type { Settings } from '../config.ts';

export interface InstallerSecrets {
  jwtSecret: string;
  encryptionKey: string;
  serviceToken: string;
  databasePassword?: string;
  /** Where the service token lives, so the control plane can be handed it. */
  serviceTokenFile: string;
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

export function loadSecrets(settings: Pick<Settings, 'SECRETS_DIR' | 'secrets'>): InstallerSecrets {
  const dir = secretsDir(settings);
  const s = settings.secrets;
  const serviceTokenFile = path.join(dir, FILES.serviceToken);
  return {
    jwtSecret: s.JWT_SECRET ?? readOrCreate(dir, FILES.jwtSecret, random),
    encryptionKey: s.ENCRYPTION_KEY ?? readOrCreate(dir, FILES.encryptionKey, random),
    // The service token is re-read from its file on every check when it was not given in the
    // environment, so replacing the file rotates it without a restart (see readServiceToken).
    serviceToken: s.SERVICE_TOKEN ?? readOrCreate(dir, FILES.serviceToken, random),
    ...(s.DATABASE_PASSWORD !== undefined ? { databasePassword: s.DATABASE_PASSWORD } : {}),
    serviceTokenFile,
  };
}

/** Writes the first admin's password to a file only its owner can read; returns the path. */
export function writeInitialAdminPassword(settings: Pick<Settings, 'SECRETS_DIR'>, password: string): string {
  const p = path.join(secretsDir(settings), 'initial-admin-password');
  writeFileSync(p, `${password}\n`, { mode: 0o600 });
  chmodSync(p, 0o600);
  return p;
}

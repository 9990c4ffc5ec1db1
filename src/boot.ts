// Boot steps shared by the server and the CLIs: settings, secrets, logger, database, migrations.
import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { ConfigError, loadSettings, type Settings } from './config.ts';
import { loadSecrets, writeInitialAdminPassword, type InstallerSecrets } from './adapters/secrets.ts';
import { createLogger, RecentLines, SecretSet } from './logger.ts';
import { openDatabase, type Database } from './db/database.ts';
import { migrateDatabase, currentMigration } from './db/migrate.ts';
import { countUsers, createUser } from './state/users.ts';
import { loadTls, type TlsMaterial } from './adapters/tls.ts';
import { connectEngine } from './adapters/docker-engine.ts';
import { engineSupport, tooOldMessage } from './adapters/engine-version.ts';

/** Exit code for a configuration error (sysexits EX_CONFIG). */
export const EX_CONFIG = 78;

export function settingsOrExit(env: NodeJS.ProcessEnv = process.env): Settings {
  try {
    return loadSettings(env, { readFile: (p) => readFileSync(p, 'utf8') });
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`installer: configuration error: ${err.message}\n`);
      process.exit(EX_CONFIG);
    }
    throw err;
  }
}

/** The HTTPS listener's certificate (null without HTTPS_PORT); a bad certificate file stops the process like a bad setting. */
export async function tlsOrExit(settings: Settings): Promise<TlsMaterial | null> {
  try {
    return await loadTls(settings);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`installer: configuration error: ${err.message}\n`);
      process.exit(EX_CONFIG);
    }
    throw err;
  }
}

/** The line an operator compares the browser's certificate with (docs/adr/0020-https-listeners.md). */
export function logCertificate(logger: Logger, tls: TlsMaterial): void {
  // With the operator's certificate, the one the control plane is shown on `platform` too (ADR 0020).
  const platform = tls.platform ? { platform: { fingerprint256: tls.platform.fingerprint256, certFile: tls.platform.certFile } } : {};
  const details = { tls: { source: tls.source, fingerprint256: tls.fingerprint256, spkiSha256: tls.spkiSha256, subject: tls.subject, notAfter: tls.notAfter, certFile: tls.certFile, ...platform } };
  if (tls.generated) logger.warn(details, 'generated a self-signed HTTPS certificate: compare its SHA-256 fingerprint with the one your browser shows');
  else logger.info(details, 'HTTPS certificate');
  if (tls.expired) logger.warn({ tls: { notAfter: tls.notAfter, certFile: tls.certFile } }, 'the HTTPS certificate has expired: clients will refuse it until TLS_CERT_FILE holds a valid one');
}

export interface Booted {
  settings: Settings;
  secrets: InstallerSecrets;
  logger: Logger;
  database: Database;
  /** Every secret value the process knows; all scrubbers (logs, job events, container logs) read it. */
  secretSet: SecretSet;
  /** The last log lines, for the diagnostics bundle. */
  recentLogs?: RecentLines;
}

export async function boot(settings: Settings, opts: { migrate: boolean; logger?: Logger }): Promise<Booted> {
  const secrets = loadSecrets(settings);
  const secretSet = new SecretSet([secrets.jwtSecret, secrets.encryptionKey, secrets.serviceToken, secrets.databasePassword ?? '']);
  const recentLogs = new RecentLines();
  const logger = opts.logger ?? createLogger({ level: settings.LOG_LEVEL, secrets: secretSet, recent: recentLogs });
  const database = await openDatabase({
    ...(settings.DATABASE_URL ? { url: settings.DATABASE_URL } : {}),
    ...(secrets.databasePassword !== undefined ? { password: secrets.databasePassword } : {}),
    dataDir: settings.DATA_DIR,
  });
  try {
    if (opts.migrate) {
      const outcome = await migrateDatabase(database);
      if (outcome.applied.length) logger.info({ applied: outcome.applied }, 'schema migrated');
      if (outcome.ahead.length) {
        logger.warn({ ahead: outcome.ahead }, 'the schema is ahead of this build; this build must tolerate it');
      }
    }
    logger.info({ database: database.kind, schemaMigration: await currentMigration(database.db) }, 'database ready');
  } catch (err) {
    await database.close();
    throw err;
  }
  return { settings, secrets, logger, database, secretSet, recentLogs };
}

/** On a database without users, creates `admin` with a random password written to the secrets directory. */
export async function ensureInitialAdmin(b: Booted): Promise<void> {
  if ((await countUsers(b.database.db)) > 0) return;
  const password = randomBytes(18).toString('base64url');
  await createUser(b.database.db, { username: 'admin', password, role: 'admin', mustChangePassword: true });
  const file = writeInitialAdminPassword(b.settings, password);
  b.logger.warn({ file }, 'created the first user "admin"; its password is in this file (readable by root only)');
}

/**
 * Stops the process when the Docker engine answers with a version below the one this build needs
 * (src/adapters/engine-version.ts): nothing it would do there is tested. An engine that does not
 * answer is not a reason to stop: the installer reports it and recovers when the engine is back
 * (docs/adr/0012-dependency-faults.md); the observer's facts say whether that engine is supported.
 */
export async function engineOrExit(b: Booted): Promise<void> {
  const support = await engineSupport(connectEngine(b.settings.DOCKER_SOCKET));
  if (!support.reachable) {
    b.logger.warn({ socket: b.settings.DOCKER_SOCKET, reason: support.error }, 'the Docker engine did not answer at start: its version is checked when the observer reaches it');
    return;
  }
  if (support.supported) return;
  const message = tooOldMessage(support);
  b.logger.fatal({ engine: { version: support.version, apiVersion: support.apiVersion } }, message);
  b.logger.flush();
  process.stderr.write(`installer: ${message}\n`);
  await b.database.close();
  process.exit(EX_CONFIG);
}

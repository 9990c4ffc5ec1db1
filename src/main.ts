// The installer backend: boots, starts its controllers, serves the API and stops cleanly on
// SIGTERM (it is PID 1 in its container, so an unhandled SIGTERM would make every stop wait for
// the kill timeout).
import { boot, engineOrExit, ensureInitialAdmin, logCertificate, settingsOrExit, tlsOrExit } from './boot.ts';
import { platformCertificate } from './adapters/tls.ts';
import { buildApp } from './api/app.ts';
import { wire } from './wiring.ts';
import { startListeners, type Listeners } from './listeners.ts';
import { recordFirstReady, recordLastAnswer } from './state/update-history.ts';

const settings = settingsOrExit();
// Before the database: a bad certificate file stops the process like any other bad setting.
const tls = await tlsOrExit(settings);
const booted = await boot(settings, { migrate: settings.MIGRATE_ON_BOOT });
const { logger, database } = booted;
// An engine older than this build needs stops the process here, before it listens: a self-update
// onto such a build ends in its rollback, not in a backend that half works.
await engineOrExit(booted);
await ensureInitialAdmin(booted);
if (tls) logCertificate(logger, tls);

const wired = wire(booted, { tlsFingerprint256: tls ? platformCertificate(tls).fingerprint256 : null });
// Healthy once `wired.start()` has resolved: a start that fails ends the process before any
// healthcheck passed (docs/adr/0043-healthy-means-reconciling.md).
let reconciling = false;
const app = await buildApp({ ...wired.deps, reconciling: () => reconciling, tls: tls ? { source: tls.source, fingerprint256: tls.fingerprint256, spkiSha256: tls.spkiSha256, subject: tls.subject, notAfter: tls.notAfter } : null });
// Interrupted work is closed before the API answers; the loops, the observer and their LISTEN
// connections start after it listens: a self-update's outage ends at the listen (docs/self-update.md).
await wired.prepare();
const serving: { listeners?: Listeners } = {};

// Only a process that serves the API answers clients: its last answer starts a self-update's outage.
const serves = settings.INSTALLER_ROLE !== 'controllers';
/** Stopped while a self-update's helper runs: the switch stops this backend, its last answer starts the outage. */
async function noteLastAnswer(stoppedAcceptingAt: Date): Promise<void> {
  if (!serves) return;
  const at = app.lastAnswer.servedUntil(stoppedAcceptingAt);
  try {
    if (await recordLastAnswer(database.db, at)) logger.info({ lastAnswerAt: at.toISOString(), lastResponseAt: app.lastAnswer.at?.toISOString() ?? null }, 'stopping while a self-update is in flight: recorded the last answer as the start of its downtime');
  } catch (err) {
    logger.warn({ err }, 'could not record the last answer of this backend for the self-update in flight');
  }
}

let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, 'shutting down');
  const force = setTimeout(() => {
    logger.error('shutdown took too long; exiting');
    process.exit(1);
  }, 8_000);
  force.unref();
  try {
    await wired.stop();
    // Until its listeners close, this backend answers anyone who asks.
    const stoppedAcceptingAt = new Date();
    await (serving.listeners ? serving.listeners.close() : app.close());
    await noteLastAnswer(stoppedAcceptingAt);
    await database.close();
  } finally {
    logger.flush();
    process.exit(0);
  }
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));

const listeners = await startListeners(app, settings, tls, logger);
serving.listeners = listeners;
// The end of a self-update's outage as this process sees it (docs/adr/0031-update-history.md).
if (serves) {
  const readyAt = new Date();
  await recordFirstReady(database.db, readyAt)
    .then((recorded) => recorded && logger.info({ readyAt: readyAt.toISOString() }, 'ready while a self-update was in flight: recorded as the end of its downtime'))
    .catch((err: unknown) => logger.warn({ err }, 'could not record the readiness of this backend for the self-update in flight'));
}
await wired.start();
reconciling = true;
logger.info({ role: settings.INSTALLER_ROLE, address: listeners.httpAddress, ...(listeners.httpsAddress ? { httpsAddress: listeners.httpsAddress } : {}) }, settings.INSTALLER_ROLE === 'controllers' ? 'installer controllers running; listening for the healthcheck only' : 'installer listening');

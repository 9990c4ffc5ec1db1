// The installer backend: boots, starts its controllers, serves the API and stops cleanly on
// SIGTERM (it is PID 1 in its container, so an unhandled SIGTERM would make every stop wait for
// the kill timeout).
import { boot, ensureInitialAdmin, settingsOrExit } from './boot.ts';
import { buildApp } from './api/app.ts';
import { wire } from './wiring.ts';

const settings = settingsOrExit();
const booted = await boot(settings, { migrate: settings.MIGRATE_ON_BOOT });
const { logger, database } = booted;
await ensureInitialAdmin(booted);

const wired = wire(booted);
const app = await buildApp(wired.deps);
await wired.start();

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
    await app.close();
    await database.close();
  } finally {
    logger.flush();
    process.exit(0);
  }
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));

const address = await app.listen({ host: settings.HOST, port: settings.PORT });
logger.info({ address }, 'installer listening');

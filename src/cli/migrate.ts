// `npm run migrate` / the image's migrate entry: what the one-shot installer-backend-init runs.
import { boot, settingsOrExit } from '../boot.ts';

const settings = settingsOrExit();
try {
  const b = await boot(settings, { migrate: true });
  await b.database.close();
  b.logger.flush();
} catch (err) {
  process.stderr.write(`installer: migration failed: ${(err as Error).message}\n`);
  process.exit(1);
}

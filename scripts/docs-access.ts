// Writes the route table of docs/access.md from the app's own route table:
//   npm run docs:access            rewrites docs/access.md between its markers
//   npm run docs:access -- --check exits 1 when the committed file differs
// The app is built as the image builds it with API_DOCS=on (so the document's routes are listed)
// and never started: routes are registered at build time, and no request is served, so its
// database and engine are never reached.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { buildApp } from '../src/api/app.ts';
import { renderAccessTable, spliceAccessTable } from '../src/api/access-doc.ts';
import { loadSettings } from '../src/config.ts';
import { openDatabase } from '../src/db/database.ts';
import { createLogger, SecretSet } from '../src/logger.ts';
import { wire } from '../src/wiring.ts';

const file = fileURLToPath(new URL('../docs/access.md', import.meta.url));
const dataDir = mkdtempSync(path.join(tmpdir(), 'installer-docs-access-'));
const secret = () => randomBytes(24).toString('base64url');
const secrets = { jwtSecret: secret(), encryptionKey: secret(), serviceToken: secret(), serviceTokenFile: path.join(dataDir, 'service-token') };
const settings = loadSettings({ NODE_ENV: 'production', API_DOCS: 'on', DATA_DIR: dataDir, DATABASE_URL: 'postgres://docs@127.0.0.1:9/unused', LOG_LEVEL: 'silent' }, { readFile: () => '' });
const secretSet = new SecretSet(Object.values(secrets));
const logger = createLogger({ level: 'silent', secrets: secretSet });
const database = await openDatabase({ url: settings.DATABASE_URL!, dataDir });
const wired = wire({ settings, secrets, logger, database, secretSet });
const app = await buildApp(wired.deps);
const table = renderAccessTable(app.routeTable);
await database.close();
rmSync(dataDir, { recursive: true, force: true });

const current = readFileSync(file, 'utf8');
const next = spliceAccessTable(current, table);
if (process.argv.includes('--check')) {
  if (next !== current) {
    process.stderr.write('docs/access.md differs from the route table: run `npm run docs:access`\n');
    process.exit(1);
  }
  process.stdout.write(`docs/access.md matches the route table (${app.routeTable.length} routes)\n`);
} else {
  writeFileSync(file, next);
  process.stdout.write(`docs/access.md: ${app.routeTable.length} routes written\n`);
}

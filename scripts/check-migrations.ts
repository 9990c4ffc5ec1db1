// Refuses a schema migration that would break the build before it while that build still serves
// on the migrated schema (docs/adr/0045-migrations-checked-for-the-old-build.md):
//   npm run check:migrations            checks migrations/
//   npm run check:migrations -- <dir>   checks another directory of migrations
import { fileURLToPath } from 'node:url';
import { checkMigrations, describeCheck } from '../src/db/migration-rules.ts';

const dir = process.argv[2] ?? fileURLToPath(new URL('../migrations/', import.meta.url));
const result = await checkMigrations(dir);
const lines = describeCheck(result);
if (lines.length) {
  for (const l of lines) process.stderr.write(`check-migrations: ${l}\n`);
  process.exit(1);
}
process.stdout.write(`check-migrations: ${result.checked.length} migrations keep the expand-only rule\n`);

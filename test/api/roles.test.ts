// INSTALLER_ROLE as the real entry point sees it: a split role with the embedded database is a
// configuration error (exit 78) that names the variable, before anything is opened.
import { describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { runEntry } from '../helpers/shared/process.ts';

describe('INSTALLER_ROLE with the embedded database', () => {
  it('refuses api and controllers with exit 78, and opens no database', async () => {
    for (const role of ['api', 'controllers']) {
      const dataDir = mkdtempSync(path.join(tmpdir(), 'installer-role-'));
      const proc = runEntry('src/main.ts', { INSTALLER_ROLE: role, DATA_DIR: dataDir, HOST: '127.0.0.1', PORT: '0' });
      expect(await proc.exited).toBe(78);
      expect(proc.output().trim().split('\n')).toEqual([
        'installer: configuration error: INSTALLER_ROLE: must be all with the embedded database (no DATABASE_URL): the API and the controllers share it in one process',
      ]);
      expect(readdirSync(dataDir)).toEqual([]);
    }
  });
});

// Rooms a newcomer can hold in their head: no source file (the code, its tests, scripts and
// benchmarks) is over 400 lines. Read from the files git tracks, so a new file is held to it without
// being listed here.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/shared/process.ts';

const MAX_LINES = 400;
const SOURCE = /\.(ts|tsx|mjs|js|sh|css)$/;
/**
 * Files that are one file by the specification, each with why:
 * - the host migration script is bundled, copied to one host path and run there as one file
 *   (`MIGRATE_HOST_SCRIPT_PATH`, spec "Host migration script").
 */
const ONE_FILE_BY_SPEC = new Set(['scripts/migrate-host.sh']);

describe('file sizes', () => {
  it(`no source file is over ${MAX_LINES} lines`, () => {
    const files = execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8' })
      .split('\0')
      .filter((f) => SOURCE.test(f) && !ONE_FILE_BY_SPEC.has(f));
    expect(files.length).toBeGreaterThan(400);
    const over = files
      .map((f) => ({ f, lines: readFileSync(path.join(ROOT, f), 'utf8').split('\n').length - 1 }))
      .filter((x) => x.lines > MAX_LINES)
      .map((x) => `${x.f}: ${x.lines} lines`);
    expect(over).toEqual([]);
  });
});

// `npm start` runs the backend with the V8 flags of the image (deploy/Dockerfile): without the
// young generation's cap, a 1 GB log download grew its RSS by 259 MB against 15 MB with it
// (docs/adr/0043-healthy-means-reconciling.md). The Dockerfile holds them; this keeps the rest in step.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { npmStartNodeFlags, ROOT } from '../helpers/shared/process.ts';

const dockerfile = readFileSync(path.join(ROOT, 'deploy/Dockerfile'), 'utf8');
/** The node flags of an exec-form line (`CMD [...]`, `RUN [...]`) that runs the bundle's start.js. */
function flagsOf(instruction: 'CMD' | 'RUN'): string[] {
  const line = dockerfile.split('\n').find((l) => l.startsWith(`${instruction} [`) && l.includes('start.js'));
  if (!line) throw new Error(`deploy/Dockerfile has no ${instruction} running start.js`);
  const argv = JSON.parse(line.slice(instruction.length + 1)) as string[];
  return argv.slice(1, argv.findIndex((a) => a.endsWith('start.js')));
}

describe('node flags', () => {
  it('npm start runs with the flags of the image (its CMD, and the code cache made under them)', () => {
    expect(flagsOf('CMD')).toContain('--max-semi-space-size=8');
    expect(flagsOf('RUN')).toEqual(flagsOf('CMD'));
    expect(npmStartNodeFlags()).toEqual(flagsOf('CMD'));
  });
});

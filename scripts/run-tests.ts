// The test run of `npm test`: three vitest runs side by side, since most of a run waits on the engine,
// the registry or a browser while another run has work for the cores:
// - the end-to-end files that need the engine to themselves (the installer's own stack with its
//   fixed container names, the self-update's helper), one at a time: project `e2e-serial`;
// - the end-to-end files that drive the rig's multi-node Swarm, one at a time: project `e2e-swarm`;
// - every other file (unit, API, the end-to-end files that name what they create uniquely).
// Each run's lines are printed as they come, marked `serial │` and `swarm │` but the last; the last line is
// the sum of the runs, `N passed, N failed`. Arguments are passed to every run.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { holdSwarmForSuite } from '../test/helpers/e2e/swarm-rig.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const vitest = path.join(root, 'node_modules/vitest/vitest.mjs');
const dir = mkdtempSync(path.join(tmpdir(), 'installer-tests-'));
const args = process.argv.slice(2);

interface Counts {
  passed: number;
  failed: number;
  skipped: number;
}

function runVitest(name: string, projects: string[], prefix: string): Promise<{ code: number | null; counts: Counts | null }> {
  const summary = path.join(dir, `${name}.json`);
  const child = spawn(process.execPath, [vitest, 'run', '--passWithNoTests', ...projects.flatMap((p) => ['--project', p]), ...args], {
    cwd: root,
    env: { ...process.env, VITEST_SUMMARY_FILE: summary },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  for (const [stream, out] of [[child.stdout, process.stdout], [child.stderr, process.stderr]] as const) {
    createInterface({ input: stream }).on('line', (line) => out.write(`${prefix}${line}\n`));
  }
  return new Promise((resolve) => {
    child.on('close', (code) => {
      let counts: Counts | null = null;
      try {
        counts = JSON.parse(readFileSync(summary, 'utf8')) as Counts;
      } catch {
        // No summary: the run did not get as far as its end (it is counted as failed below).
      }
      resolve({ code, counts });
    });
  });
}

// The Swarm's run makes the rig's Swarm; it is taken down here, once all three runs have ended.
const releaseSwarm = await holdSwarmForSuite();
const [serial, swarm, rest] = await Promise.all([
  runVitest('serial', ['e2e-serial'], 'serial │ '),
  runVitest('swarm', ['e2e-swarm'], 'swarm │ '),
  runVitest('rest', ['unit', 'api', 'e2e'], ''),
]);
rmSync(dir, { recursive: true, force: true });
let passed = 0;
let failed = 0;
let skipped = 0;
try {
  await releaseSwarm();
} catch (err) {
  process.stderr.write(`the rig's Swarm could not be taken down after the runs: ${(err as Error).message}\n`);
  failed++;
}
for (const [name, r] of [['e2e-serial', serial], ['e2e-swarm', swarm], ['unit, api, e2e', rest]] as const) {
  if (!r.counts) {
    process.stderr.write(`the ${name} run ended (exit ${r.code}) without its summary\n`);
    failed++;
    continue;
  }
  passed += r.counts.passed;
  failed += r.counts.failed;
  skipped += r.counts.skipped;
  // A run can fail outside any test (an unhandled error, a failed global setup).
  if (r.code !== 0 && r.counts.failed === 0) failed++;
}
process.stdout.write(`\n${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}\n`);
process.exit(failed ? 1 : 0);

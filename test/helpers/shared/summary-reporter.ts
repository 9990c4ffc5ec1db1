// Ends every run with the plain line `N passed, N failed` that CI reads. Tests that never ran
// because their file failed (a failing beforeAll, an import error) count as failed, not skipped.
// With VITEST_SUMMARY_FILE set (scripts/run-tests.ts), the counts are written there too.
import { writeFileSync } from 'node:fs';
import type { Reporter, TestModule } from 'vitest/node';

export default class SummaryReporter implements Reporter {
  onTestRunEnd(modules: readonly TestModule[]): void {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const m of modules) {
      const tests = [...m.children.allTests()];
      const fileFailed = m.state() === 'failed';
      for (const t of tests) {
        const state = t.result().state;
        if (state === 'passed') passed++;
        else if (state === 'failed' || fileFailed) failed++;
        else skipped++;
      }
      if (fileFailed && tests.length === 0) failed++;
    }
    process.stdout.write(`\n${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}\n`);
    if (process.env.VITEST_SUMMARY_FILE) writeFileSync(process.env.VITEST_SUMMARY_FILE, JSON.stringify({ passed, failed, skipped }));
  }
}

import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 120_000,
    // e2e files drive one shared Docker engine; they run one at a time in their own project.
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts', 'test/sim/**/*.test.ts'] } },
      { extends: true, test: { name: 'api', include: ['test/api/**/*.test.ts'] } },
      {
        extends: true,
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          fileParallelism: false,
          testTimeout: 600_000,
          hookTimeout: 900_000,
          globalSetup: ['test/helpers/e2e/rig-global-setup.ts'],
        },
      },
    ],
    reporters: ['default', './test/helpers/shared/summary-reporter.ts'],
  },
});

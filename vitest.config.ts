import { defineConfig } from 'vitest/config';

// e2e files that must have the engine to themselves: they run one at a time, in a run of their
// own beside the run of every other file (scripts/run-tests.ts, `npm test`):
// - they run the installer's own stack, whose containers have fixed names (installer-backend, ...),
//   or start the self-update's helper (installer-self-updater);
// - or they assert on engine-wide state other files of this list change: containers created by
//   role (host-migration).
// Every other e2e file names what it creates uniquely, and runs beside them.
export const SERIAL_E2E = [
  // The installer's stack (fixed container names).
  'audit-rows', 'compose-files', 'container-secrets', 'crash-self-update', 'crash-self-update-outcomes', 'database-backup-edges',
  'faults-database', 'https', 'platform-installer-keys', 'self-update', 'self-update-backup', 'self-update-default',
  'self-update-restore', 'stack', 'ui-self-update', 'ui-update', 'update-check-live', 'zombies',
  // The self-update's helper (installer-self-updater).
  'reconcile-faults-self-update', 'self-update-helper-deadline',
  // Containers by role, engine-wide: each asserts that none of its own kind is left.
  'migrate-host-api', 'migrate-host-runner', 'reconcile-faults-host-migration',
  // Need none of that: the longest files of the other run, here so that both runs end about together.
  'crash-jobs', 'build-image',
].map((name) => `test/e2e/${name}.test.ts`);

// The files that drive the rig's multi-node Swarm (the machine's engine is its manager): one at a
// time, since one drains or kills a worker the next relies on, in a run of their own beside the others.
export const SWARM_E2E = 'test/e2e/swarm-*.test.ts';

const e2e = {
  testTimeout: 600_000,
  hookTimeout: 900_000,
  globalSetup: ['test/helpers/e2e/rig-global-setup.ts'],
};

export default defineConfig({
  test: {
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 120_000,
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts', 'test/sim/**/*.test.ts'] } },
      { extends: true, test: { name: 'api', include: ['test/api/**/*.test.ts'] } },
      { extends: true, test: { name: 'e2e', include: ['test/e2e/**/*.test.ts'], exclude: [...SERIAL_E2E, SWARM_E2E], ...e2e } },
      // One file at a time (`npm test` runs this project beside the others).
      { extends: true, test: { name: 'e2e-serial', include: SERIAL_E2E, fileParallelism: false, ...e2e } },
      {
        extends: true,
        test: { name: 'e2e-swarm', include: [SWARM_E2E], fileParallelism: false, ...e2e, globalSetup: ['test/helpers/e2e/swarm-global-setup.ts'] },
      },
    ],
    reporters: ['default', './test/helpers/shared/summary-reporter.ts'],
  },
});

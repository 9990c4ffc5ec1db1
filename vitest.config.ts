import { defineConfig } from 'vitest/config';

// e2e files that must have the engine to themselves, one at a time, after everything else:
// - they run the installer's own stack, whose containers have fixed names (installer-backend, ...);
// - or they assert on engine-wide state other files change: containers created by role
//   (compose-reader, host-migration), or a dangling-image prune while another file builds an image.
// Every other e2e file names what it creates uniquely, and runs beside unit and API files.
export const SERIAL_E2E = [
  // The installer's stack (fixed container names).
  'audit-rows', 'compose-files', 'container-secrets', 'crash-self-update', 'crash-self-update-outcomes', 'database-backup-edges',
  'faults-database', 'https', 'platform-installer-keys', 'self-update', 'self-update-backup', 'self-update-default',
  'self-update-restore', 'stack', 'ui-self-update', 'ui-update', 'zombies',
  // Engine-wide assertions or effects.
  'observer', 'migrate-host-api', 'migrate-host-runner', 'reconcile-faults-host-migration', 'jobs', 'output-mirror',
].map((name) => `test/e2e/${name}.test.ts`);

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
    // Two workers on the rig's two cores: most files wait on Postgres, the engine or a browser.
    maxWorkers: 2,
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/unit/**/*.test.ts', 'test/sim/**/*.test.ts'] } },
      { extends: true, test: { name: 'api', include: ['test/api/**/*.test.ts'] } },
      { extends: true, test: { name: 'e2e', include: ['test/e2e/**/*.test.ts'], exclude: SERIAL_E2E, ...e2e } },
      // maxWorkers 1: vitest runs these alone, after every other project's files.
      { extends: true, test: { name: 'e2e-serial', include: SERIAL_E2E, fileParallelism: false, ...e2e } },
    ],
    reporters: ['default', './test/helpers/shared/summary-reporter.ts'],
  },
});

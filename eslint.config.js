// Lint enforces the layer arrows of the architecture: routes never reach machines,
// controllers or adapters; machines import only xstate; migrations import no application code.
import tseslint from 'typescript-eslint';


// The API's imports, as a list of what is allowed (see the src/api blocks below).
const API_PACKAGES = '(node:(?!child_process)[\\w/]+|zod|fastify|fastify-type-provider-zod|fastify-plugin|@fastify/[\\w-]+|prom-client|pino)';
const API_IMPORTS = 'The API imports only its own modules, src/state, contracts, auth, errors, config and the HTTP libraries; it never reaches machines, controllers, adapters, Docker, a child process or SQL (architecture.md).';
const API_SQL_CALL = 'CallExpression[callee.property.name=/^(selectFrom|insertInto|updateTable|deleteFrom|mergeInto|replaceInto|selectNoFrom)$/]';
const API_NO_SQL = 'The API holds no SQL: it calls the functions of src/state (architecture.md).';

/** What a reconciler (controllers/*.ts) may import beside it: the folders named in `allowed` (a regex alternation), never another reconciler or the API. */
const reconcilerImports = (allowed) => ({
  'no-restricted-imports': ['error', {
    patterns: [
      { regex: `^\\./(?!${allowed})`, message: 'A reconciler never imports another: they meet in the database (docs/adr/0025-one-reconciler-per-kind.md).' },
      { group: ['**/api/**'], message: 'Controllers never import the API (architecture.md).' },
    ],
  }],
});

export default tseslint.config(
  { ignores: ['node_modules/**', 'dist/**', 'data/**', '.artifacts/**', 'src/ui/**/dist/**'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    // Migrations see the schema as it was when they were written, not today's types.
    files: ['migrations/**', 'src/db/migrate.ts', 'src/db/migration-rules.ts', 'test/fixtures/migration-rules/**', 'test/fixtures/slow-migration/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // What the API may import, listed (anything else is refused): its own modules, the state it
    // reads and writes requests through, contracts, authentication, and the HTTP and schema
    // libraries. Never a machine, controller, adapter, Docker, a child process or SQL.
    files: ['src/api/*.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [{ regex: `^(?!${API_PACKAGES}$|\\./|\\.\\./(state|contracts|auth)/[\\w.-]+\\.ts$|\\.\\./(errors|config)\\.ts$|\\.\\./db/(schema|database)\\.ts$)`, message: API_IMPORTS }],
      }],
      'no-restricted-syntax': ['error', { selector: API_SQL_CALL, message: API_NO_SQL }],
    },
  },
  {
    files: ['src/api/routes/**'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [{ regex: `^(?!${API_PACKAGES}$|\\./[\\w.-]+\\.ts$|\\.\\./[\\w.-]+\\.ts$|\\.\\./\\.\\./(state|contracts|auth)/[\\w.-]+\\.ts$|\\.\\./\\.\\./(errors|config)\\.ts$|\\.\\./\\.\\./db/schema\\.ts$)`, message: API_IMPORTS }],
      }],
      'no-restricted-syntax': ['error', { selector: API_SQL_CALL, message: API_NO_SQL }],
    },
  },
  {
    files: ['machines/**'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [
          // Only xstate, or another chart file beside this one.
          { regex: '^(?!xstate(/|$)|\\./[\\w.-]+\\.machine\\.ts$)', message: 'Machines are pure charts: they import only xstate (architecture.md).' },
        ],
      }],
    },
  },
  {
    files: ['migrations/**'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [
          { group: ['*', '!kysely'], message: 'Migrations never import application code: they must still run after the code has moved on.' },
        ],
      }],
    },
  },
  {
    // Contracts are types shared by every layer: they import nothing of the layers.
    files: ['src/contracts/**'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [
          { regex: '^(?!\\./[\\w.-]+\\.ts$)', message: 'Contracts are shared types: they import only each other (architecture.md).' },
        ],
      }],
    },
  },
  {
    // Adapters reach the outside world for the controllers and the API's ports: never the API's
    // folder, the controllers or the charts.
    files: ['src/adapters/**'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [
          { group: ['**/api/**', '**/controllers/**', '**/machines/**'], message: 'Adapters depend on contracts, never on the API, controllers or charts (architecture.md).' },
        ],
      }],
    },
  },
  {
    // One reconciler per kind: they meet in the database, never in each other's code. Each may use
    // the shared runtime; only controllers/index.ts builds them all.
    files: ['controllers/*.ts'],
    ignores: ['controllers/index.ts'],
    rules: reconcilerImports('runtime/'),
  },
  {
    // A reconciler's own parts sit in a folder of its name; it alone imports them.
    files: ['controllers/self-update.ts'],
    rules: reconcilerImports('runtime/|self-update/'),
  },
  {
    files: ['controllers/observer.ts'],
    rules: reconcilerImports('runtime/|observer/'),
  },
  {
    files: ['controllers/compose-job.ts'],
    rules: reconcilerImports('runtime/|compose-job/'),
  },
  {
    // The parts of a reconciler import no reconciler, only the shared runtime beside them.
    files: ['controllers/*/**'],
    ignores: ['controllers/runtime/**'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [
          { regex: '^\\.\\./(?!\\.\\./|runtime/)', message: "A reconciler's parts import no reconciler: they meet in the database (docs/adr/0025-one-reconciler-per-kind.md)." },
          { group: ['**/api/**'], message: 'Controllers never import the API (architecture.md).' },
        ],
      }],
    },
  },
  {
    // Test helpers by tier: shared (processes, databases, waiting), sim (charts on a simulated
    // clock), api (the app in process), e2e (the real engine, registry, systemd, Chromium). A tier
    // uses its own helpers and those below it, so a faster tier never starts what a slower one needs.
    files: ['test/helpers/shared/**'],
    rules: { 'no-restricted-imports': ['error', { patterns: [{ regex: '^\\.\\./(sim|api|e2e)/', message: 'Shared test helpers use no tier above them.' }] }] },
  },
  {
    files: ['test/helpers/sim/**', 'test/sim/**', 'test/unit/**'],
    rules: { 'no-restricted-imports': ['error', { patterns: [{ regex: '(^\\.\\./|helpers/)(api|e2e)/', message: 'Simulations and unit tests use only shared and sim helpers.' }] }] },
  },
  {
    files: ['test/helpers/api/**', 'test/api/**'],
    rules: { 'no-restricted-imports': ['error', { patterns: [{ regex: '(^\\.\\./|helpers/)e2e/', message: 'API-tier tests and helpers never use the e2e helpers (the real engine and rig).' }] }] },
  },
  {
    files: ['src/state/**', 'src/db/**'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [
          { group: ['**/api/**', '**/machines/**', '**/controllers/**', '**/adapters/**', 'dockerode'], message: 'Repositories only talk to the database.' },
        ],
      }],
    },
  },
);

// The lint rule that keeps the architecture's arrows: a violation must be reported.
import { describe, expect, it } from 'vitest';
import { ESLint } from 'eslint';
import { ROOT } from '../helpers/shared/process.ts';

const lint = async (file: string, code: string) => {
  const eslint = new ESLint({ cwd: ROOT });
  const [result] = await eslint.lintText(code, { filePath: `${ROOT}${file}` });
  return result!.messages.filter((m) => m.ruleId === 'no-restricted-imports' || m.ruleId === 'no-restricted-syntax').map((m) => m.message);
};

describe('layer arrows', () => {
  it('routes cannot import adapters, machines, controllers or dockerode', async () => {
    for (const imp of ['../../adapters/docker-engine.ts', '../../../machines/job.machine.ts', '../../../controllers/compose-job.ts', 'dockerode']) {
      const msgs = await lint('src/api/routes/example.ts', `import x from '${imp}';\nexport default x;\n`);
      expect(msgs.length, imp).toBe(1);
    }
    expect(await lint('src/api/routes/example.ts', `import { z } from 'zod';\nexport default z;\n`)).toEqual([]);
  });

  it("the API's imports are a list of what is allowed: anything else is refused", async () => {
    const refused = async (file: string, imp: string) => (await lint(file, `import x from '${imp}';\nexport default x;\n`)).length;
    // Not on the list, though no rule against them was ever written: a top-level module, a library.
    for (const imp of ['../../wiring.ts', '../../logger.ts', '../../db/database.ts', '../../db/migrate.ts', 'lodash', 'node:child_process', 'undici']) {
      expect(await refused('src/api/routes/example.ts', imp), imp).toBe(1);
    }
    for (const imp of ['../../state/jobs.ts', '../../contracts/audit.ts', '../../auth/actor.ts', '../../errors.ts', '../csv.ts', './job-view.ts', 'zod', '@fastify/sse', 'node:stream']) {
      expect(await refused('src/api/routes/example.ts', imp), imp).toBe(0);
    }
    for (const imp of ['../wiring.ts', '../adapters/tls.ts', '../../controllers/index.ts', 'dockerode']) expect(await refused('src/api/example.ts', imp), imp).toBe(1);
    for (const imp of ['./routes/jobs.ts', '../state/users.ts', '../db/database.ts', 'fastify']) expect(await refused('src/api/example.ts', imp), imp).toBe(0);
  });

  it('routes hold no SQL: no query builder call, no kysely or pg import', async () => {
    expect((await lint('src/api/routes/example.ts', `export const f = (db: any) => db.selectFrom('users').selectAll().execute();\n`)).length).toBe(1);
    expect((await lint('src/api/routes/example.ts', `export const f = (db: any) => db.updateTable('users').set({}).execute();\n`)).length).toBe(1);
    expect((await lint('src/api/routes/example.ts', `import { sql } from 'kysely';\nexport default sql;\n`)).length).toBe(1);
    expect((await lint('src/api/routes/example.ts', `import pg from 'pg';\nexport default pg;\n`)).length).toBe(1);
    expect(await lint('src/api/routes/example.ts', `import { getJob } from '../../state/jobs.ts';\nexport default getJob;\n`)).toEqual([]);
  });

  it('machines import only xstate; migrations import no application code', async () => {
    expect(await lint('machines/example.machine.ts', `import { setup } from 'xstate';\nexport default setup;\n`)).toEqual([]);
    expect(await lint('machines/example.machine.ts', `import { hungMessage } from './job.machine.ts';\nexport default hungMessage;\n`)).toEqual([]);
    expect((await lint('machines/example.machine.ts', `import pg from 'pg';\nexport default pg;\n`)).length).toBe(1);
    expect((await lint('machines/example.machine.ts', `import x from './helpers.ts';\nexport default x;\n`)).length).toBe(1);
    expect((await lint('machines/example.machine.ts', `import { x } from '../src/state/actions.ts';\nexport default x;\n`)).length).toBe(1);
    expect((await lint('migrations/0099_x.ts', `import { ROLES } from '../src/db/schema.ts';\nexport default ROLES;\n`)).length).toBe(1);
  });

  it('contracts import only each other; adapters never import the API, controllers or charts', async () => {
    expect(await lint('src/contracts/example.ts', `import type { RuntimePort } from './ports.ts';\nexport type X = RuntimePort;\n`)).toEqual([]);
    expect((await lint('src/contracts/example.ts', `import type { Role } from '../db/schema.ts';\nexport type X = Role;\n`)).length).toBe(1);
    expect((await lint('src/contracts/example.ts', `import { z } from 'zod';\nexport default z;\n`)).length).toBe(1);
    expect(await lint('src/adapters/example.ts', `import type { RuntimePort } from '../contracts/ports.ts';\nexport type X = RuntimePort;\n`)).toEqual([]);
    for (const imp of ['../api/errors.ts', '../../controllers/compose-job.ts', '../../machines/job.machine.ts']) {
      expect((await lint('src/adapters/example.ts', `import x from '${imp}';\nexport default x;\n`)).length, imp).toBe(1);
    }
  });

  it('a reconciler imports the shared runtime, never another reconciler or the API', async () => {
    expect(await lint('controllers/example.ts', `import { runChart } from './runtime/run-chart.ts';\nexport default runChart;\n`)).toEqual([]);
    expect(await lint('controllers/example.ts', `import { getJob } from '../src/state/jobs.ts';\nexport default getJob;\n`)).toEqual([]);
    expect((await lint('controllers/example.ts', `import { ComposeJobReconciler } from './compose-job.ts';\nexport default ComposeJobReconciler;\n`)).length).toBe(1);
    expect((await lint('controllers/example.ts', `import { AppError } from '../src/api/errors.ts';\nexport default AppError;\n`)).length).toBe(1);
    // The composition of all reconcilers is the one place that names them all.
    expect(await lint('controllers/index.ts', `import { ComposeJobReconciler } from './compose-job.ts';\nexport default ComposeJobReconciler;\n`)).toEqual([]);
  });

  it("a reconciler's parts, in a folder of its name, are its alone and import no reconciler", async () => {
    const parts = `import { preflightActors } from './self-update/preflight.ts';\nexport default preflightActors;\n`;
    expect(await lint('controllers/self-update.ts', parts)).toEqual([]);
    expect((await lint('controllers/compose-job.ts', parts)).length).toBe(1);
    expect((await lint('controllers/self-update.ts', `import { ComposeJobReconciler } from './compose-job.ts';\nexport default ComposeJobReconciler;\n`)).length).toBe(1);
    expect(await lint('controllers/self-update/example.ts', `import { runChart } from '../runtime/run-chart.ts';\nimport { getJob } from '../../src/state/jobs.ts';\nexport default [runChart, getJob];\n`)).toEqual([]);
    expect((await lint('controllers/self-update/example.ts', `import { ComposeJobReconciler } from '../compose-job.ts';\nexport default ComposeJobReconciler;\n`)).length).toBe(1);
    expect((await lint('controllers/self-update/example.ts', `import { AppError } from '../../src/api/errors.ts';\nexport default AppError;\n`)).length).toBe(1);
  });

  it('test helpers by tier: a tier uses only its own helpers and those below it', async () => {
    const imports = (file: string, imp: string) => lint(file, `import x from '${imp}';\nexport default x;\n`);
    expect(await imports('test/api/example.test.ts', '../helpers/api/app.ts')).toEqual([]);
    expect(await imports('test/api/example.test.ts', '../helpers/shared/db.ts')).toEqual([]);
    expect((await imports('test/api/example.test.ts', '../helpers/e2e/rig.ts')).length).toBe(1);
    expect((await imports('test/helpers/api/example.ts', '../e2e/rig.ts')).length).toBe(1);
    expect((await imports('test/helpers/shared/example.ts', '../api/app.ts')).length).toBe(1);
    expect((await imports('test/sim/example.test.ts', '../helpers/api/app.ts')).length).toBe(1);
    expect(await imports('test/sim/example.test.ts', '../helpers/sim/chart.ts')).toEqual([]);
    expect(await imports('test/e2e/example.test.ts', '../helpers/api/app.ts')).toEqual([]);
  });
});

// The outcome's reconciliation runs never read as running forever: a run a gone process left open
// (stopped by a switch, or killed) is closed by the next boot, and a run stopped with its process
// closes itself where it stood.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { listReconcileRuns, startReconcileRun, updateReconcileRun } from '../../src/state/reconcile-runs.ts';
import { BOOT_RECONCILE_CHART_VERSION } from '../../machines/boot-reconcile.machine.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => db?.drop());

describe('reconciliation runs', () => {
  it('a boot closes the runs a gone process left open, keeping the state they stood in', async () => {
    const gone = await startReconcileRun(db.database.db, 'old-host:4242', BOOT_RECONCILE_CHART_VERSION);
    await updateReconcileRun(db.database.db, gone, { snapshot: { status: 'active', value: 'waitingForHelper', context: {} } });
    let t: TestApp | undefined;
    try {
      t = await startTestApp({ db, controllers: (wired) => wired.controllers.start(['self-update']) });
      const runs = await eventually(async () => {
        const all = await listReconcileRuns(db.database.db, 10);
        return all.length === 2 && all.every((r) => r.finishedAt) ? all : null;
      }, 'the old run closed and the boot run finished');
      const old = runs.find((r) => r.runId === gone)!;
      expect(old.finishedAt).not.toBeNull();
      expect((old.snapshot as { value: string }).value).toBe('waitingForHelper');
    } finally {
      await t?.close();
    }
  });
});

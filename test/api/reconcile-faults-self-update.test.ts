// A self-update's reconcile that throws while writing the end of its preflight, on the real
// Postgres (docs/adr/0042-reconcile-contract.md): the statement fails before it is sent; the chart
// is not run again (one helper, one audit row), the end is written on a retry, and a throw that
// outlasts the retries still ends the request, so nothing refuses the next update.
import { afterEach, describe, expect, it } from 'vitest';
import { startSelfUpdateApp, type SelfUpdateApp } from '../helpers/api/self-update.ts';
import { TEST_SECRETS } from '../helpers/api/app.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { StatementFaults } from '../helpers/shared/statement-faults.ts';
import { getSelfUpdate, listSelfUpdates } from '../../src/state/self-update.ts';
import { conflictOf } from '../../src/state/exclusion.ts';

const service = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'amy' };
const ATTEMPTS = 3;

let t: SelfUpdateApp;
const faults = new StatementFaults();
afterEach(async () => {
  faults.disarmAll();
  await t?.close();
});

async function start(): Promise<SelfUpdateApp> {
  return (t = await startSelfUpdateApp({ reconcile: { backoff: { baseMs: 50, maxMs: 200, attempts: ATTEMPTS }, db: (db) => faults.wrap(db) } }));
}
const post = (a: SelfUpdateApp) => a.app.inject({ method: 'POST', url: '/api/system/self-update', headers: service });
// The end of a preflight whose helper started: the row becomes helper-running with the helper's id.
const helperRunningWrite = { kind: 'update', table: 'self_update_status', where: (json: string) => json.includes('"helper_container_id"') } as const;

describe('a self-update whose end of preflight throws', () => {
  it('is written on a retry: the chart does not run again, one helper and one audit row, and the row says it recovered', async () => {
    const a = await start();
    const armed = faults.arm(helperRunningWrite);
    expect((await post(a)).statusCode).toBe(200);
    const [req] = await eventually(async () => {
      const r = await listSelfUpdates(a.db.database.db);
      return r[0]?.phase === 'helper-running' ? r : null;
    }, 'the update in flight');
    expect(armed.fired).toBe(1);
    expect(a.engine.helpers).toHaveLength(1);
    expect(req!.helperContainerId).toBe(a.engine.helpers[0]!.id);
    const rows = await a.db.database.db.selectFrom('deployment_actions').selectAll().where('kind', '=', 'self-update').execute();
    expect(rows).toHaveLength(1);
    const conditions = (await a.db.database.db.selectFrom('self_update_status').select('conditions').where('request_id', '=', req!.requestId).executeTakeFirstOrThrow()).conditions as { type: string; status: string }[];
    expect(conditions.find((c) => c.type === 'Reconciled')).toMatchObject({ status: 'True' });
  });

  it('that outlasts the retries still ends the request: its started helper makes it in flight, never undone', async () => {
    const a = await start();
    const armed = faults.arm({ ...helperRunningWrite, times: ATTEMPTS });
    expect((await post(a)).statusCode).toBe(200);
    const req = await eventually(async () => {
      const r = (await listSelfUpdates(a.db.database.db))[0];
      return r && r.phase !== 'requested' && r.phase !== 'preflight' ? r : null;
    }, 'the request out of preflight');
    expect(armed.fired).toBe(ATTEMPTS);
    expect(req.phase).toBe('helper-running');
    expect(a.engine.helpers).toHaveLength(1);
    // The rollback tag and the staged file are left as preflight set them: the helper uses them.
    expect(a.engine.tags.get(`${a.settings.INSTALLER_REGISTRY}/${a.settings.INSTALLER_IMAGE_NAME}:rollback`)).toBe('img-old');
    const conditions = (await a.db.database.db.selectFrom('self_update_status').select('conditions').where('request_id', '=', req.requestId).executeTakeFirstOrThrow()).conditions as { type: string; status: string; message: string }[];
    expect(conditions.find((c) => c.type === 'Reconciled')).toMatchObject({ status: 'False', message: expect.stringContaining(`attempt ${ATTEMPTS}`) });
  });

  it('the watchdog aborts a request left in preflight past its deadline, and then nothing refuses an update', async () => {
    const a = await start();
    // A request claimed by a process that is gone, its deadline passed.
    expect((await post(a)).statusCode).toBe(200);
    const [first] = await listSelfUpdates(a.db.database.db);
    await a.db.database.db
      .updateTable('self_update_status')
      .set({ phase: 'preflight', finished_at: null, helper_container_id: null, hung_deadline: new Date(Date.now() - 60_000) })
      .where('request_id', '=', first!.requestId)
      .execute();
    a.engine.helpers.length = 0;
    expect(await conflictOf(a.db.database.db, { kind: 'update' })).toContain(first!.requestId);
    await a.wired.controllers.watchdog();
    const row = await getSelfUpdate(a.db.database.db, first!.requestId);
    expect(row).toMatchObject({ phase: 'aborted', abortCode: 'preflight' });
    expect(row!.detail).toMatch(/^aborted: hung: no progress in preflight since \d{4}-/);
    expect(await conflictOf(a.db.database.db, { kind: 'update' })).toBeNull();
  });
});

// The keyless reconcilers and the webhook deliveries when their reconcile throws, on the real
// Postgres (docs/adr/0042-reconcile-contract.md): a statement is failed before it is sent, the
// runtime retries with its backoff, and the work is done once: the policy starts one update, the
// outcome of an update is recorded once, each webhook event reaches its receiver under its one key
// and in order. The self-update engine is the in-memory one the other API tests use; the slow polls
// of these queues (a minute, five seconds) are longer than the waits here, so only the runtime's
// retry brings the work back.
import { afterEach, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startSelfUpdateApp, type SelfUpdateApp } from '../helpers/api/self-update.ts';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { StatementFaults } from '../helpers/shared/statement-faults.ts';
import { listSelfUpdates } from '../../src/state/self-update.ts';
import { createJob, finishJob } from '../../src/state/jobs.ts';

const service = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'amy' };
const DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] as const;
const ALWAYS = { days: [...DAYS], startHour: 0, endHour: 24 };
const backoff = { baseMs: 50, maxMs: 200, attempts: 5 };
const has = (...words: string[]) => (json: string) => words.every((w) => json.includes(w));

const faults = new StatementFaults();
let a: SelfUpdateApp | undefined;
let t: TestApp | undefined;
const servers: Server[] = [];
afterEach(async () => {
  faults.disarmAll();
  await a?.close({ drop: true });
  await t?.close();
  a = t = undefined;
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

async function selfUpdateApp(groups: Parameters<typeof startSelfUpdateApp>[0] = {}): Promise<SelfUpdateApp> {
  return (a = await startSelfUpdateApp({ reconcile: { backoff, db: (db) => faults.wrap(db) }, ...groups }));
}

describe('the update policy whose reconcile throws', () => {
  const setAuto = async (x: SelfUpdateApp) => {
    // The channel row as the observer saw it: a new build is offered.
    const check = await x.app.inject({ method: 'GET', url: '/api/system/self-update-check', headers: service });
    expect(check.json()).toMatchObject({ remoteDigest: 'sha256:new' });
    const res = await x.app.inject({ method: 'PUT', url: '/api/system/update-policy', headers: service, payload: { mode: 'auto', window: ALWAYS } });
    expect(res.statusCode, res.body).toBe(200);
  };
  const policyStatus = async (x: SelfUpdateApp) =>
    (await x.app.inject({ method: 'GET', url: '/api/system/update-policy', headers: service })).json() as { status: { decision: string; lastAttempt: { digest: string; requestId: string | null } | null } };

  it('starts its update on a retry when the request insert throws: one request, the attempt recorded', async () => {
    const x = await selfUpdateApp({ groups: ['self-update', 'update-policy'] });
    const armed = faults.arm({ kind: 'insert', table: 'self_update_requests' });
    await setAuto(x);
    const [req] = await eventually(async () => {
      const r = await listSelfUpdates(x.db.database.db);
      return r[0]?.phase === 'helper-running' ? r : null;
    }, 'the policy to start an update');
    expect(armed.fired).toBe(1);
    expect(await listSelfUpdates(x.db.database.db)).toHaveLength(1);
    expect(req).toMatchObject({ actor: 'update-policy', targetDigest: 'sha256:new' });
    expect((await policyStatus(x)).status.lastAttempt).toMatchObject({ digest: 'sha256:new', requestId: req!.requestId });
  });

  it('makes its decision once when recording the attempt throws: a start whose preflight fails is not made again in the window', async () => {
    const x = await selfUpdateApp({ groups: ['self-update', 'update-policy'] });
    // The start's preflight fails (nothing changed): the window's one attempt is spent.
    x.engine.failing.add('backupDatabase');
    const armed = faults.arm({ kind: 'update', table: 'update_policy', where: has('"last_attempt_digest"') });
    await setAuto(x);
    await eventually(async () => (await listSelfUpdates(x.db.database.db)).some((u) => u.phase === 'aborted'), 'the start to abort');
    expect(armed.fired).toBe(1);
    // Woken again (as by its poll, a job or the observer): still the one attempt.
    for (let i = 0; i < 3; i++) await x.wired.controllers.reconcilePolicy();
    expect((await policyStatus(x)).status.decision).toBe('triedThisWindow');
    const requests = await listSelfUpdates(x.db.database.db);
    expect(requests).toHaveLength(1);
    expect((await policyStatus(x)).status.lastAttempt).toMatchObject({ digest: 'sha256:new', requestId: requests[0]!.requestId });
  });
});

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

describe('a webhook delivery whose reconcile throws', () => {
  /** A receiver that answers 200 and keeps what reached it: the event and its delivery key. */
  async function receiver(): Promise<{ url: string; hits: { key: string; id: string }[] }> {
    const hits: { key: string; id: string }[] = [];
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        hits.push({ key: String(req.headers['x-installer-delivery']), id: (JSON.parse(body) as { id: string }).id });
        res.end();
      });
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, hits };
  }

  it('is recorded on a retry when writing its delivery throws: each event reaches the receiver under its one key, in order', async () => {
    // Only the delivery loop runs; a lease of its claimed row far longer than the waits here.
    const x = (t = await startTestApp({ controllers: (w) => w.controllers.start(['notifications']), observer: false, reconcile: { backoff, db: (db) => faults.wrap(db) } }));
    const db = x.db.database.db;
    const r = await receiver();
    const res = await x.app.inject({ method: 'POST', url: '/api/notifications/webhooks', headers: { authorization: `Bearer ${await x.token('admin')}` }, payload: { url: r.url, allowPrivateNetwork: true } });
    expect(res.statusCode, res.body).toBe(201);
    // The first delivery is sent, and recording it fails.
    const armed = faults.arm({ kind: 'update', table: 'notification_outbox', where: has('"delivered_at"') });
    const jobs: string[] = [];
    for (let i = 0; i < 3; i++) {
      const jobId = await createJob(db, { kind: 'restart', params: {}, actor: { id: 'operator' } });
      await finishJob(db, jobId, { phase: 'failed', detail: `exit ${i + 1}`, exitCode: i + 1 });
      jobs.push(`job.failed:${jobId}`);
    }
    const rows = await eventually(async () => {
      const all = await db.selectFrom('notification_outbox').select(['idempotency_key', 'delivered_at', 'failed_at', 'body']).execute();
      return all.length === 3 && all.every((o) => o.delivered_at) ? all : null;
    }, 'the three deliveries recorded');
    expect(armed.fired).toBe(1);
    expect(rows.every((o) => o.failed_at === null)).toBe(true);
    // The receiver saw each event under its row's one key, in the order of the events; the send
    // whose record failed came again under the same key (the receiver deduplicates by it).
    const firstSeen = [...new Map(r.hits.map((h) => [h.key, h.id])).entries()];
    expect(firstSeen.map(([, id]) => id)).toEqual(jobs);
    for (const [key, id] of firstSeen) expect(rows.find((o) => (JSON.parse(String(o.body)) as { id: string }).id === id)?.idempotency_key).toBe(key);
    expect(r.hits.map((h) => h.id)).toEqual([jobs[0], jobs[0], jobs[1], jobs[2]]);
  });
});

describe('the self-update outcome whose reconcile throws', () => {
  // The outcome's own chart retries the steps inside it (its engine reads and its recording) every
  // few seconds; what it cannot retry (the run it opens, a chart that gave up) is the runtime's.
  it('runs on the retries when opening its run throws, and records the outcome once: one transcript end, one audit end, one quarantine row', async () => {
    const x = await selfUpdateApp();
    const db = x.db.database.db;
    // The boot's run is over before the fault is armed.
    await eventually(async () => (await db.selectFrom('reconcile_runs').select('run_id').where('finished_at', 'is not', null).execute()).length > 0, 'the boot run');
    const armed = faults.arm({ kind: 'insert', table: 'reconcile_runs', times: backoff.attempts - 1 });
    expect((await x.app.inject({ method: 'POST', url: '/api/system/self-update', headers: service })).statusCode).toBe(200);
    // Every attempt but the last threw; the last one waits for the helper.
    await eventually(async () => armed.fired === backoff.attempts - 1 && (await db.selectFrom('reconcile_runs').select('run_id').where('finished_at', 'is', null).execute()).length === 1, 'a run open after the retries');
    x.engine.helpers[0]!.finish({ state: 'exited', exitCode: 0, status: 'rolled-back', switchFailure: 'exit 1: container installer-backend is unhealthy', rollbackFailure: null });
    const [req] = await eventually(async () => {
      const r = await listSelfUpdates(db);
      return r[0]?.phase === 'rolled-back' ? r : null;
    }, 'the outcome recorded');
    expect(armed.fired).toBe(backoff.attempts - 1);
    const events = await db.selectFrom('deployment_job_events').select(['type', 'payload']).where('job_id', '=', req!.jobId!).execute();
    expect(events.filter((e) => e.type === 'finished')).toHaveLength(1);
    const audit = await db.selectFrom('deployment_actions').selectAll().where('kind', '=', 'self-update').execute();
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ status: 'failed' });
    expect(await db.selectFrom('update_quarantine').selectAll().execute()).toMatchObject([{ digest: 'sha256:new', outcome: 'rolled-back' }]);
    // Woken again: nothing more to record.
    await x.wired.controllers.reconcileOutcome();
    expect((await db.selectFrom('deployment_job_events').select('type').where('job_id', '=', req!.jobId!).where('type', '=', 'finished').execute())).toHaveLength(1);
  });
});

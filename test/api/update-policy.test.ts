// The update policy on a real Postgres, with the engine and host in memory: the endpoints, their
// validation and access, the audit rows, and the policy reconciler starting exactly one update in
// its window from the observed channel row, the quarantine of the build that rolled back, and its
// lifting by a manual POST /api/system/self-update.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { REPO, startSelfUpdateApp, type SelfUpdateApp } from '../helpers/api/self-update.ts';
import { TEST_SECRETS } from '../helpers/api/app.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { createJob, finishJob } from '../../src/state/jobs.ts';
import { listSelfUpdates } from '../../src/state/self-update.ts';
import { quarantineDigest, UPDATE_AVAILABLE_CHANNEL } from '../../src/state/update-policy.ts';
import { UpdatePolicyReconciler } from '../../controllers/update-policy.ts';
import { WorkQueue } from '../../controllers/runtime/work-queue.ts';
import { pino } from 'pino';

const auth = (token: string) => ({ authorization: `Bearer ${token}` });
const service = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'amy', 'x-actor-email': 'amy@example.com' };
const DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] as const;
/** A window open all day, every day: the reconciler is inside it whenever the test runs. */
const ALWAYS = { days: [...DAYS], startHour: 0, endHour: 24 };
/** A window that opens neither today nor tomorrow (UTC): the reconciler is outside it for the test. */
const today = new Date().getUTCDay();
const NOT_NOW = { days: DAYS.filter((_, i) => i !== today && i !== (today + 1) % 7), startHour: 0, endHour: 24 };
const rolledBackExit = { state: 'exited' as const, exitCode: 0, status: 'rolled-back' as const, switchFailure: 'exit 1: container installer-backend is unhealthy', rollbackFailure: null };

interface Policy {
  mode: string;
  window: { days: string[]; startHour: number; endHour: number };
  generation: number;
  updatedBy: string | null;
  status: { decision: string | null; detail: string | null; availableDigest: string | null; lastAttempt: { digest: string; requestId: string | null } | null };
}

async function put(t: SelfUpdateApp, payload: unknown, headers: Record<string, string> = service) {
  return t.app.inject({ method: 'PUT', url: '/api/system/update-policy', headers, payload: payload as object });
}
async function policy(t: SelfUpdateApp): Promise<Policy> {
  const res = await t.app.inject({ method: 'GET', url: '/api/system/update-policy', headers: service });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as Policy;
}
async function quarantine(t: SelfUpdateApp, lifted = false) {
  const res = await t.app.inject({ method: 'GET', url: `/api/system/quarantine${lifted ? '?lifted=true' : ''}`, headers: service });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as { digest: string; outcome: string; liftedAt: string | null; liftedBy: string | null }[];
}
/** The channel row as the observer saw it (the check asks for a fresh one). */
async function observeChannel(t: SelfUpdateApp) {
  const res = await t.app.inject({ method: 'GET', url: '/api/system/self-update-check', headers: service });
  expect(res.json()).toMatchObject({ currentDigest: 'sha256:old', remoteDigest: 'sha256:new' });
  return res.json() as { lastUpdate: { status: string | null } };
}
const policyAudit = (t: SelfUpdateApp) => t.db.database.db.selectFrom('deployment_actions').selectAll().where('kind', '=', 'update-policy').orderBy('id').execute();

describe('GET and PUT /api/system/update-policy', () => {
  let t: SelfUpdateApp;
  beforeAll(async () => (t = await startSelfUpdateApp({ controllers: false })));
  afterAll(async () => t?.close({ drop: true }));

  it('starts as manual, readable by any signed-in caller', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/api/system/update-policy', headers: auth(await t.token('viewer')) });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ mode: 'manual', window: { days: [], startHour: 2, endHour: 5 }, generation: 1, updatedBy: null });
    expect((await t.app.inject({ method: 'GET', url: '/api/system/update-policy' })).statusCode).toBe(401);
    expect((await t.app.inject({ method: 'GET', url: '/api/system/quarantine', headers: auth(await t.token('viewer')) })).json()).toEqual([]);
  });

  it.each([
    [{ mode: 'sometimes' }, 'body.mode: mode must be one of manual, notify, auto'],
    [{ mode: 'auto' }, 'body.window.days: mode auto needs a maintenance window with at least one day'],
    [{ mode: 'auto', window: { days: [], startHour: 2, endHour: 4 } }, 'body.window.days: mode auto needs a maintenance window with at least one day'],
    [{ mode: 'auto', window: { days: ['mon'], startHour: 24, endHour: 4 } }, 'body.window.startHour: startHour must be a whole hour from 0 to 23'],
    [{ mode: 'auto', window: { days: ['mon'], startHour: 2, endHour: 0 } }, 'body.window.endHour: endHour must be a whole hour from 1 to 24'],
    [{ mode: 'auto', window: { days: ['mon'], startHour: 2.5, endHour: 4 } }, 'body.window.startHour: startHour must be a whole hour from 0 to 23'],
    [{ mode: 'auto', window: { days: ['mon'], startHour: 3, endHour: 3 } }, 'body.window: the window is empty: startHour and endHour are the same hour'],
    [{ mode: 'auto', window: { days: ['mon', 'mon'], startHour: 2, endHour: 4 } }, 'body.window.days: a day is named twice'],
    [{ mode: 'auto', window: { days: ['monday'], startHour: 2, endHour: 4 } }, 'body.window.days.0: each day must be one of sun, mon, tue, wed, thu, fri, sat'],
    [{ mode: 'notify', extra: 1 }, 'body'],
  ])('400 naming the problem: %j', async (payload, message) => {
    const res = await put(t, payload);
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json().message).toContain(message);
    expect((await policy(t)).generation).toBe(1);
  });

  it('viewers and operators get 403; an admin and the service token may set it; each change is audited', async () => {
    const body = { mode: 'auto', window: { days: ['wed', 'mon'], startHour: 2, endHour: 4 } };
    expect((await put(t, body, auth(await t.token('viewer')))).statusCode).toBe(403);
    const op = await put(t, body, auth(await t.token('operator')));
    expect(op.statusCode).toBe(403);
    expect(op.json().message).toBe('this needs the admin role or the service token');
    expect((await put(t, body, {})).statusCode).toBe(401);
    expect(await policyAudit(t)).toEqual([]);

    const byAdmin = await put(t, body, auth(await t.token('admin')));
    expect(byAdmin.statusCode, byAdmin.body).toBe(200);
    expect(byAdmin.json()).toMatchObject({ mode: 'auto', window: { days: ['mon', 'wed'], startHour: 2, endHour: 4 }, generation: 2, updatedBy: 'admin' });
    // The control plane: the service token, acting for the user it names.
    const byService = await put(t, { mode: 'notify' }, service);
    expect(byService.statusCode, byService.body).toBe(200);
    // The window is kept when left out.
    expect(byService.json()).toMatchObject({ mode: 'notify', window: { days: ['mon', 'wed'], startHour: 2, endHour: 4 }, generation: 3, updatedBy: 'platform:amy' });
    expect(await policyAudit(t)).toMatchObject([
      { actor: 'admin', status: 'completed', detail: 'update policy: auto, mon,wed 02:00-04:00 UTC (was manual)' },
      { actor: 'platform:amy', actor_email: 'amy@example.com', actor_kind: 'platform-user', status: 'completed', detail: 'update policy: notify (was auto, mon,wed 02:00-04:00 UTC)' },
    ]);
    // The audit trail's kind filter knows the new kind.
    const trail = await t.app.inject({ method: 'GET', url: '/api/deployment/actions?kind=update-policy', headers: service });
    expect(trail.statusCode, trail.body).toBe(200);
    expect(JSON.stringify(trail.json())).toContain('update policy: notify');
  });
});

describe('the policy reconciler', () => {
  let t: SelfUpdateApp | undefined;
  afterEach(async () => {
    await t?.close({ drop: true });
    t = undefined;
  });
  const requests = (a: SelfUpdateApp) => listSelfUpdates(a.db.database.db);

  it('starts exactly one update in the window, quarantines the build that rolled back, and a manual POST lifts it', async () => {
    // Its own loop runs: woken by the PUT's NOTIFY, by jobs and updates, and by its timer.
    const a = (t = await startSelfUpdateApp({ groups: ['self-update', 'update-policy'] }));
    await observeChannel(a);

    expect((await put(a, { mode: 'auto', window: NOT_NOW })).statusCode).toBe(200);
    await eventually(async () => (await policy(a)).status.decision === 'outsideWindow', 'decision outsideWindow');
    expect(await requests(a)).toEqual([]);
    // Outside the window, the new build is announced all the same (the notifications' hook).
    expect((await policy(a)).status.availableDigest).toBe('sha256:new');

    expect((await put(a, { mode: 'auto', window: ALWAYS })).statusCode).toBe(200);
    const [first] = await eventually(async () => {
      const r = await requests(a);
      return r.length && r[0]!.phase === 'helper-running' ? r : null;
    }, 'the policy to start an update');
    expect(first).toMatchObject({ actor: 'update-policy', targetDigest: 'sha256:new' });
    expect((await policy(a)).status.lastAttempt).toMatchObject({ digest: 'sha256:new', requestId: first!.requestId });
    const audit = await a.db.database.db.selectFrom('deployment_actions').selectAll().where('kind', '=', 'self-update').execute();
    expect(audit).toMatchObject([{ actor: 'update-policy', actor_kind: 'system', target_digest: 'sha256:new' }]);

    // While it is in flight, every wake finds it busy: still exactly one request.
    await Promise.all([a.wired.controllers.reconcilePolicy(), a.wired.controllers.reconcilePolicy()]);
    await a.wired.controllers.reconcilePolicy();
    expect(await requests(a)).toHaveLength(1);
    expect((await policy(a)).status.decision).toBe('busy');

    // The update rolls back: its build is quarantined where the outcome is written.
    a.engine.helpers[0]!.finish(rolledBackExit);
    await eventually(async () => (await quarantine(a)).length === 1, 'the quarantine');
    expect(await quarantine(a)).toMatchObject([{ digest: 'sha256:new', outcome: 'rolled-back', liftedAt: null }]);
    a.engine.helpers = [];

    // The window is still open and the channel still offers the build: never started again.
    await eventually(async () => {
      await observeChannel(a);
      await a.wired.controllers.reconcilePolicy();
      return (await policy(a)).status.decision === 'quarantined';
    }, 'decision quarantined');
    for (let i = 0; i < 3; i++) await a.wired.controllers.reconcilePolicy();
    expect(await requests(a)).toHaveLength(1);
    expect((await policy(a)).status.availableDigest).toBeNull();

    // A person can still start it, and that lifts the quarantine, naming them.
    const manual = await a.app.inject({ method: 'POST', url: '/api/system/self-update', headers: service });
    expect(manual.statusCode, manual.body).toBe(200);
    expect(manual.json()).toMatchObject({ started: true, targetDigest: 'sha256:new' });
    expect(await quarantine(a)).toEqual([]);
    expect(await quarantine(a, true)).toMatchObject([{ digest: 'sha256:new', outcome: 'rolled-back', liftedBy: 'platform:amy' }]);
    expect((await requests(a)).map((r) => r.actor)).toEqual(['platform:amy', 'update-policy']);

    // It rolls back again: quarantined again, and again the policy leaves it alone.
    a.engine.helpers[0]!.finish(rolledBackExit);
    await eventually(async () => (await quarantine(a)).length === 1, 'the quarantine again');
    a.engine.helpers = [];
    await observeChannel(a);
    for (let i = 0; i < 3; i++) await a.wired.controllers.reconcilePolicy();
    expect(await requests(a)).toHaveLength(2);
  });

  it('wakes itself when the window opens, without waiting for its poll', async () => {
    const a = (t = await startSelfUpdateApp());
    await observeChannel(a);
    // A clock 1.5 s before the next whole hour (UTC), and a window that opens at that hour.
    const hour = 3_600_000;
    const opening = Math.ceil((Date.now() + 10_000) / hour) * hour;
    const offset = opening - 1_500 - Date.now();
    const startHour = new Date(opening).getUTCHours();
    expect((await put(a, { mode: 'auto', window: { days: [...DAYS], startHour, endHour: startHour + 1 } })).statusCode).toBe(200);
    const stop = new AbortController();
    const wakes: number[] = [];
    const reconciler: UpdatePolicyReconciler = new UpdatePolicyReconciler({
      db: a.db.database.db,
      logger: pino({ level: 'silent' }),
      signal: stop.signal,
      now: () => new Date(Date.now() + offset),
    });
    // On the runtime, with no channel and a poll far away: only its requeue-after can wake it.
    let calls = 0;
    const queue = new WorkQueue<null>({
      reconciler: {
        name: 'update-policy',
        reconcile: () => {
          if (calls++ > 0) wakes.push(Date.now() + offset);
          return reconciler.reconcile();
        },
      },
      status: { recordError: async () => {}, fail: async () => {} },
      logger: pino({ level: 'silent' }),
      pollMs: 3_600_000,
    });
    try {
      await queue.start();
      await eventually(async () => ((await policy(a)).status.decision === 'outsideWindow' ? true : null), 'the first decision');
      const [request] = await eventually(async () => {
        const r = await requests(a);
        return r.length ? r : null;
      }, 'a start once the window opened', 6_000);
      expect(request!.actor).toBe('update-policy');
      expect(wakes).toHaveLength(1);
      expect(wakes[0]).toBeGreaterThanOrEqual(opening);
    } finally {
      await queue.stop();
      stop.abort();
    }
  });

  it('waits while a deployment job is queued, then starts once it has ended', async () => {
    const a = (t = await startSelfUpdateApp());
    await observeChannel(a);
    const db = a.db.database.db;
    const jobId = await createJob(db, { kind: 'restart', params: {}, actor: { id: 'bob' } });
    expect((await put(a, { mode: 'auto', window: ALWAYS })).statusCode).toBe(200);
    await a.wired.controllers.reconcilePolicy();
    expect((await policy(a)).status.decision).toBe('busy');
    expect(await requests(a)).toEqual([]);
    await finishJob(db, jobId, { phase: 'completed', detail: null, exitCode: 0 });
    await observeChannel(a);
    await a.wired.controllers.reconcilePolicy();
    expect(await requests(a)).toHaveLength(1);
  });

  it('manual and notify never start one; notify records the available build and says so once', async () => {
    const a = (t = await startSelfUpdateApp());
    const heard: string[] = [];
    const unlisten = await a.db.database.listen(UPDATE_AVAILABLE_CHANNEL, (digest) => heard.push(digest));
    await observeChannel(a);
    await a.wired.controllers.reconcilePolicy();
    expect((await policy(a)).status).toMatchObject({ decision: 'manual', availableDigest: null });
    expect((await put(a, { mode: 'notify', window: ALWAYS })).statusCode).toBe(200);
    await a.wired.controllers.reconcilePolicy();
    await a.wired.controllers.reconcilePolicy();
    expect((await policy(a)).status).toMatchObject({ decision: 'notifying', availableDigest: 'sha256:new' });
    expect(await requests(a)).toEqual([]);
    // The notifications' hook: NOTIFY update_available, once per build however often it wakes.
    await eventually(() => heard.length > 0, 'NOTIFY update_available');
    await new Promise((r) => setTimeout(r, 200));
    expect(heard).toEqual(['sha256:new']);
    await unlisten();
    // Back to manual: the announcement is withdrawn.
    expect((await put(a, { mode: 'manual' })).statusCode).toBe(200);
    await a.wired.controllers.reconcilePolicy();
    expect((await policy(a)).status).toMatchObject({ decision: 'manual', availableDigest: null });
  });
  // The observer read sha256:new; the channel's tag moves before preflight resolves it again.
  it.each([
    [
      'the tag moved to another build',
      async (a: SelfUpdateApp) => void a.engine.registry.set(`${REPO}:dev-latest`, 'sha256:moved'),
      /^checking: the update policy decided on sha256:new, but \S+:dev-latest now names sha256:moved; nothing was changed$/,
    ],
    [
      'the build decided on was quarantined meanwhile',
      async (a: SelfUpdateApp) => quarantineDigest(a.db.database.db, { digest: 'sha256:new', outcome: 'rolled-back', detail: 'test', requestId: '00000000-0000-4000-8000-00000000000f' }),
      /^checking: sha256:new is quarantined \(its update 00000000-0000-4000-8000-00000000000f ended rolled-back at [^)]+\): the update policy never starts it; an update started by hand lifts it; nothing was changed$/,
    ],
  ])('a policy start carries the digest decided on; preflight aborts it when %s, and nothing is installed', async (_what, change, detail) => {
    const a = (t = await startSelfUpdateApp({ groups: ['self-update'] }));
    await observeChannel(a);
    const before = a.engine.state();
    a.engine.onResolve = async () => {
      a.engine.onResolve = null;
      await change(a);
    };
    expect((await put(a, { mode: 'auto', window: ALWAYS })).statusCode).toBe(200);
    await a.wired.controllers.reconcilePolicy();
    const [r] = await eventually(async () => {
      const all = await requests(a);
      return all.length && all[0]!.phase !== 'requested' && all[0]!.phase !== 'preflight' ? all : null;
    }, 'the policy start to end its preflight');
    expect(r).toMatchObject({ actor: 'update-policy', decidedDigest: 'sha256:new', phase: 'aborted', abortCode: 'preflight' });
    expect(r!.detail).toMatch(detail);
    // Nothing pulled, tagged, staged, backed up or started; no audit row.
    expect(a.engine.calls).not.toContain('pullByDigest');
    expect(a.engine.calls).not.toContain('backupDatabase');
    expect(a.engine.state()).toEqual(before);
    expect(await a.db.database.db.selectFrom('deployment_actions').selectAll().where('kind', '=', 'self-update').execute()).toEqual([]);
    expect((await policy(a)).status.lastAttempt).toMatchObject({ digest: 'sha256:new', requestId: r!.requestId });
  });

  it('a start by hand carries no decided digest and installs what the tag names when preflight resolves it', async () => {
    const a = (t = await startSelfUpdateApp({ groups: ['self-update'] }));
    a.engine.pullable.set('sha256:moved', 'img-moved');
    a.engine.onResolve = async () => {
      a.engine.onResolve = null;
      a.engine.registry.set(`${REPO}:dev-latest`, 'sha256:moved');
    };
    const res = await a.app.inject({ method: 'POST', url: '/api/system/self-update', headers: service });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ started: true, targetDigest: 'sha256:moved' });
    expect((await requests(a))[0]).toMatchObject({ decidedDigest: null, phase: 'helper-running' });
  });
});

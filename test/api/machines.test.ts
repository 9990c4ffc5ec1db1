// GET /api/machines: each state chart's graph (toDirectedGraph, flattened) and the state its
// recent actors are in, read from the status rows.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { createJob, updateJobStatus } from '../../src/state/jobs.ts';
import { eventLabel, flattenChart } from '../../machines/catalog.ts';
import { activeIds, valueText } from '../../src/contracts/charts.ts';
import { jobMachine } from '../../machines/job.machine.ts';
import { listReconcileRuns } from '../../src/state/reconcile-runs.ts';
import { eventually } from '../helpers/shared/eventually.ts';

let t: TestApp;
beforeAll(async () => {
  // The self-update controllers run too: the boot reconciliation's run is a row of its own.
  t = await startTestApp({ controllers: (wired) => wired.controllers.start(['self-update']) });
  await eventually(async () => (await listReconcileRuns(t.db.database.db, 1))[0]?.finishedAt, 'the boot reconciliation to finish');
});
afterAll(async () => t?.close());

interface ChartBody {
  charts: { id: string; rootId: string; nodes: { id: string; parent: string | null; type: string; initial: string | null }[]; edges: { source: string; target: string; label: string; event: string }[]; instances: { id: string; phase: string; state: string | null; stateIds: string[] }[] }[];
}

describe('state charts', () => {
  it('flattens a chart: nodes with parents, edges with readable labels, eventless transitions included', () => {
    const g = flattenChart(jobMachine);
    expect(g.rootId).toBe('job');
    expect(g.nodes.find((n) => n.id === 'job')).toMatchObject({ parent: null, type: 'compound', initial: 'job.starting' });
    expect(g.nodes.find((n) => n.id === 'job.running.watching')).toMatchObject({ parent: 'job.running', type: 'atomic' });
    expect(g.nodes.filter((n) => n.type === 'final').map((n) => n.id).sort()).toEqual(['job.cancelled', 'job.completed', 'job.failed', 'job.hung']);
    // toDirectedGraph leaves out `always`; the drawing needs it to leave `starting`.
    expect(g.edges.filter((e) => e.source === 'job.starting').map((e) => [e.target, e.label])).toEqual([
      ['job.preparing', 'always [needsPrepare]'],
      ['job.running', 'always'],
    ]);
    expect(g.edges.find((e) => e.source === 'job.running.watching' && e.target === 'job.hung')!.label).toBe('after hungTimeout');
    expect(eventLabel('xstate.error.actor.runStep')).toBe('error: runStep');
    expect(eventLabel('xstate.done.actor.resolveTarget')).toBe('done: resolveTarget');
    expect(eventLabel('xstate.after.5000.x.y')).toBe('after 5000 ms');
    expect(activeIds('job', { running: 'watching' })).toEqual(['job.running', 'job.running.watching']);
    expect(valueText({ running: 'watching' })).toBe('running.watching');
    expect(valueText('completed')).toBe('completed');
  });

  it('answers every chart with the state of each recent actor', async () => {
    const jobId = await createJob(t.db.database.db, { kind: 'restart', params: { services: ['web'] }, actor: { id: 'operator' } });
    await updateJobStatus(t.db.database.db, jobId, { snapshot: { status: 'active', value: { running: 'watching' } } });
    const queued = await createJob(t.db.database.db, { kind: 'migrate-host', params: {}, actor: { id: 'admin' } });
    await t.wired.controllers.reconcilePolicy();
    const res = await t.app.inject({ method: 'GET', url: '/api/machines', headers: { authorization: `Bearer ${await t.token('viewer')}` } });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json() as ChartBody;
    expect(body.charts.map((c) => c.id)).toEqual(['job', 'hostMigration', 'selfUpdate', 'bootReconcile', 'updatePolicy']);
    for (const c of body.charts) {
      const ids = new Set(c.nodes.map((n) => n.id));
      for (const e of c.edges) expect(ids.has(e.source) && ids.has(e.target), `${c.id} ${e.source} → ${e.target}`).toBe(true);
    }
    const job = body.charts[0]!.instances.find((i) => i.id === jobId)!;
    expect(job).toMatchObject({ phase: 'queued', state: 'running.watching', stateIds: ['job.running', 'job.running.watching'] });
    expect(body.charts[1]!.instances.find((i) => i.id === queued)).toMatchObject({ phase: 'queued', state: null, stateIds: [] });
    expect(body.charts[3]!.instances[0]).toMatchObject({ state: 'idle', stateIds: ['bootReconcile.idle'] });
    // The policy is one row: its one instance is the last decision (manual, the default).
    expect(body.charts[4]!.instances).toMatchObject([{ id: 'update-policy', state: 'manual', stateIds: ['updatePolicy.manual'] }]);
    const anonymous = await t.app.inject({ method: 'GET', url: '/api/machines' });
    expect(anonymous.statusCode).toBe(401);
  });
});

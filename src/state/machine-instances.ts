// The instances of each state chart (GET /api/machines): the state each recent actor is in, read
// from the rows the controllers persist their snapshots in. The graphs come from machines/catalog.ts.
import type { Kysely } from 'kysely';
import type { DB } from '../db/schema.ts';
import { JOB_KINDS } from '../contracts/job-kinds.ts';
import type { ChartInstance, ChartView, MachinesPort } from '../contracts/ports.ts';
import { listJobs, type JobView } from './jobs.ts';
import { listSelfUpdates, type SelfUpdateView } from './self-update.ts';
import { listReconcileRuns, type ReconcileRunView } from './reconcile-runs.ts';
import { getUpdatePolicy, type UpdatePolicyView } from './update-policy.ts';
import { activeIds, valueText } from '../contracts/charts.ts';

/** How many recent actors of each chart are listed. */
export const CHART_INSTANCES = 20;

/** The state value stored in a status row's snapshot (JobView.state keeps objects as JSON text). */
function storedValue(state: string | null): unknown {
  if (state === null) return null;
  if (state.startsWith('{')) {
    try {
      return JSON.parse(state) as unknown;
    } catch {
      return state;
    }
  }
  return state;
}

function jobInstance(rootId: string, j: JobView): ChartInstance {
  const value = storedValue(j.state);
  const services = j.params.services?.length ? ` ${j.params.services.join(', ')}` : '';
  return {
    id: j.jobId,
    label: `${j.kind}${services} · ${j.actor}`,
    phase: j.phase,
    state: valueText(value),
    stateIds: value === null ? [] : activeIds(rootId, value),
    at: (j.finishedAt ?? j.startedAt ?? j.createdAt).toISOString(),
    ...(j.phase === 'queued' ? { note: 'queued: the chart has not started yet' } : {}),
  };
}

function selfUpdateInstance(rootId: string, u: SelfUpdateView): ChartInstance {
  const value = (u.snapshot as { value?: unknown } | null)?.value ?? null;
  return {
    id: u.requestId,
    label: `${u.targetTag ?? 'self-update'}${u.targetDigest ? ` ${u.targetDigest.slice(0, 19)}` : ''} · ${u.actor}`,
    phase: u.phase,
    state: valueText(value),
    stateIds: value === null ? [] : activeIds(rootId, value),
    at: (u.finishedAt ?? u.updatedAt).toISOString(),
    ...(u.phase === 'requested' ? { note: 'requested: the chart has not started yet' } : {}),
  };
}

/** Runs of the boot reconciliation, read from their own rows (src/state/reconcile-runs.ts). */
function reconcileInstance(rootId: string, r: ReconcileRunView, updates: Map<string, SelfUpdateView>): ChartInstance {
  const value = (r.snapshot as { value?: unknown } | null)?.value ?? null;
  const u = r.requestId ? updates.get(r.requestId) : undefined;
  return {
    id: r.runId,
    label: u ? `reconcile ${u.targetTag ?? 'self-update'} → ${u.phase}` : r.requestId ? `reconcile ${r.requestId}` : 'no self-update to reconcile',
    phase: r.finishedAt ? 'finished' : 'running',
    state: valueText(value),
    stateIds: value === null ? [] : activeIds(rootId, value),
    at: (r.finishedAt ?? r.updatedAt).toISOString(),
    note: `run by ${r.worker}`,
  };
}

/** The policy is one row: its one instance is the reconciler's last decision (a state of the chart). */
function policyInstances(rootId: string, p: UpdatePolicyView): ChartInstance[] {
  const { decision, decidedAt, detail } = p.status;
  if (!decision || !decidedAt) return [];
  return [{ id: 'update-policy', label: `update policy (${p.mode}, generation ${p.generation})`, phase: decision, state: decision, stateIds: activeIds(rootId, decision), at: decidedAt.toISOString(), ...(detail ? { note: detail } : {}) }];
}

/** The charts' graphs as the composition root hands them in (machines/catalog.ts). */
export interface ChartGraphs {
  id: string;
  title: string;
  description: string;
  version: string;
  graph: Pick<ChartView, 'rootId' | 'nodes' | 'edges'>;
}

/** GET /api/machines: each chart's graph with the state of its recent actors, read from their rows. */
export function machineCharts(db: Kysely<DB>, charts: ChartGraphs[]): MachinesPort {
  return {
    async charts(): Promise<ChartView[]> {
      const jobs = await listJobs(db, { limit: 200 });
      const [updates, runs, policy] = await Promise.all([listSelfUpdates(db, { limit: CHART_INSTANCES }), listReconcileRuns(db, CHART_INSTANCES), getUpdatePolicy(db)]);
      const byId = new Map(updates.map((u) => [u.requestId, u]));
      return charts.map((s) => {
        const g = s.graph;
        let instances: ChartInstance[];
        if (s.id === 'job') instances = jobs.filter((j) => JOB_KINDS[j.kind].chart === 'job').slice(0, CHART_INSTANCES).map((j) => jobInstance(g.rootId, j));
        else if (s.id === 'hostMigration') instances = jobs.filter((j) => JOB_KINDS[j.kind].chart === 'host-migration').slice(0, CHART_INSTANCES).map((j) => jobInstance(g.rootId, j));
        else if (s.id === 'selfUpdate') instances = updates.map((u) => selfUpdateInstance(g.rootId, u));
        else if (s.id === 'updatePolicy') instances = policyInstances(g.rootId, policy);
        else instances = runs.map((r) => reconcileInstance(g.rootId, r, byId));
        return { id: s.id, title: s.title, description: s.description, version: s.version, ...g, instances };
      });
    },
  };
}

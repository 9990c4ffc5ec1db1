// The state charts as the operator UI draws them (GET /api/machines): each chart's graph from
// xstate/graph's toDirectedGraph, flattened to nodes and edges, and the state each recent actor is
// in, read from the status rows the controllers persist (snapshot column). The API reaches this
// through MachinesPort only: it never imports machines (architecture.md).
import type { Kysely } from 'kysely';
import type { AnyStateMachine } from 'xstate';
import { toDirectedGraph } from 'xstate/graph';
import type { DirectedGraphNode } from 'xstate/graph';
import type { DB } from './db/schema.ts';
import { JOB_KINDS } from './contracts/job-kinds.ts';
import type { ChartEdge, ChartInstance, ChartNode, ChartView, MachinesPort } from './contracts/ports.ts';
import { listJobs, type JobView } from './state/jobs.ts';
import { listSelfUpdates, SPAWNED, type SelfUpdateView } from './state/self-update.ts';
import { jobMachine, JOB_CHART_VERSION } from '../machines/job.machine.ts';
import { hostMigrationMachine, HOST_MIGRATION_CHART_VERSION } from '../machines/host-migration.machine.ts';
import { selfUpdateMachine, SELF_UPDATE_CHART_VERSION } from '../machines/self-update.machine.ts';
import { bootReconcileMachine, BOOT_RECONCILE_CHART_VERSION } from '../machines/boot-reconcile.machine.ts';

/** How many recent actors of each chart are listed. */
export const CHART_INSTANCES = 20;

interface GuardLike {
  type?: unknown;
  name?: unknown;
}

function guardName(guard: unknown): string | null {
  if (guard === undefined || guard === null) return null;
  if (typeof guard === 'string') return guard;
  if (typeof guard === 'function') return (guard as { name?: string }).name || 'guard';
  const g = guard as GuardLike;
  return typeof g.type === 'string' ? g.type : 'guard';
}

/** `xstate.after.hungTimeout.job.running.watching` → `after hungTimeout`, and the like. */
export function eventLabel(event: string): string {
  if (event === '') return 'always';
  let m = /^xstate\.after\.([^.]+)\./.exec(event);
  if (m) return /^\d+$/.test(m[1]!) ? `after ${m[1]} ms` : `after ${m[1]}`;
  m = /^xstate\.error\.actor\.(.+)$/.exec(event);
  if (m) return `error: ${m[1]}`;
  m = /^xstate\.done\.actor\.(.+)$/.exec(event);
  if (m) return `done: ${m[1]}`;
  if (event.startsWith('xstate.done.state.')) return 'done';
  return event;
}

interface StateNodeLike {
  id: string;
  key: string;
  type: ChartNode['type'];
  initial?: { target?: readonly { id: string }[] };
  always?: readonly { target?: readonly { id: string }[]; guard?: unknown }[];
}

interface TransitionLike {
  eventType: string;
  guard?: unknown;
}

/** The chart's graph: toDirectedGraph's nodes and edges, plus the `always` transitions it omits. */
export function flattenChart(machine: AnyStateMachine): { rootId: string; nodes: ChartNode[]; edges: ChartEdge[] } {
  const root = toDirectedGraph(machine);
  const nodes: ChartNode[] = [];
  const edges: ChartEdge[] = [];
  const walk = (n: DirectedGraphNode, parent: string | null) => {
    const sn = n.stateNode as unknown as StateNodeLike;
    nodes.push({ id: n.id, key: sn.key, parent, type: sn.type, initial: sn.initial?.target?.[0]?.id ?? null });
    for (const e of n.edges) {
      const t = e.transition as unknown as TransitionLike;
      const guard = guardName(t.guard);
      const event = t.eventType;
      edges.push({ id: e.id, source: e.source.id, target: e.target.id, event, label: `${eventLabel(event)}${guard ? ` [${guard}]` : ''}`, guard });
    }
    (sn.always ?? []).forEach((t, i) => {
      const guard = guardName(t.guard);
      for (const target of t.target ?? []) {
        edges.push({ id: `${n.id}:always:${i}`, source: n.id, target: target.id, event: '', label: `always${guard ? ` [${guard}]` : ''}`, guard });
      }
    });
    for (const c of n.children) walk(c, n.id);
  };
  walk(root, null);
  return { rootId: root.id, nodes, edges };
}

/** Active node ids for a state value (`'running'`, `{ running: 'watching' }`), outermost first. */
export function activeIds(rootId: string, value: unknown): string[] {
  const out: string[] = [];
  const visit = (prefix: string, v: unknown) => {
    if (typeof v === 'string') {
      out.push(`${prefix}.${v}`);
      return;
    }
    if (v && typeof v === 'object') {
      for (const [k, child] of Object.entries(v as Record<string, unknown>)) {
        out.push(`${prefix}.${k}`);
        visit(`${prefix}.${k}`, child);
      }
    }
  };
  visit(rootId, value);
  return out;
}

/** `{ running: 'watching' }` → `running.watching`. */
export function valueText(value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value === 'string') return value;
  const entries = Object.entries(value as Record<string, unknown>);
  return entries.map(([k, v]) => (v && (typeof v === 'string' || Object.keys(v as object).length) ? `${k}.${valueText(v)}` : k)).join(', ');
}

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

/**
 * The boot reconciliation runs once per boot and keeps no row of its own; where it stands follows
 * from the self-update it reconciles: helper running → waiting for the helper; an outcome recorded
 * → reconciled; closed without an outcome → undecided; nothing pending → idle.
 */
function reconcileInstances(rootId: string, updates: SelfUpdateView[]): ChartInstance[] {
  const spawned = updates.filter((u) => SPAWNED.includes(u.phase));
  if (!spawned.length) {
    return [{ id: 'boot', label: 'this boot: no self-update to reconcile', phase: 'idle', state: 'idle', stateIds: activeIds(rootId, 'idle'), at: new Date().toISOString() }];
  }
  return spawned.map((u) => {
    const state = u.phase === 'helper-running' ? 'waitingForHelper' : u.phase === 'undecided' ? 'undecided' : 'reconciled';
    return {
      id: u.requestId,
      label: `reconcile ${u.targetTag ?? 'self-update'} → ${u.phase}`,
      phase: u.phase,
      state,
      stateIds: activeIds(rootId, state),
      at: (u.finishedAt ?? u.updatedAt).toISOString(),
      note: 'derived from the self-update status row',
    };
  });
}

interface ChartSpec {
  id: string;
  title: string;
  description: string;
  version: string;
  machine: AnyStateMachine;
}

const SPECS: ChartSpec[] = [
  { id: 'job', title: 'Platform job', description: 'deploy, restart, stop, kill, pull, compose-up, apply-config: prepare, run the compose steps, hung guard, cancel', version: JOB_CHART_VERSION, machine: jobMachine },
  { id: 'hostMigration', title: 'Host migration', description: 'copy migrate-host.sh to the host, run it in the host namespaces', version: HOST_MIGRATION_CHART_VERSION, machine: hostMigrationMachine },
  { id: 'selfUpdate', title: 'Self-update', description: 'resolve the channel target, preflight, record the action, spawn the helper', version: SELF_UPDATE_CHART_VERSION, machine: selfUpdateMachine },
  { id: 'bootReconcile', title: 'Boot reconciliation', description: 'on boot: how did the last self-update end (digests and schema compared)', version: BOOT_RECONCILE_CHART_VERSION, machine: bootReconcileMachine },
];

export function machineCharts(db: Kysely<DB>): MachinesPort {
  // The graphs never change while the process runs.
  const graphs = new Map(SPECS.map((s) => [s.id, flattenChart(s.machine)]));
  return {
    async charts(): Promise<ChartView[]> {
      const jobs = await listJobs(db, { limit: 200 });
      const updates = await listSelfUpdates(db, { limit: CHART_INSTANCES });
      return SPECS.map((s) => {
        const g = graphs.get(s.id)!;
        let instances: ChartInstance[];
        if (s.id === 'job') instances = jobs.filter((j) => JOB_KINDS[j.kind].chart === 'job').slice(0, CHART_INSTANCES).map((j) => jobInstance(g.rootId, j));
        else if (s.id === 'hostMigration') instances = jobs.filter((j) => JOB_KINDS[j.kind].chart === 'host-migration').slice(0, CHART_INSTANCES).map((j) => jobInstance(g.rootId, j));
        else if (s.id === 'selfUpdate') instances = updates.map((u) => selfUpdateInstance(g.rootId, u));
        else instances = reconcileInstances(g.rootId, updates);
        return { id: s.id, title: s.title, description: s.description, version: s.version, ...g, instances };
      });
    },
  };
}

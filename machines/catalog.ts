// The state charts the controllers run, as the operator UI draws them: each chart's graph from
// xstate/graph's toDirectedGraph, flattened to nodes and edges, and helpers to place a state value
// on it. Needs only xstate and the charts.
import type { AnyStateMachine } from 'xstate';
import { toDirectedGraph } from 'xstate/graph';
import type { DirectedGraphNode } from 'xstate/graph';
import { jobMachine, JOB_CHART_VERSION } from './job.machine.ts';
import { hostMigrationMachine, HOST_MIGRATION_CHART_VERSION } from './host-migration.machine.ts';
import { selfUpdateMachine, SELF_UPDATE_CHART_VERSION } from './self-update.machine.ts';
import { bootReconcileMachine, BOOT_RECONCILE_CHART_VERSION } from './boot-reconcile.machine.ts';
import { updatePolicyMachine, UPDATE_POLICY_CHART_VERSION } from './update-policy.machine.ts';

/** A node of a chart's graph (the shape of ChartNode in src/contracts/ports.ts). */
export interface ChartNode {
  id: string;
  key: string;
  parent: string | null;
  type: 'atomic' | 'compound' | 'parallel' | 'final' | 'history';
  initial: string | null;
}

/** An edge of a chart's graph (the shape of ChartEdge in src/contracts/ports.ts). */
export interface ChartEdge {
  id: string;
  source: string;
  target: string;
  event: string;
  label: string;
  guard: string | null;
}

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

export interface ChartSpec {
  id: string;
  title: string;
  description: string;
  version: string;
  machine: AnyStateMachine;
}

export const SPECS: ChartSpec[] = [
  { id: 'job', title: 'Platform job', description: 'deploy, restart, stop, kill, pull, compose-up, apply-config: prepare, run the compose steps, hung guard, cancel', version: JOB_CHART_VERSION, machine: jobMachine },
  { id: 'hostMigration', title: 'Host migration', description: 'copy migrate-host.sh to the host, run it in the host namespaces', version: HOST_MIGRATION_CHART_VERSION, machine: hostMigrationMachine },
  { id: 'selfUpdate', title: 'Self-update', description: 'resolve the channel target, preflight, record the action, spawn the helper', version: SELF_UPDATE_CHART_VERSION, machine: selfUpdateMachine },
  { id: 'bootReconcile', title: 'Boot reconciliation', description: 'on boot: how did the last self-update end (digests and schema compared), and what follows: the channel tag, the notification, the quarantine', version: BOOT_RECONCILE_CHART_VERSION, machine: bootReconcileMachine },
  { id: 'updatePolicy', title: 'Update policy', description: 'at each wake: start a self-update in the maintenance window, or say why not (manual, no new build, quarantined, notify, outside the window, busy, tried this window)', version: UPDATE_POLICY_CHART_VERSION, machine: updatePolicyMachine },
];


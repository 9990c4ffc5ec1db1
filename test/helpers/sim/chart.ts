// Tools for simulation tests of state charts: every declared transition, and the ones a set of paths takes.
import type { AnyStateMachine, AnyStateNode } from 'xstate';

export interface Edge {
  from: string;
  event: string;
}

function allNodes(node: AnyStateNode): AnyStateNode[] {
  return [node, ...Object.values(node.states as Record<string, AnyStateNode>).flatMap(allNodes)];
}

/** Every (state node, event) pair the chart declares, eventless `always` transitions included. */
export function declaredEdges(machine: AnyStateMachine): Edge[] {
  const edges: Edge[] = [];
  for (const node of allNodes(machine.root)) {
    for (const [event] of node.transitions) edges.push({ from: node.id, event });
    if (node.always?.length) edges.push({ from: node.id, event: '(always)' });
  }
  return edges;
}

export const stateIds = (machine: AnyStateMachine) => allNodes(machine.root).map((n) => n.id);

export const edgeKey = (e: Edge) => `${e.from} --${e.event}-->`;

/**
 * The declared transitions that are enabled in at least one reachable state, each credited to the
 * deepest active node that declares it. Self-loops (a re-entered timer state) count too.
 */
export function enabledEdges(
  states: Iterable<{ _nodes: AnyStateNode[]; can(e: unknown): boolean }>,
  events: readonly { type: string }[],
): Set<string> {
  const out = new Set<string>();
  for (const state of states) {
    const nodes = [...state._nodes].reverse();
    for (const e of events) {
      if (!state.can(e)) continue;
      const owner = nodes.find((n) => n.transitions.has(e.type));
      if (owner) out.add(edgeKey({ from: owner.id, event: e.type }));
    }
  }
  return out;
}

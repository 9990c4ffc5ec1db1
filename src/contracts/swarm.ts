// The platform as a Docker Swarm stack (PLATFORM_RUNTIME=swarm): what the observer reads of the
// Swarm through its manager, as the status page, diagnostics and the API show it. Plain views of the
// engine's JSON (src/adapters/swarm-state.ts makes them): the names are `docker node ls`'s and
// `docker service ps`'s, not the engine API's.

/** Where the platform runs: a Compose project on this host, or a stack on the Swarm this host's engine manages. */
export type PlatformRuntime = 'compose' | 'swarm';

export interface SwarmNodeView {
  id: string;
  hostname: string;
  role: 'manager' | 'worker';
  /** The manager leading the Swarm's Raft group. */
  leader: boolean;
  /** ready, down, disconnected, unknown (`docker node ls` STATUS). */
  state: string;
  /** active, pause, drain. */
  availability: string;
  /** A manager's reachability from the other managers (reachable, unreachable); null for a worker. */
  managerReachability: string | null;
  engineVersion: string | null;
  /** The node's address as the Swarm sees it. */
  address: string | null;
  /** Why the node is in its state, when the engine says (a down node's "heartbeat failure"). */
  message: string | null;
}

export interface SwarmServiceView {
  id: string;
  /** The Swarm's name, `<stack>_<service>`. */
  name: string;
  /** The compose service it was deployed from: the name without `<stack>_`. */
  service: string;
  mode: 'replicated' | 'global' | 'replicated-job' | 'global-job';
  /** Tasks the Swarm wants running (for a global service, one per eligible node); null from an engine that does not count them. */
  desiredReplicas: number | null;
  runningReplicas: number | null;
  /** The image reference deployed, without the digest the Swarm pinned. */
  image: string;
  /** The registry digest the Swarm pinned at deploy (`sha256:…`), when it resolved one. */
  digest: string | null;
  /** The last rolling update's state (updating, paused, completed, rollback_started, rollback_paused, rollback_completed); null if never updated. */
  updateState: string | null;
  updateMessage: string | null;
}

export interface SwarmTaskView {
  id: string;
  serviceId: string;
  /** The compose service of the task's service. */
  service: string;
  /** The replica's slot (1, 2, …); null for a global service's task, which is one per node instead. */
  slot: number | null;
  nodeId: string | null;
  /** The node's hostname; null before the task is assigned (or when the node is gone). */
  node: string | null;
  /** new, pending, assigned, preparing, starting, running, complete, shutdown, failed, rejected, orphaned… */
  state: string;
  /** What the Swarm wants of the task: running, ready, shutdown, remove. */
  desiredState: string;
  /** Why the task failed or was rejected (`docker service ps` ERROR). */
  error: string | null;
  message: string | null;
  /** When the task last changed state (ISO 8601). */
  timestamp: string | null;
  createdAt: string | null;
  containerId: string | null;
  image: string;
  digest: string | null;
  /** The newest task of its slot (or node, for a global service); false for the failed ones kept as its history. */
  current: boolean;
}

/** The Swarm and the platform's stack on it, as one read through the manager saw them. */
export interface SwarmObservation {
  nodes: SwarmNodeView[];
  services: SwarmServiceView[];
  /** Each slot's current task, and the most recent of its failed ones (as `docker service ps` lists them first). */
  tasks: SwarmTaskView[];
}

/** The `code` of the error a Swarm read throws when the engine answered but cannot say: it is no manager of a Swarm. */
export const NOT_A_MANAGER = 'not-a-manager';

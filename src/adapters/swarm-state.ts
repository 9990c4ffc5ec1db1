// The Swarm and one stack on it as the manager's engine sees them: its nodes, the stack's services
// (label com.docker.stack.namespace=<stack>) with their replica counts, and their tasks, mapped to
// the plain views of src/contracts/swarm.ts. Read only; the observer calls it for the platform's row
// when PLATFORM_RUNTIME=swarm. The mapping functions take the engine's JSON as it comes, so that
// they are tested on what this machine's engine answered (test/fixtures/swarm).
import type Docker from 'dockerode';
import { engineMessage, statusOf } from './engine-errors.ts';
import { NOT_A_MANAGER, type SwarmNodeView, type SwarmObservation, type SwarmServiceView, type SwarmTaskView } from '../contracts/swarm.ts';

/** The parts of the engine's JSON read here (GET /nodes, /services?status=true, /tasks). */
interface EngineNode {
  ID: string;
  Spec?: { Role?: string; Availability?: string };
  Description?: { Hostname?: string; Engine?: { EngineVersion?: string } };
  Status?: { State?: string; Addr?: string; Message?: string };
  ManagerStatus?: { Leader?: boolean; Reachability?: string; Addr?: string };
}
interface EngineService {
  ID: string;
  Spec?: {
    Name?: string;
    Labels?: Record<string, string>;
    TaskTemplate?: { ContainerSpec?: { Image?: string } };
    Mode?: { Replicated?: { Replicas?: number }; Global?: object; ReplicatedJob?: object; GlobalJob?: object };
  };
  ServiceStatus?: { RunningTasks?: number; DesiredTasks?: number };
  UpdateStatus?: { State?: string; Message?: string };
}
interface EngineTask {
  ID: string;
  ServiceID: string;
  NodeID?: string;
  Slot?: number;
  CreatedAt?: string;
  DesiredState?: string;
  Spec?: { ContainerSpec?: { Image?: string } };
  Status?: { State?: string; Message?: string; Err?: string; Timestamp?: string; ContainerStatus?: { ContainerID?: string } };
}

export const STACK_LABEL = 'com.docker.stack.namespace';
/** Failed tasks kept per slot beside its current one: the last attempts' errors say why a replica is not running. */
export const FAILED_HISTORY = 2;
const FAILED = new Set(['failed', 'rejected']);

/** `repo:tag@sha256:…` as the Swarm pins it: the reference and the digest apart. */
function splitPinned(reference: string): { image: string; digest: string | null } {
  const at = reference.lastIndexOf('@');
  return at >= 0 ? { image: reference.slice(0, at), digest: reference.slice(at + 1) } : { image: reference, digest: null };
}

const orNull = (s: string | undefined) => (s === undefined || s === '' ? null : s);

export function nodeViews(raw: readonly EngineNode[]): SwarmNodeView[] {
  const views = raw.map((n): SwarmNodeView => {
    const role = n.Spec?.Role === 'manager' ? 'manager' : 'worker';
    // A manager may report 0.0.0.0 as its node address; its Raft address names it then.
    const addr = orNull(n.Status?.Addr);
    const address = addr && addr !== '0.0.0.0' ? addr : (n.ManagerStatus?.Addr?.replace(/:\d+$/, '') ?? addr);
    return {
      id: n.ID,
      hostname: n.Description?.Hostname ?? n.ID,
      role,
      leader: n.ManagerStatus?.Leader === true,
      state: n.Status?.State ?? 'unknown',
      availability: n.Spec?.Availability ?? 'unknown',
      managerReachability: role === 'manager' ? (n.ManagerStatus?.Reachability ?? null) : null,
      engineVersion: orNull(n.Description?.Engine?.EngineVersion),
      address,
      message: orNull(n.Status?.Message),
    };
  });
  return views.sort((a, b) => (a.role === b.role ? a.hostname.localeCompare(b.hostname) : a.role === 'manager' ? -1 : 1));
}

function modeOf(s: EngineService): SwarmServiceView['mode'] {
  const m = s.Spec?.Mode ?? {};
  if (m.Global) return 'global';
  if (m.ReplicatedJob) return 'replicated-job';
  if (m.GlobalJob) return 'global-job';
  return 'replicated';
}

/** The compose service a Swarm service of `stack` comes from: its name without `<stack>_`. */
export function composeServiceOf(name: string, stack: string): string {
  return name.startsWith(`${stack}_`) ? name.slice(stack.length + 1) : name;
}

export function serviceViews(raw: readonly EngineService[], stack: string): SwarmServiceView[] {
  return raw
    .map((s): SwarmServiceView => {
      const name = s.Spec?.Name ?? s.ID;
      const pinned = splitPinned(s.Spec?.TaskTemplate?.ContainerSpec?.Image ?? '');
      const mode = modeOf(s);
      return {
        id: s.ID,
        name,
        service: composeServiceOf(name, stack),
        mode,
        // An engine before API 1.41 has no ServiceStatus: a replicated service's spec still says what it wants.
        desiredReplicas: s.ServiceStatus?.DesiredTasks ?? (mode === 'replicated' ? (s.Spec?.Mode?.Replicated?.Replicas ?? null) : null),
        runningReplicas: s.ServiceStatus?.RunningTasks ?? null,
        // The reference as the compose file wrote it (the stack's label), else the pinned one's name.
        image: s.Spec?.Labels?.['com.docker.stack.image'] ?? pinned.image,
        digest: pinned.digest,
        updateState: orNull(s.UpdateStatus?.State),
        updateMessage: orNull(s.UpdateStatus?.Message),
      };
    })
    .sort((a, b) => a.name.localeCompare(b.name));
}

const createdOf = (t: EngineTask) => t.CreatedAt ?? t.Status?.Timestamp ?? '';

/**
 * What `docker service ps` users look at first: per slot (per node for a global service) the newest
 * task, which is the replica now or the one the Swarm is starting, and the last FAILED_HISTORY
 * failed or rejected tasks before it, whose errors say why it was replaced. The rest of the Swarm's
 * history (shut down by an update, a scale-down, a completed rollout) is left out.
 */
export function taskViews(raw: readonly EngineTask[], services: readonly SwarmServiceView[], nodes: readonly SwarmNodeView[]): SwarmTaskView[] {
  const serviceById = new Map(services.map((s) => [s.id, s]));
  const hostById = new Map(nodes.map((n) => [n.id, n.hostname]));
  const slots = new Map<string, EngineTask[]>();
  for (const t of raw) {
    const key = `${t.ServiceID}/${t.Slot && t.Slot > 0 ? `slot:${t.Slot}` : `node:${t.NodeID ?? t.ID}`}`;
    slots.set(key, [...(slots.get(key) ?? []), t]);
  }
  const kept: SwarmTaskView[] = [];
  for (const tasks of slots.values()) {
    const newestFirst = [...tasks].sort((a, b) => createdOf(b).localeCompare(createdOf(a)));
    const [current, ...older] = newestFirst;
    if (!current) continue;
    const failed = older.filter((t) => FAILED.has(t.Status?.State ?? '')).slice(0, FAILED_HISTORY);
    for (const t of [current, ...failed]) {
      const pinned = splitPinned(t.Spec?.ContainerSpec?.Image ?? '');
      const service = serviceById.get(t.ServiceID);
      kept.push({
        id: t.ID,
        serviceId: t.ServiceID,
        service: service?.service ?? t.ServiceID,
        slot: t.Slot && t.Slot > 0 ? t.Slot : null,
        nodeId: orNull(t.NodeID),
        node: t.NodeID ? (hostById.get(t.NodeID) ?? null) : null,
        state: t.Status?.State ?? 'unknown',
        desiredState: t.DesiredState ?? 'unknown',
        error: orNull(t.Status?.Err),
        message: orNull(t.Status?.Message),
        timestamp: orNull(t.Status?.Timestamp),
        createdAt: orNull(t.CreatedAt),
        containerId: orNull(t.Status?.ContainerStatus?.ContainerID),
        image: pinned.image,
        digest: pinned.digest,
        current: t === current,
      });
    }
  }
  const place = (t: SwarmTaskView) => (t.slot !== null ? String(t.slot).padStart(6, '0') : `~${t.node ?? t.nodeId ?? ''}`);
  return kept.sort(
    (a, b) =>
      a.service.localeCompare(b.service) ||
      place(a).localeCompare(place(b)) ||
      Number(b.current) - Number(a.current) ||
      (b.createdAt ?? '').localeCompare(a.createdAt ?? ''),
  );
}

/**
 * The engine's refusal when it is no Swarm manager (a worker, or not in a Swarm at all): 503 with
 * "This node is not a swarm manager…". Rethrown with `code` NOT_A_MANAGER and the engine's words,
 * which name the cause; any other failure is passed on as it came.
 */
export function swarmReadError(err: unknown): Error {
  const text = engineMessage(err);
  if (statusOf(err) === 503 && /not a swarm manager/i.test(text)) {
    return Object.assign(new Error(`the engine is not a Swarm manager, so the stack cannot be read from it: ${text}`), { code: NOT_A_MANAGER });
  }
  return err instanceof Error ? err : new Error(text);
}

/** The Swarm's nodes and the services and tasks of `stack`, through the manager `docker` talks to. */
export async function readSwarmState(docker: Docker, stack: string): Promise<SwarmObservation> {
  try {
    const [rawNodes, rawServices] = await Promise.all([
      docker.listNodes() as Promise<EngineNode[]>,
      docker.listServices({ filters: { label: [`${STACK_LABEL}=${stack}`] }, status: true }) as unknown as Promise<EngineService[]>,
    ]);
    const nodes = nodeViews(rawNodes);
    const services = serviceViews(rawServices, stack);
    // An empty service filter would list every task of the Swarm.
    const rawTasks = services.length ? ((await docker.listTasks({ filters: { service: services.map((s) => s.id) } })) as EngineTask[]) : [];
    return { nodes, services, tasks: taskViews(rawTasks, services, nodes) };
  } catch (err) {
    throw swarmReadError(err);
  }
}

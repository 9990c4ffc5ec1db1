// The names a Swarm stack's log lines are given. A stack's services are `<stack>_<service>`,
// labelled com.docker.stack.namespace=<stack>; their tasks run as containers named
// `<stack>_<service>.<slot>.<task id>` (a global service's: `.<node id>.` for the slot), which is
// what a line's `container` is, as on the node that runs it. A line read with `details=1` names its
// node, service and task by id (com.docker.swarm.node.id=…,com.docker.swarm.service.id=…,
// com.docker.swarm.task.id=…); the directory turns them into the node's hostname, the compose
// service and the task (`web.2`). A task or node it has not met yet (a replica rescheduled while
// following) gets a provisional name that `resolve` completes before the line leaves the adapter.
import type Docker from 'dockerode';
import type { ContainerLogLine, LogSelection } from '../../contracts/ports.ts';
import type { ParsedLine } from './frames.ts';

export const STACK_LABEL = 'com.docker.stack.namespace';
const NODE_ATTR = 'com.docker.swarm.node.id';
const SERVICE_ATTR = 'com.docker.swarm.service.id';
const TASK_ATTR = 'com.docker.swarm.task.id';

export interface StackService {
  id: string;
  /** The Swarm's name, `<stack>_<service>`. */
  name: string;
  /** The compose service, `<service>`. */
  service: string;
  tty: boolean;
}

export interface StackTask {
  id: string;
  serviceId: string;
  nodeId: string;
  /** `<stack>_<service>.<slot>.<task id>`: the task's container on its node. */
  container: string;
  /** `<service>.<slot>`. */
  task: string;
  /** It ran (has or had a container), so the engine may hold logs of it. */
  ran: boolean;
}

/** The engine's answers the directory reads, trimmed to the fields it uses. */
export interface RawService {
  ID: string;
  Spec?: { Name?: string; Labels?: Record<string, string>; TaskTemplate?: { ContainerSpec?: { TTY?: boolean } } };
}
export interface RawTask {
  ID: string;
  ServiceID?: string;
  NodeID?: string;
  Slot?: number;
  Status?: { ContainerStatus?: { ContainerID?: string } };
}
export interface RawNode {
  ID: string;
  Description?: { Hostname?: string };
}

/** A selection that names no service or task of the stack (the route answers 404 or 400). */
export class UnknownSelection extends Error {
  readonly code = 'log-selection-unknown';
  constructor(
    readonly parameter: 'service' | 'containerName',
    message: string,
  ) {
    super(message);
  }
}

/** The attributes of a message read with `details=1`: `k=v` pairs joined by commas, each URL-encoded. */
export function parseDetails(details: string): Map<string, string> {
  const attrs = new Map<string, string>();
  for (const pair of details.split(',')) {
    const eq = pair.indexOf('=');
    if (eq <= 0) continue;
    const decode = (s: string) => {
      try {
        return decodeURIComponent(s.replace(/\+/g, ' '));
      } catch {
        return s;
      }
    };
    attrs.set(decode(pair.slice(0, eq)), decode(pair.slice(eq + 1)));
  }
  return attrs;
}

const notFound = (err: unknown) => (err as { statusCode?: number }).statusCode === 404;

export class StackDirectory {
  readonly services = new Map<string, StackService>();
  readonly tasks = new Map<string, StackTask>();
  readonly nodes = new Map<string, string>();
  /** Lines named before their task or node was known, with the ids to name them by. */
  private readonly provisional = new WeakMap<ContainerLogLine, { taskId: string; nodeId: string; serviceId: string }>();
  private readonly attrsCache = new Map<string, { taskId: string; nodeId: string; serviceId: string }>();

  constructor(
    private readonly docker: Docker,
    readonly stack: string,
  ) {}

  /** Learns services of the stack (others are ignored), tasks and nodes from the engine's answers. */
  learn(raw: { services?: RawService[]; tasks?: RawTask[]; nodes?: RawNode[] }): void {
    for (const s of raw.services ?? []) {
      const name = s.Spec?.Name ?? s.ID;
      if (s.Spec?.Labels?.[STACK_LABEL] !== this.stack) continue;
      const prefix = `${this.stack}_`;
      const service = name.startsWith(prefix) ? name.slice(prefix.length) : name;
      this.services.set(s.ID, { id: s.ID, name, service, tty: Boolean(s.Spec?.TaskTemplate?.ContainerSpec?.TTY) });
    }
    for (const n of raw.nodes ?? []) this.nodes.set(n.ID, n.Description?.Hostname ?? n.ID);
    for (const t of raw.tasks ?? []) {
      const svc = this.services.get(t.ServiceID ?? '');
      if (!svc) continue;
      const slot = t.Slot ? String(t.Slot) : (t.NodeID ?? '');
      this.tasks.set(t.ID, {
        id: t.ID,
        serviceId: svc.id,
        nodeId: t.NodeID ?? '',
        container: `${svc.name}.${slot}.${t.ID}`,
        task: `${svc.service}.${slot}`,
        ran: Boolean(t.Status?.ContainerStatus?.ContainerID),
      });
    }
  }

  /**
   * Reads the stack's services, their tasks and the Swarm's nodes, and returns what `sel` selects:
   * the services to follow, the tasks that ran (in container-name order), and the one task a
   * `containerName` names. Throws UnknownSelection when `sel` names nothing of the stack.
   */
  async load(sel: LogSelection): Promise<{ services: StackService[]; tasks: StackTask[]; taskFilter?: string }> {
    const [services, nodes] = await Promise.all([
      this.docker.listServices({ filters: { label: [`${STACK_LABEL}=${this.stack}`] } }) as Promise<RawService[]>,
      this.docker.listNodes() as Promise<RawNode[]>,
    ]);
    this.learn({ services, nodes });
    let selected = [...this.services.values()].filter((s) => sel.service === undefined || s.service === sel.service);
    if (sel.service !== undefined && selected.length === 0) {
      throw new UnknownSelection('service', `service "${sel.service.slice(0, 64)}" is not a service of the platform (stack ${this.stack})`);
    }
    if (selected.length > 0) {
      this.learn({ tasks: (await this.docker.listTasks({ filters: { service: selected.map((s) => s.id) } })) as RawTask[] });
    }
    const ids = new Set(selected.map((s) => s.id));
    let tasks = [...this.tasks.values()].filter((t) => ids.has(t.serviceId));
    let taskFilter: string | undefined;
    if (sel.containerName !== undefined) {
      const one = tasks.find((t) => t.container === sel.containerName);
      if (!one) throw new UnknownSelection('containerName', `containerName: no platform container is named "${sel.containerName.slice(0, 64)}" (stack ${this.stack})`);
      tasks = [one];
      selected = selected.filter((s) => s.id === one.serviceId);
      taskFilter = one.id;
    }
    tasks = tasks.filter((t) => t.ran).sort((a, b) => (a.container < b.container ? -1 : a.container > b.container ? 1 : 0));
    return { services: selected, tasks, ...(taskFilter !== undefined ? { taskFilter } : {}) };
  }

  /** A service of the stack by id, asked of the engine when not known yet; null when it is gone or not the stack's. */
  async service(id: string): Promise<StackService | null> {
    const known = this.services.get(id);
    if (known) return known;
    try {
      this.learn({ services: [(await this.docker.getService(id).inspect()) as RawService] });
    } catch (err) {
      if (notFound(err)) return null;
      throw err;
    }
    return this.services.get(id) ?? null;
  }

  private node(id: string): string {
    return this.nodes.get(id) ?? id;
  }

  /** Lines of one task's own log (`/tasks/{id}/logs`): every line is that task's. */
  taskLine(task: StackTask, svc: StackService): (p: ParsedLine, text: string) => ContainerLogLine {
    const node = this.node(task.nodeId);
    return (p, text) => ({ container: task.container, service: svc.service, node, task: task.task, stream: p.stream, timestamp: p.timestamp, line: text });
  }

  /** Lines of a service's log (`/services/{id}/logs`), named by their attributes; only `taskFilter`'s when given. */
  serviceLine(svc: StackService, taskFilter?: string): (p: ParsedLine, text: string) => ContainerLogLine | null {
    return (p, text) => {
      const ids = this.attrsOf(p.details ?? '', svc.id);
      if (taskFilter !== undefined && ids.taskId !== taskFilter) return null;
      const task = this.tasks.get(ids.taskId);
      const owner = this.services.get(ids.serviceId) ?? svc;
      const line: ContainerLogLine = {
        container: task?.container ?? `${owner.name}.${ids.taskId}`,
        service: owner.service,
        node: this.node(ids.nodeId),
        task: task?.task ?? owner.service,
        stream: p.stream,
        timestamp: p.timestamp,
        line: text,
      };
      if (!task || !this.nodes.has(ids.nodeId)) this.provisional.set(line, ids);
      return line;
    };
  }

  private attrsOf(details: string, serviceId: string): { taskId: string; nodeId: string; serviceId: string } {
    let ids = this.attrsCache.get(details);
    if (!ids) {
      const a = parseDetails(details);
      ids = { taskId: a.get(TASK_ATTR) ?? '', nodeId: a.get(NODE_ATTR) ?? '', serviceId: a.get(SERVICE_ATTR) ?? serviceId };
      if (this.attrsCache.size > 1000) this.attrsCache.clear();
      this.attrsCache.set(details, ids);
    }
    return ids;
  }

  /** Completes the names of lines made before their task or node was known, asking the engine once per unknown id. */
  async resolve(lines: ContainerLogLine[]): Promise<void> {
    const pending = lines.filter((l) => this.provisional.has(l));
    if (pending.length === 0) return;
    const missingTasks = new Set<string>();
    const missingNodes = new Set<string>();
    for (const l of pending) {
      const ids = this.provisional.get(l)!;
      if (ids.taskId && !this.tasks.has(ids.taskId)) missingTasks.add(ids.taskId);
      if (ids.nodeId && !this.nodes.has(ids.nodeId)) missingNodes.add(ids.nodeId);
    }
    const ask = async <T>(fn: () => Promise<T>): Promise<T | null> => {
      try {
        return await fn();
      } catch (err) {
        if (notFound(err)) return null;
        throw err;
      }
    };
    const [tasks, nodes] = await Promise.all([
      Promise.all([...missingTasks].map((id) => ask(() => this.docker.getTask(id).inspect() as Promise<RawTask>))),
      Promise.all([...missingNodes].map((id) => ask(() => this.docker.getNode(id).inspect() as Promise<RawNode>))),
    ]);
    this.learn({ tasks: tasks.filter((t): t is RawTask => t !== null), nodes: nodes.filter((n): n is RawNode => n !== null) });
    for (const l of pending) {
      const ids = this.provisional.get(l)!;
      this.provisional.delete(l);
      const task = this.tasks.get(ids.taskId);
      if (task) {
        l.container = task.container;
        l.task = task.task;
      }
      l.node = this.node(ids.nodeId);
    }
  }
}

/** The task id a line's container name ends with (`<stack>_<service>.<slot>.<task id>`). */
export const taskIdOf = (container: string): string => container.slice(container.lastIndexOf('.') + 1);

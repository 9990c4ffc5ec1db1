// The platform as a Swarm stack (docs/adr/0056-platform-on-a-swarm.md): its compose file rendered
// for `docker stack deploy`, and its services as the manager reports them.
//
// `docker stack deploy` reads neither the project's .env nor the compose specification's newer
// keys, so the file is rendered by compose itself (`docker compose config --format json`, which
// interpolates .env as `docker compose up` would) and then cut to the stack file's shape: no
// project `name`, no nulls or empty maps, no `depends_on` (a Swarm starts services in any order)
// nor `pull_policy`. Secrets and configs read from files get names with their content's digest,
// since a Swarm secret cannot change: a changed file is a new secret, and the service moves to it.
// Every image is pinned to the registry digest the manager holds (what the last pull fetched and
// the signature check read), so every node runs exactly that image.
import type Docker from 'dockerode';
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { composeOutput, type ComposeTarget } from './compose-cli.ts';
import { pickDigest } from './docker-engine.ts';

export const STACK_LABEL = 'com.docker.stack.namespace';

/** A task's states before it has stopped. */
const LIVE = ['new', 'pending', 'assigned', 'accepted', 'preparing', 'ready', 'starting', 'running'];

/** A service whose update was in progress when nodes holding its tasks went down. */
export interface LostUpdate {
  service: string;
  name: string;
  /** The lost nodes' hostnames. */
  nodes: string[];
}

/** One service of the stack, as the manager reports it. */
export interface StackService {
  /** The compose service name (the Swarm service's name without `<stack>_`). */
  service: string;
  /** The Swarm service's name, `<stack>_<service>`. */
  name: string;
  id: string;
  mode: 'replicated' | 'global';
  /** Desired replicas (replicated services), else null. */
  replicas: number | null;
  /**
   * Whether two of its tasks cannot run at once on one node: it publishes a port in host mode, or
   * mounts a volume or a host path (two tasks on one set of data). Such a service restarts
   * stop-first; see `restartOrders`.
   */
  sharesNode: boolean;
  /** The last update's state and message (`rollback_completed`, `paused`, …), and when it began. */
  update: { state: string; message: string; startedAt: string | null } | null;
}

export interface RenderOptions {
  /** Only these services (with what they depend on), or the whole file. */
  services: readonly string[];
  /** Replica counts to deploy instead of the file's (what a stop put aside). */
  replicas?: ReadonlyMap<string, number>;
  /** A container label set on the named services, so their tasks are replaced even if nothing else changed. */
  recreateLabel?: { key: string; value: string };
  /**
   * The file's `version`, for a docker CLI older than 26.0, whose `stack deploy` reads a file
   * without one as version 1 and refuses it ("unsupported Compose file version: 1.0").
   */
  fileVersion?: string;
}

type Json = Record<string, unknown>;
const digestOf = (content: string | Buffer) => createHash('sha256').update(content).digest('hex').slice(0, 12);
/** What of a task's spec says which version of its service it runs. */
type TaskSpec = { ForceUpdate?: number; ContainerSpec?: { Image?: string; Env?: string[] } };
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Service keys of the compose specification that a stack file does not take. */
const NOT_IN_STACK = ['depends_on', 'pull_policy', 'develop', 'profiles', 'container_name'];

/** Drops nulls and empty maps, but keeps a service's `networks: { name: null }` entries. */
function clean(v: unknown, keepNulls = false): unknown {
  if (Array.isArray(v)) return v.map((x) => clean(x));
  if (!isObject(v)) return v;
  const out: Json = {};
  for (const [k, x] of Object.entries(v)) {
    if (x === null && !keepNulls) continue;
    const c = clean(x, k === 'networks');
    if (isObject(c) && Object.keys(c).length === 0 && !keepNulls) continue;
    out[k] = c;
  }
  return out;
}

export class SwarmStack {
  constructor(
    private readonly docker: Docker,
    private readonly target: () => ComposeTarget,
    readonly stack: string,
    /** The platform's .env, for secrets and configs that take their value from it. */
    private readonly env: () => Promise<{ key: string; value: string }[]> = async () => [],
  ) {}

  /** The stack's services on the Swarm, in name order. */
  async services(): Promise<StackService[]> {
    const list = await this.docker.listServices({ filters: { label: [`${STACK_LABEL}=${this.stack}`] } });
    const prefix = `${this.stack}_`;
    return list
      .map((s): StackService => {
        const spec = s.Spec ?? {};
        const name = spec.Name ?? '';
        const replicated = spec.Mode?.Replicated;
        const ports = s.Endpoint?.Spec?.Ports ?? spec.EndpointSpec?.Ports ?? [];
        const template = spec.TaskTemplate as { ContainerSpec?: { Mounts?: { Type?: string }[] } } | undefined;
        const mounts = template?.ContainerSpec?.Mounts ?? [];
        const sharesNode = ports.some((p) => p.PublishMode === 'host') || mounts.some((m) => m.Type === 'volume' || m.Type === 'bind');
        const u = s.UpdateStatus;
        return {
          service: name.startsWith(prefix) ? name.slice(prefix.length) : name,
          name,
          id: s.ID ?? '',
          mode: replicated ? 'replicated' : 'global',
          replicas: replicated ? (replicated.Replicas ?? 0) : null,
          sharesNode,
          update: u?.State ? { state: u.State, message: u.Message ?? '', startedAt: u.StartedAt ?? null } : null,
        };
      })
      .sort((a, b) => a.name.localeCompare(b.name));
  }

  /** The stack's services, those named first checked to exist: a missing one is named. */
  async chosen(services: readonly string[]): Promise<StackService[]> {
    const all = await this.services();
    if (!services.length) return all;
    const missing = services.filter((s) => !all.some((x) => x.service === s));
    if (missing.length) throw new Error(`the stack ${this.stack} has no service ${missing.join(', ')} on the Swarm: deploy it first`);
    return all.filter((x) => services.includes(x.service));
  }

  /**
   * Whether the named services (every service of the stack, when none is named) have converged as
   * the manager sees them: no update in progress, and every task meant to run is running with the
   * service's current task spec (image, environment, forced-update count); a replicated service
   * runs its replica count. The docker CLI's own count can stay short of it while a node is drained
   * (measured on 26.1: three web tasks running on two nodes counted as two), so a step asks this too.
   */
  async converged(services: readonly string[]): Promise<boolean> {
    const all = await this.services();
    for (const s of all.filter((x) => !services.length || services.includes(x.service))) {
      if (s.update && ['updating', 'rollback_started'].includes(s.update.state)) return false;
      const spec = (await this.docker.getService(s.id).inspect()).Spec?.TaskTemplate as TaskSpec | undefined;
      const tasks = await this.docker.listTasks({ filters: { service: [s.name], 'desired-state': ['running'] } });
      const current = (t: { Spec?: unknown }) => {
        const ts = t.Spec as TaskSpec | undefined;
        return ts?.ForceUpdate === spec?.ForceUpdate && ts?.ContainerSpec?.Image === spec?.ContainerSpec?.Image && JSON.stringify(ts?.ContainerSpec?.Env ?? []) === JSON.stringify(spec?.ContainerSpec?.Env ?? []);
      };
      if (!tasks.every((t) => t.Status?.State === 'running' && current(t))) return false;
      if (s.replicas !== null && tasks.length !== s.replicas) return false;
    }
    return true;
  }

  /**
   * The named services whose update is in progress while a node that holds one of their live tasks
   * is down: the nodes lost mid-update, by service.
   */
  async lostMidUpdate(services: readonly string[]): Promise<LostUpdate[]> {
    const updating = (await this.services()).filter((s) => (!services.length || services.includes(s.service)) && s.update?.state === 'updating');
    if (!updating.length) return [];
    const down = new Map((await this.docker.listNodes()).filter((n) => n.Status?.State === 'down').map((n) => [n.ID, n.Description?.Hostname ?? n.ID]));
    if (!down.size) return [];
    const lost: LostUpdate[] = [];
    for (const s of updating) {
      const tasks = await this.docker.listTasks({ filters: { service: [s.name] } });
      const nodes = [...new Set(tasks.filter((t) => LIVE.includes(t.Status?.State ?? '') && t.NodeID && down.has(t.NodeID)).map((t) => down.get(t.NodeID!)!))];
      if (nodes.length) lost.push({ service: s.service, name: s.name, nodes });
    }
    return lost;
  }

  /** Each named service (all when none is) as `<name>: <running>/<meant to run> tasks running`, with its update state while it has one. */
  async progress(services: readonly string[]): Promise<string[]> {
    const all = (await this.services()).filter((x) => !services.length || services.includes(x.service));
    return Promise.all(
      all.map(async (s) => {
        const tasks = await this.docker.listTasks({ filters: { service: [s.name], 'desired-state': ['running'] } });
        const running = tasks.filter((t) => t.Status?.State === 'running').length;
        const update = s.update && s.update.state !== 'completed' ? ` (update ${s.update.state})` : '';
        return `${s.name}: ${running}/${s.replicas ?? tasks.length} tasks running${update}`;
      }),
    );
  }

  /** How many of the service's tasks are meant to run and have not stopped yet. */
  async runningTasks(serviceName: string): Promise<number> {
    const tasks = await this.docker.listTasks({ filters: { service: [serviceName], 'desired-state': ['running'] } });
    return tasks.filter((t) => LIVE.includes(t.Status?.State ?? '')).length;
  }

  /** The newest errors of the service's tasks (a task that never started says why here), newest first. */
  async taskErrors(serviceName: string, limit = 3): Promise<string[]> {
    const tasks = await this.docker.listTasks({ filters: { service: [serviceName] } });
    return tasks
      .filter((t) => t.Status?.Err)
      .sort((a, b) => (b.Status?.Timestamp ?? '').localeCompare(a.Status?.Timestamp ?? ''))
      .slice(0, limit)
      .map((t) => `task ${t.Slot ?? t.ID?.slice(0, 12)} on node ${t.NodeID?.slice(0, 12) ?? '?'}: ${t.Status?.State}: ${t.Status?.Err}`);
  }

  /**
   * Pulls the service's image, at the digest this manager holds, on every other node that runs a
   * task of the service: the engine API reaches the manager alone, so each node is sent a one-shot
   * job pinned to it (`replicated-job`, `node.id==`) whose task pulls the image and then fails to
   * start an entrypoint that is not there, so nothing of the image runs. A task that got past its
   * pull (to starting, or failed at the start) has the image; one rejected has not, and says why.
   */
  async pullOnNodes(service: StackService, image: string, say: (line: string) => void, timeoutMs: number): Promise<string | null> {
    const pinned = await this.pinned(service.service, image);
    const self = (await this.docker.info()).Swarm?.NodeID as string | undefined;
    const tasks = await this.docker.listTasks({ filters: { service: [service.name], 'desired-state': ['running'] } });
    const nodes = [...new Set(tasks.map((t) => t.NodeID).filter((n): n is string => !!n && n !== self))];
    const hostnames = new Map((await this.docker.listNodes()).map((n) => [n.ID, n.Description?.Hostname ?? n.ID]));
    const results = await Promise.all(nodes.map(async (node) => {
      const host = hostnames.get(node) ?? node;
      const job = await this.docker.createService({
        Name: `${this.stack}-pull-${service.service}-${node.slice(0, 10)}-${Date.now().toString(36)}`,
        Labels: { 'io.installer.pull': this.stack },
        Mode: { ReplicatedJob: { MaxConcurrent: 1, TotalCompletions: 1 } },
        TaskTemplate: {
          ContainerSpec: { Image: pinned, Command: ['/io.installer.pull-only'] },
          Placement: { Constraints: [`node.id==${node}`] },
          RestartPolicy: { Condition: 'none' },
        },
      } as Docker.CreateServiceOptions);
      const id = job.id;
      try {
        const until = Date.now() + timeoutMs;
        for (;;) {
          const [t] = await this.docker.listTasks({ filters: { service: [id] } });
          const state = t?.Status?.State ?? 'new';
          const err = t?.Status?.Err ?? '';
          if (state === 'rejected' || (state === 'failed' && /pull|no such image|manifest|not found: manifest/i.test(err) && !/starting container failed|exec/i.test(err))) {
            return `the image ${image} of service ${service.service} could not be pulled on node ${host}: ${err || state}`;
          }
          if (['starting', 'running', 'complete', 'failed'].includes(state)) {
            say(`pulled ${image} on node ${host}`);
            return null;
          }
          if (Date.now() > until) return `the image ${image} of service ${service.service} was not pulled on node ${host} within ${Math.round(timeoutMs / 1000)} s (its task is ${state})`;
          await new Promise((r) => setTimeout(r, 250));
        }
      } finally {
        await this.docker.getService(id).remove().catch(() => {});
      }
    }));
    return results.find((r) => r !== null) ?? null;
  }

  /** The stack file for `docker stack deploy -c -`: rendered by compose from the platform's files and .env. */
  async render(opts: RenderOptions): Promise<{ file: string; services: string[] }> {
    const config = await this.config(opts.services);
    delete config.name;
    const services = (isObject(config.services) ? config.services : {}) as Record<string, Json>;
    for (const [name, svc] of Object.entries(services)) {
      for (const k of NOT_IN_STACK) delete svc[k];
      if (isObject(svc.healthcheck)) delete svc.healthcheck.start_interval;
      if (typeof svc.image !== 'string') throw new Error(`service ${name} has no image: a Swarm runs images from a registry, not builds`);
      svc.image = await this.pinned(name, svc.image);
      const replicas = opts.replicas?.get(name);
      if (replicas !== undefined) svc.deploy = { ...(isObject(svc.deploy) ? svc.deploy : {}), replicas };
      if (opts.recreateLabel && (!opts.services.length || opts.services.includes(name))) {
        svc.labels = { ...(isObject(svc.labels) ? svc.labels : {}), [opts.recreateLabel.key]: opts.recreateLabel.value };
      }
    }
    for (const [key, net] of Object.entries(isObject(config.networks) ? config.networks : {})) {
      // Compose names the project's networks `<project>_<key>`; a stack does the same by itself.
      if (isObject(net) && net.name === `${this.stack}_${key}`) delete net.name;
    }
    const env = new Map((await this.env()).map((e) => [e.key, e.value]));
    for (const kind of ['secrets', 'configs'] as const) {
      for (const [key, def] of Object.entries(isObject(config[kind]) ? config[kind] : {})) {
        if (!isObject(def) || def.external === true) continue;
        if (typeof def.file === 'string') {
          def.name = `${this.stack}_${key}_${digestOf(await readFile(def.file))}`;
          continue;
        }
        // A value from the project's .env (`environment:`) or written in the file (`content:`): a
        // stack file takes neither, so the installer makes the Swarm object and the file names it.
        const value = typeof def.environment === 'string' ? env.get(def.environment) : typeof def.content === 'string' ? def.content : undefined;
        if (value === undefined) {
          if (typeof def.environment === 'string') throw new Error(`the ${kind === 'secrets' ? 'secret' : 'config'} ${key} takes ${def.environment} from the platform's .env, which does not set it`);
          continue;
        }
        const name = `${this.stack}_${key}_${digestOf(value)}`;
        await this.ensureObject(kind, name, value);
        config[kind] = { ...(config[kind] as Json), [key]: { name, external: true } };
      }
    }
    return { file: JSON.stringify(opts.fileVersion ? { version: opts.fileVersion, ...config } : config), services: Object.keys(services) };
  }

  /** Makes the Swarm secret or config `name` with `value` unless it is there (its name carries its digest). */
  private async ensureObject(kind: 'secrets' | 'configs', name: string, value: string): Promise<void> {
    const Data = Buffer.from(value).toString('base64');
    const spec = { Name: name, Data, Labels: { [STACK_LABEL]: this.stack } };
    const existing = kind === 'secrets' ? await this.docker.listSecrets({ filters: { name: [name] } }) : await this.docker.listConfigs({ filters: { name: [name] } });
    if (existing.some((o) => o.Spec?.Name === name)) return;
    if (kind === 'secrets') await this.docker.createSecret(spec);
    else await this.docker.createConfig(spec);
  }

  /**
   * Removes the stack's secrets and configs no service uses any more (a changed value is a new
   * object; its predecessor goes once the services have moved). Returns the names removed.
   */
  async pruneObjects(): Promise<string[]> {
    const removed: string[] = [];
    const filters = { label: [`${STACK_LABEL}=${this.stack}`] };
    const used = new Set<string>();
    for (const svc of await this.docker.listServices({ filters })) {
      const spec = svc.Spec?.TaskTemplate as { ContainerSpec?: { Secrets?: { SecretName?: string }[]; Configs?: { ConfigName?: string }[] } } | undefined;
      for (const x of spec?.ContainerSpec?.Secrets ?? []) if (x.SecretName) used.add(x.SecretName);
      for (const x of spec?.ContainerSpec?.Configs ?? []) if (x.ConfigName) used.add(x.ConfigName);
    }
    const objects = [
      ...(await this.docker.listSecrets({ filters })).map((o) => ({ name: o.Spec?.Name ?? '', remove: () => this.docker.getSecret(o.ID).remove() })),
      ...(await this.docker.listConfigs({ filters })).map((o) => ({ name: o.Spec?.Name ?? '', remove: () => this.docker.getConfig(o.ID).remove() })),
    ];
    for (const o of objects) {
      if (!o.name || used.has(o.name)) continue;
      // Still held by a task being replaced: it goes at the next deploy.
      if (await o.remove().then(() => true, () => false)) removed.push(o.name);
    }
    return removed;
  }

  /** The compose file as compose renders it with the .env (only `services` and what they need, when named). */
  private async config(services: readonly string[]): Promise<Json> {
    const r = await composeOutput(this.target(), ['config', '--format', 'json', ...services]);
    if (r.code !== 0) throw new Error(`the platform's compose file could not be rendered: ${r.stderr.trim().split('\n').at(-1) ?? `exit ${r.code}`}`);
    return clean(JSON.parse(r.stdout)) as Json;
  }

  /** Each named service's image as the compose file names it (every service's, when none is named). */
  async images(services: readonly string[]): Promise<Map<string, string>> {
    const config = await this.config(services);
    const all = (isObject(config.services) ? config.services : {}) as Record<string, Json>;
    return new Map(Object.entries(all).filter(([, v]) => typeof v.image === 'string').map(([k, v]) => [k, v.image as string]));
  }

  /**
   * How a restart replaces each service's tasks: the order its compose file names
   * (`deploy.update_config.order`), else `start-first` (each new task runs before its old one
   * stops) unless the service shares a node's port or data, then `stop-first`. The file is read,
   * not the service's spec: a stack deploy writes `stop-first` into the spec of every service whose
   * file has an `update_config` at all, named or not.
   */
  async restartOrders(services: readonly StackService[]): Promise<Map<string, 'start-first' | 'stop-first'>> {
    const config = await this.config(services.map((s) => s.service));
    const all = (isObject(config.services) ? config.services : {}) as Record<string, Json>;
    const orders = new Map<string, 'start-first' | 'stop-first'>();
    for (const s of services) {
      const deploy = all[s.service]?.deploy;
      const update = isObject(deploy) ? deploy.update_config : undefined;
      const named = isObject(update) ? update.order : undefined;
      orders.set(s.service, named === 'start-first' || named === 'stop-first' ? named : s.sharesNode ? 'stop-first' : 'start-first');
    }
    return orders;
  }

  /** `image` pinned to the registry digest the manager holds for it; an image it does not hold is named. */
  private async pinned(service: string, image: string): Promise<string> {
    if (image.includes('@sha256:')) return image;
    const info = await this.docker
      .getImage(image)
      .inspect()
      .catch(() => null);
    if (!info) throw new Error(`the image ${image} of service ${service} is not on this manager: run a pull (or a deploy) first`);
    const digest = pickDigest(info.RepoDigests ?? [], image);
    if (!digest) throw new Error(`the image ${image} of service ${service} has no registry digest (built on this host?): a Swarm's nodes can only pull images from a registry`);
    return `${image}@${digest}`;
  }
}

// The Docker Engine through dockerode. No API version is pinned: each call goes to the unversioned
// path, which the engine answers as its newest API (docs/engines.md).
import Docker from 'dockerode';
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import type { ContainerView, VersionInfo } from '../contracts/ports.ts';

export function connectEngine(socketPath: string): Docker {
  return new Docker({ socketPath });
}

/** `sha256:…` part of a RepoDigest such as `127.0.0.1:5000/installer@sha256:…`. */
export function digestOf(repoDigest: string): string | null {
  const at = repoDigest.lastIndexOf('@');
  return at >= 0 ? repoDigest.slice(at + 1) : null;
}

/** Repository part of a reference without tag or digest, with `localhost` and `127.0.0.1` treated alike. */
export function repositoryOf(reference: string): string {
  let ref = reference.split('@')[0]!;
  const lastSlash = ref.lastIndexOf('/');
  const colon = ref.lastIndexOf(':');
  if (colon > lastSlash) ref = ref.slice(0, colon);
  return ref.replace(/^localhost(?=[:/])/, '127.0.0.1');
}

export function tagOf(reference: string): string | null {
  const ref = reference.split('@')[0]!;
  const lastSlash = ref.lastIndexOf('/');
  const colon = ref.lastIndexOf(':');
  return colon > lastSlash ? ref.slice(colon + 1) : null;
}

/**
 * Picks the registry digest of an image for a repository from its RepoDigests. Repository
 * names differ between `localhost` and `127.0.0.1`, so they are compared normalised; when no
 * name matches but every RepoDigest agrees on one digest, that digest is the answer.
 */
export function pickDigest(repoDigests: readonly string[], repository: string): string | null {
  const wanted = repositoryOf(repository);
  const match = repoDigests.find((d) => repositoryOf(d) === wanted);
  if (match) return digestOf(match);
  const distinct = [...new Set(repoDigests.map(digestOf).filter((d): d is string => d !== null))];
  return distinct.length === 1 ? distinct[0]! : null;
}

/** The id of the container this process runs in, or null outside a container. */
export async function ownContainerId(): Promise<string | null> {
  try {
    const mountinfo = await readFile('/proc/self/mountinfo', 'utf8');
    const m = /\/(?:docker\/)?containers\/([0-9a-f]{64})\//.exec(mountinfo);
    if (m) return m[1]!;
  } catch {
    /* not Linux or no procfs */
  }
  try {
    const cgroup = await readFile('/proc/self/cgroup', 'utf8');
    const m = /[/-]([0-9a-f]{64})(?:\.scope)?$/m.exec(cgroup);
    if (m) return m[1]!;
  } catch {
    /* no cgroup file */
  }
  return null;
}

export class EngineRuntime {
  private cached: VersionInfo | undefined;
  constructor(
    private readonly docker: Docker,
    private readonly repository: string,
  ) {}

  /** What this process runs as. A container's image never changes while it runs, so it is cached. */
  async version(): Promise<VersionInfo> {
    if (this.cached) return this.cached;
    const id = (await ownContainerId()) ?? (await this.containerByHostname());
    if (!id) {
      return {
        inContainer: false, image: null, tag: null, digest: null, imageId: null, containerId: null,
        note: 'not running in a container: there is no image to report',
      };
    }
    const container = await this.docker.getContainer(id).inspect();
    const image = await this.docker.getImage(container.Image).inspect();
    const reference = container.Config.Image;
    const digest = pickDigest(image.RepoDigests ?? [], this.repository);
    const info: VersionInfo = {
      inContainer: true,
      image: reference,
      tag: tagOf(reference),
      digest,
      imageId: image.Id,
      containerId: container.Id,
      ...(digest ? {} : { note: 'the running image was never pushed to or pulled from a registry, so it has no registry digest' }),
    };
    this.cached = info;
    return info;
  }

  private async containerByHostname(): Promise<string | null> {
    try {
      const c = await this.docker.getContainer(hostname()).inspect();
      return c.Id;
    } catch {
      return null;
    }
  }
}

/** A platform container as the API shows it, plus its id. */
export type PlatformContainer = ContainerView & { id: string };

/** The containers of a compose project with their state, health, image and digest. */
export async function projectContainers(docker: Docker, project: string): Promise<PlatformContainer[]> {
  const list = await docker.listContainers({ all: true, filters: { label: [`com.docker.compose.project=${project}`] } });
  const imageDigests = new Map<string, string | null>();
  const out = await Promise.all(
    list.map(async (c) => {
      const inspect = await docker.getContainer(c.Id).inspect().catch(() => null);
      if (!imageDigests.has(c.ImageID)) {
        const img = await docker.getImage(c.ImageID).inspect().catch(() => null);
        imageDigests.set(c.ImageID, img ? pickDigest(img.RepoDigests ?? [], c.Image) : null);
      }
      return {
        id: c.Id,
        name: (c.Names[0] ?? c.Id).replace(/^\//, ''),
        service: c.Labels['com.docker.compose.service'] ?? '',
        state: inspect?.State.Status ?? c.State,
        health: inspect?.State.Health?.Status ?? null,
        image: c.Image,
        digest: imageDigests.get(c.ImageID) ?? null,
        since: inspect?.State.StartedAt ?? null,
      };
    }),
  );
  return out.sort((a, b) => a.name.localeCompare(b.name));
}

/** Removes dangling (untagged) images. A tagged image, such as the `rollback` tag, is never dangling. */
export async function pruneDanglingImages(docker: Docker): Promise<{ deleted: number; reclaimedBytes: number }> {
  const r = await docker.pruneImages({ filters: { dangling: { true: true } } });
  return { deleted: (r.ImagesDeleted ?? []).length, reclaimedBytes: r.SpaceReclaimed ?? 0 };
}

/**
 * The container events that change what an observation reads: the container's existence, name,
 * state and health. The others are left out, above all `exec_create`, `exec_start` and `exec_die`,
 * which every healthcheck of every container raises: following them re-read the platform and the
 * engine at each check of each container, an idle installer's largest use of the host's CPU.
 * (`health_status` is raised when a container's health changes, not at every check.)
 */
const STATE_EVENTS = new Set(['create', 'start', 'restart', 'stop', 'die', 'kill', 'oom', 'pause', 'unpause', 'destroy', 'rename', 'update', 'health_status']);

/** Whether an event's action, without its detail (`health_status: healthy`), is in STATE_EVENTS. */
const changesState = (action: string | undefined): boolean => action !== undefined && STATE_EVENTS.has(action.split(':')[0]!.trim());

/**
 * Follows the engine's event stream for containers of the given compose projects, calling
 * `onEvent` with the project of each event that changes a container (`changesState`), until
 * `stop()`; `onEnd` is called once when the stream ends or cannot be opened (the engine went
 * away), so the caller can reconnect. `stacks` (Swarm stacks, named as their projects) adds the
 * stack's service events (`<stack>_*`: created, updated, removed, an update's state), every node
 * event (a node down, drained, joined), and its task containers on this node, each reported as the
 * stack's name. The manager hears of no task on another node: those show at the next interval.
 */
export function watchProjectEvents(
  docker: Docker,
  projects: readonly string[],
  onEvent: (project: string) => void,
  onEnd: (err: Error | null) => void,
  opts: { stacks?: readonly string[] } = {},
): { stop(): void } {
  const stacks = opts.stacks ?? [];
  let stream: NodeJS.ReadableStream | undefined;
  let stopped = false;
  let ended = false;
  const end = (err: Error | null) => {
    if (ended || stopped) return;
    ended = true;
    onEnd(err);
  };
  // The engine ANDs label filters, so the projects are picked here rather than by the engine.
  docker.getEvents({ filters: { type: stacks.length ? ['container', 'service', 'node'] : ['container'] } }).then(
    (s) => {
      if (stopped) return void (s as unknown as { destroy?: () => void }).destroy?.();
      stream = s;
      let buf = '';
      s.on('data', (chunk: Buffer) => {
        buf += chunk.toString('utf8');
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          try {
            const ev = JSON.parse(line) as { Type?: string; Action?: string; Actor?: { Attributes?: Record<string, string> } };
            const attributes = ev.Actor?.Attributes ?? {};
            if (ev.Type === 'node') for (const stack of stacks) onEvent(stack);
            else if (ev.Type === 'service') {
              const stack = stacks.find((st) => attributes.name?.startsWith(`${st}_`));
              if (stack) onEvent(stack);
            } else {
              const project = attributes['com.docker.compose.project'];
              const stack = attributes['com.docker.stack.namespace'];
              if (project && projects.includes(project) && changesState(ev.Action)) onEvent(project);
              else if (stack && stacks.includes(stack) && changesState(ev.Action)) onEvent(stack);
            }
          } catch {
            /* a partial or foreign line */
          }
        }
      });
      s.on('error', (err: Error) => end(err));
      s.on('end', () => end(null));
      s.on('close', () => end(null));
    },
    (err: Error) => end(err),
  );
  return {
    stop() {
      stopped = true;
      (stream as unknown as { destroy?: () => void } | undefined)?.destroy?.();
    },
  };
}

// The contracts between the layers, as types: what the API needs from outside the database, and
// the shapes that adapters, controllers and the UI share. A folder of its own, so that adapters and
// the UI do not depend on the API's folder. main.ts wires the adapters in, so routes never import
// dockerode or the file system directly.
import type { ActorKind } from './audit.ts';
import type { BackupRoom, BuildDeclaration } from './preflight-report.ts';
import type { PlatformRuntime, SwarmObservation } from './swarm.ts';

export interface VersionInfo {
  /** False when the installer does not run in a container (development): then no image is reported. */
  inContainer: boolean;
  /** The image reference the container was started from, e.g. `registry/installer:prod-latest`. */
  image: string | null;
  /** The tag part of `image`. Tags move; the digest is the exact identity of the build. */
  tag: string | null;
  /** Registry digest (`sha256:…`) of the running image; null when the image was never pushed or pulled. */
  digest: string | null;
  imageId: string | null;
  containerId: string | null;
  note?: string;
}

/** The HTTPS listener's certificate as GET /api/tls reports it (docs/adr/0020-https-listeners.md). */
export interface TlsView {
  source: 'operator' | 'generated';
  /** SHA-256 of the certificate, upper-case hex pairs joined by `:`, as browsers show it. */
  fingerprint256: string;
  /** Base64 SHA-256 of its public key (SPKI), for pinning clients. */
  spkiSha256: string;
  subject: string;
  notAfter: string;
}

export interface RuntimePort {
  version(): Promise<VersionInfo>;
}

/** An audit row as GET /api/deployment/actions sends it, times ISO 8601 UTC (the UI reads this type too). */
export interface ActionView {
  id: string;
  kind: string;
  status: string;
  exitCode: number | null;
  actor: string;
  actorEmail: string | null;
  /** Who vouched for the actor (ACTOR_KINDS); null on rows written before kinds were recorded. */
  actorKind: ActorKind | null;
  detail: string | null;
  targetDigest: string | null;
  schemaMigration: string | null;
  jobId: string | null;
  createdAt: string;
  finishedAt: string | null;
}

export interface ContainerView {
  name: string;
  service: string;
  state: string;
  health: string | null;
  image: string;
  digest: string | null;
  since: string | null;
}

/** The platform as the API sees it: its services (compose file), containers (engine) and .env. */
export interface PlatformPort {
  project: string;
  /** Where the platform runs (PLATFORM_RUNTIME): a Compose project, or a stack named `project` on a Swarm. */
  runtime: PlatformRuntime;
  services(): Promise<string[]>;
  containers(): Promise<ContainerView[]>;
  /**
   * The Swarm's nodes and the stack's services and tasks, read through the manager; throws with
   * `code` NOT_A_MANAGER (src/contracts/swarm.ts) when the engine answered but manages no Swarm.
   */
  swarm(): Promise<SwarmObservation>;
  readEnv(): Promise<{ key: string; value: string }[]>;
}

/** One log line of a platform container (docs/adr/0007-container-logs.md). */
export interface ContainerLogLine {
  /**
   * Container name without the leading slash, e.g. `platform-web-1`; on a Swarm the task's container,
   * `<stack>_<service>.<slot>.<task id>`, as on its node.
   */
  container: string;
  /** Compose service (label `com.docker.compose.service`, on a Swarm the stack's service name); empty when the container has none. */
  service: string;
  /** On a Swarm (PLATFORM_RUNTIME=swarm), the hostname of the node that ran the task; absent for a compose project. */
  node?: string;
  /** On a Swarm, the task as `<service>.<slot>`, e.g. `web.2`; absent for a compose project. */
  task?: string;
  stream: 'stdout' | 'stderr';
  /** When the engine received the line: UTC, RFC 3339 with nanoseconds, e.g. `2024-05-01T10:00:00.123456789Z`. */
  timestamp: string;
  /** The line without its newline, already scrubbed of the installer's secrets. */
  line: string;
}

export interface PlatformContainer {
  id: string;
  name: string;
  service: string;
  /** Engine state: running, exited, created, … */
  state: string;
}

/** Batches of lines; iteration ends when the feed is done or closed; throws when the engine fails. */
export interface LogFeed extends AsyncIterable<ContainerLogLine[]> {
  /**
   * Settles once the feed has asked the engine for what it reads (before any line): rejects with
   * the engine's error when it did not answer, so that a route answers 503 before its stream starts;
   * on a Swarm, with an error whose `code` is `log-selection-unknown` (and `parameter`, `service` or
   * `containerName`) when the selection names nothing of the stack.
   */
  opened: Promise<void>;
  /** Stops reading from the engine and ends iteration; safe to call twice. */
  close(): void;
}

/** Which containers of a compose project: all of them, one service's, or one by name. */
export interface LogSelection {
  project: string;
  service?: string;
  containerName?: string;
}

export interface ContainerLogsPort {
  /** The last `tail` lines of each selected container in timestamp order, then new lines as they come, from containers that start later too. */
  live(selection: LogSelection, opts: { tail: number }): LogFeed;
  /**
   * Lines in [since, until] (epoch nanoseconds, both ends inclusive, either open) in timestamp order
   * across containers. Without `follow` it ends once what the engine holds is read; with it, new lines
   * follow until `until` has passed (forever when `until` is absent).
   */
  window(selection: LogSelection, opts: { since?: bigint; until?: bigint; follow: boolean }): LogFeed;
}

/** What the self-update endpoints need from outside the database (docs/adr/0010-self-update.md). */
export interface SelfUpdatePort {
  /**
   * Registry digest of a reference, resolved by the engine (GET /distribution/{name}/json); throws
   * when it cannot. A missing repository or tag throws with `code` `registry-not-found` and says
   * which (`knownDigest`, the running image's, tells the two apart); anything else is unreachable.
   */
  remoteDigest(reference: string, knownDigest?: string | null): Promise<string>;
  /** The installer's own compose file on the host; throws when it cannot be read. */
  localComposeFile(): Promise<string>;
  /**
   * The channel's published compose file: PUBLISHED_COMPOSE_URL when set, else the one the
   * channel's newest image (`newestDigest`) ships, once that image is local. Until then it throws
   * with `code` `compose-pending` and pulls the image in the background.
   */
  publishedComposeFile(channel: string | null, newestDigest: string | null): Promise<string>;
  /** What the local image `reference` declares (labels, migrations); null when the engine does not hold it (docs/adr/0054-preflight-report.md). */
  buildDeclaration(reference: string): Promise<BuildDeclaration | null>;
  /** Free space where the pre-switch backup goes, and its estimated size. */
  backupRoom(): Promise<BackupRoom>;
}

/**
 * One state chart as the UI draws it: the nodes and edges of xstate/graph's toDirectedGraph,
 * flattened (a node names its parent), plus the eventless (`always`) transitions it leaves out.
 */
export interface ChartNode {
  /** Full state id, e.g. `job.running.watching`. */
  id: string;
  key: string;
  parent: string | null;
  type: 'atomic' | 'compound' | 'parallel' | 'final' | 'history';
  /** Id of the initial child of a compound state. */
  initial: string | null;
}

export interface ChartEdge {
  id: string;
  source: string;
  target: string;
  /** The event type as XState names it, e.g. `CANCEL`, `xstate.after.hungTimeout.job.running.watching`; empty for `always`. */
  event: string;
  /** Readable: `CANCEL`, `after hungTimeout`, `error: runStep`, `always`, with `[guard]` when guarded. */
  label: string;
  guard: string | null;
}

/** One actor of a chart (a job, a self-update request) and the state it is in now or ended in. */
export interface ChartInstance {
  id: string;
  label: string;
  /** Stored phase of the request (queued, running, completed, …). */
  phase: string;
  /** The chart's state value as text (`running.watching`), null before the chart started. */
  state: string | null;
  /** Ids of the chart's nodes that are active, outermost first (what the UI highlights). */
  stateIds: string[];
  at: string;
  note?: string;
}

export interface ChartView {
  id: string;
  title: string;
  description: string;
  version: string;
  rootId: string;
  nodes: ChartNode[];
  edges: ChartEdge[];
  /** Newest first. */
  instances: ChartInstance[];
}

/** The state charts the controllers run and the current state of each; read only. */
export interface MachinesPort {
  charts(): Promise<ChartView[]>;
}

/**
 * What the diagnostics bundle reads from outside the database (docs/adr/0013-observability.md);
 * the engine's facts and the installer's containers come from observed state (docs/adr/0023-observed-state.md).
 */
export interface DiagnosticsPort {
  /** The last backend log lines, already scrubbed of secrets. */
  recentLogLines(): string[];
  /** Replaces every secret value the process knows in a text: the last pass over the bundle. */
  scrub(text: string): string;
}

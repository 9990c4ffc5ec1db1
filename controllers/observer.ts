// The observer: the one reconciler that writes observed state (docs/adr/0023-observed-state.md).
// Level-based: `reconcile(key)` re-reads the world for one key and writes its row, whatever it saw
// before. It runs on the shared runtime (docs/adr/0042-reconcile-contract.md), one key per observed
// thing, never let go: on start, on the engine's event stream for the platform's and the installer's
// compose projects (on a Swarm, the platform stack's services and the nodes; debounced), at a
// bounded interval (each run of a fast key asks to run again after `fastMs`, the channel after
// `slowMs`), and on refresh requests (NOTIFY on OBSERVED_CHANNEL, and a
// poll of unserved requests in case a notification was missed). A failed read is recorded, not
// thrown: the row's conditions say the engine or the registry did not answer, and the key is read
// again after 1 s, 2 s, 4 s… up to its interval (the channel waits for its interval or a check). A
// throw (the database away) is retried with the runtime's backoff; when retries run out the key
// rests for its interval.
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DB } from '../src/db/schema.ts';
import type { ContainerView, PlatformPort, RuntimePort, SelfUpdatePort, VersionInfo } from '../src/contracts/ports.ts';
import { observePreflight } from './observer/preflight-facts.ts';
import { engineCondition, observePlatform } from './observer/platform.ts';
import {
  beginObservation,
  OBSERVED_CHANNEL,
  pendingRefreshes,
  updateAvailableCondition,
  writeObserved,
  type ObservedCondition,
  type ObservedData,
  type ObservedKey,
} from '../src/state/observed.ts';
import { enqueueNotification } from '../src/state/notifications.ts';
import type { Listen } from './runtime/shared-listen.ts';
import { done, requeueAfter, type Reconciler, type ReconcileResult } from './runtime/reconcile.ts';
import { WorkQueue } from './runtime/work-queue.ts';
import type { SignatureObservation, SignaturePort } from '../src/contracts/signatures.ts';

export interface ObserverDeps {
  db: Kysely<DB>;
  listen: Listen;
  logger: Logger;
  runtime: RuntimePort;
  /** The platform: a Compose project, or a Swarm stack (`runtime`), its compose file and .env. */
  platform: PlatformPort;
  /** Seals the platform .env before it is stored (the Sealer of pending configuration changes). */
  seal(plain: string): string;
  installerProject: string;
  engine: { facts(): Promise<Record<string, unknown>>; installerContainers(): Promise<ContainerView[]> };
  /** Registry and compose files of the self-update; without it the channel row says so. */
  selfUpdate?: SelfUpdatePort | undefined;
  /** The channel's newest build's signature check (docs/adr/0053-signed-builds.md); absent: not checked. */
  signatures?: SignaturePort | undefined;
  /** `<registry>/<image name>` of the installer. */
  repository: string;
  /** The channel of a running tag (INSTALLER_CHANNEL, else the tag's prefix). */
  channelOf(tag: string | null): string | null;
  /**
   * Follows engine events of the given compose projects (and, wired for a Swarm, of the platform's
   * stack: its services, the nodes, its task containers on this node), each reported by its
   * project's name; absent: intervals and requests only.
   */
  watch?: (projects: readonly string[], onEvent: (project: string) => void, onEnd: (err: Error | null) => void) => { stop(): void };
  fastMs?: number;
  /** How often the channel is read unasked (OBSERVED_CHANNEL_MAX_AGE_SECONDS); 0: only when asked. */
  slowMs?: number;
  debounceMs?: number;
  pollMs?: number;
}

const FAST_KEYS: readonly ObservedKey[] = ['platform', 'installer', 'engine', 'platformEnv'];

/** The key whose run observes `key` (the channel's run writes the registry's row), or null. */
function observable(key: string): ObservedKey | null {
  if (key === 'registry') return 'channel';
  return (['platform', 'installer', 'channel', 'engine', 'platformEnv'] as const).find((k) => k === key) ?? null;
}
const RECONNECT_MS = 2_000;
/** The first retry of an observation whose read failed; each further one waits twice as long, up to the key's interval. */
const RETRY_FIRST_MS = 1_000;

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

export class Observer implements Reconciler<ObservedKey> {
  readonly name = 'observer';
  private readonly log: Logger;
  private queue: WorkQueue<ObservedKey> | undefined;
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly debounced = new Map<ObservedKey, NodeJS.Timeout>();
  /** The unserved refresh requests of one claim sweep. */
  private pending: ObservedKey[] | null = null;
  private watcher: { stop(): void } | undefined;
  /** Keys whose last observation had a read fail, and how many in a row. */
  private readonly unanswered = new Map<ObservedKey, number>();
  private stopped = true;

  constructor(private readonly deps: ObserverDeps) {
    this.log = deps.logger.child({ component: 'observer' });
  }

  /** A queue per start: a stopped queue keeps nothing for the next one. */
  private newQueue(): WorkQueue<ObservedKey> {
    const log = this.log;
    return new WorkQueue<ObservedKey>({
      reconciler: this,
      logger: log,
      listen: this.deps.listen,
      channels: [OBSERVED_CHANNEL],
      pollMs: this.deps.pollMs ?? 2_000,
      claim: () => this.nextRequested(),
      // A row's failed reads are its conditions; a throw (its write failed) leaves the row as it was.
      status: {
        recordError: async (key, condition) => log.warn({ key, reason: condition.message }, 'observation failed'),
        fail: async (key, detail) => log.error({ key, reason: detail }, 'observation failed again; it is tried at the next interval'),
      },
      // A key read only when asked is still looked at again after a fast key's rest.
      restAfterGivingUp: (key) => this.intervalOf(key) ?? (this.deps.fastMs ?? 30_000),
    });
  }

  /** The interval of `key`'s unasked runs; null: it runs only when asked. */
  private intervalOf(key: ObservedKey): number | null {
    if (key !== 'channel') return this.deps.fastMs ?? 30_000;
    const ms = this.deps.slowMs ?? 300_000;
    return ms > 0 ? ms : null;
  }

  async start(): Promise<void> {
    if (!this.stopped) return;
    this.stopped = false;
    const queue = (this.queue = this.newQueue());
    this.pending = null;
    await queue.start();
    this.follow();
    for (const k of FAST_KEYS) queue.enqueue(k);
    // The channel (registry, compose files) is read on the first request or after its interval,
    // not at boot: a backend that nobody asks does not pull or create anything right away.
    const channelEvery = this.intervalOf('channel');
    if (channelEvery !== null) queue.enqueueAfter('channel', channelEvery);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    for (const t of this.debounced.values()) clearTimeout(t);
    this.debounced.clear();
    this.watcher?.stop();
    this.watcher = undefined;
    await this.queue?.stop();
    await this.queue?.idle();
  }

  /** Reconciles `key` now, or once more after the run in progress (a request never waits for a stale run). */
  kick(key: ObservedKey): void {
    const k = observable(key);
    if (k && !this.stopped) this.queue?.enqueue(k);
  }

  /** The runtime's claim: each unserved refresh request once per sweep, then null. */
  private async nextRequested(): Promise<ObservedKey | null> {
    this.pending ??= (await pendingRefreshes(this.deps.db)).map(observable).filter((k): k is ObservedKey => k !== null);
    const next = this.pending.shift();
    if (next === undefined) this.pending = null;
    return next ?? null;
  }

  async reconcile(key: ObservedKey): Promise<ReconcileResult> {
    const answered = await this.observe(key);
    const every = this.intervalOf(key);
    if (answered) {
      this.unanswered.delete(key);
      return every === null ? done() : requeueAfter(every, 'the next observation');
    }
    // A read that failed (the engine busy or away, a file unreadable) is tried again soon, then
    // less often, up to the interval: its row says so meanwhile, and readers would keep that answer
    // for as long as it is young enough for them.
    const n = (this.unanswered.get(key) ?? 0) + 1;
    this.unanswered.set(key, n);
    return requeueAfter(Math.min(every ?? Infinity, RETRY_FIRST_MS * 2 ** (n - 1)), 'a read that failed, tried again');
  }

  /**
   * Re-reads the world for `key` and writes its row (the channel's run writes the registry's too);
   * true when every read answered.
   */
  private async observe(key: ObservedKey): Promise<boolean> {
    const { db } = this.deps;
    switch (key) {
      case 'platform': {
        const begun = await beginObservation(db, key);
        const { data, conditions, answered } = await observePlatform(this.deps.platform, begun.startedAt.toISOString());
        await writeObserved(db, key, { data, conditions, ...begun });
        return answered;
      }
      case 'installer': {
        const begun = await beginObservation(db, key);
        const at = begun.startedAt.toISOString();
        let data: VersionInfo;
        let failure: unknown = null;
        try {
          data = await this.deps.runtime.version();
        } catch (err) {
          failure = err;
          data = { inContainer: false, image: null, tag: null, digest: null, imageId: null, containerId: null, note: `the engine did not answer: ${message(err)}` };
        }
        await writeObserved(db, key, { data, conditions: [engineCondition(failure, at)], ...begun });
        return failure === null;
      }
      case 'engine': {
        const begun = await beginObservation(db, key);
        const at = begun.startedAt.toISOString();
        const [facts, containers] = await Promise.allSettled([this.deps.engine.facts(), this.deps.engine.installerContainers()]);
        const data: ObservedData['engine'] = {
          reachable: facts.status === 'fulfilled',
          facts: facts.status === 'fulfilled' ? facts.value : null,
          ...(facts.status === 'rejected' ? { error: message(facts.reason) } : {}),
          installerContainers: containers.status === 'fulfilled' ? containers.value : [],
          ...(containers.status === 'rejected' ? { installerContainersError: message(containers.reason) } : {}),
        };
        await writeObserved(db, key, { data, conditions: [engineCondition(facts.status === 'fulfilled' ? null : facts.reason, at)], ...begun });
        return facts.status === 'fulfilled' && containers.status === 'fulfilled';
      }
      case 'platformEnv': {
        const begun = await beginObservation(db, key);
        const at = begun.startedAt.toISOString();
        let data: ObservedData['platformEnv'];
        let condition: ObservedCondition;
        try {
          const entries = await this.deps.platform.readEnv();
          data = { sealed: this.deps.seal(JSON.stringify(entries)), keys: entries.map((e) => e.key) };
          condition = { type: 'EnvRead', status: 'True', reason: 'FileRead', message: `${entries.length} keys`, observedAt: at };
        } catch (err) {
          data = { sealed: null, keys: [], error: message(err) };
          condition = { type: 'EnvRead', status: 'False', reason: 'FileUnreadable', message: message(err), observedAt: at };
        }
        await writeObserved(db, key, { data, conditions: [condition], ...begun });
        return condition.status === 'True';
      }
      case 'channel':
      case 'registry':
        // A registry that does not answer is not asked again sooner: every update check asks anyway.
        await this.observeChannel();
        return true;
    }
  }

  private async observeChannel(): Promise<void> {
    const { db } = this.deps;
    const [begun, begunRegistry] = await Promise.all([beginObservation(db, 'channel'), beginObservation(db, 'registry')]);
    const at = begun.startedAt.toISOString();
    const port = this.deps.selfUpdate;
    const errors: string[] = [];
    const version = await this.deps.runtime.version().catch((err: unknown) => ({
      inContainer: false, image: null, tag: null, digest: null, imageId: null, containerId: null, note: `the engine did not answer: ${message(err)}`,
    }));
    const currentDigest = version.digest;
    if (!currentDigest) errors.push(`current digest unknown: ${version.note ?? 'the running image has no registry digest'}`);
    const channel = this.deps.channelOf(version.tag);
    let registryFailure: { missing: boolean; message: string } | null = null;
    const remote = (async (): Promise<string | null> => {
      if (!port) return (errors.push('self-update is not available in this process'), null);
      if (!channel) return (errors.push(`the channel is unknown: INSTALLER_CHANNEL is not set and the running tag (${version.tag ?? 'none'}) has no channel prefix`), null);
      try {
        return await port.remoteDigest(`${this.deps.repository}:${channel}-latest`, currentDigest);
      } catch (err) {
        const missing = (err as { code?: string }).code === 'registry-not-found';
        registryFailure = { missing, message: message(err) };
        errors.push(`${missing ? 'not in the registry' : 'registry unreachable'}: ${message(err)}`);
        return null;
      }
    })();
    const texts = (async (): Promise<{ installed: string | null; published: string | null }> => {
      if (!port) return { installed: null, published: null };
      // Without PUBLISHED_COMPOSE_URL the published file is the one the newest image ships.
      const published = remote.then((digest) => port.publishedComposeFile(channel, digest));
      const [local, fetched] = await Promise.allSettled([port.localComposeFile(), published]);
      if (local.status === 'rejected') errors.push(`local compose file unreadable: ${message(local.reason)}`);
      if (fetched.status === 'rejected') errors.push(`published compose file unavailable: ${message(fetched.reason)}`);
      return { installed: local.status === 'fulfilled' ? local.value : null, published: fetched.status === 'fulfilled' ? fetched.value : null };
    })();
    const compose = texts.then(({ installed, published }) => (installed === null || published === null ? null : installed !== published));
    // What an update to the remote build would meet, for the preflight report (docs/adr/0054-preflight-report.md).
    const preflight = Promise.all([remote, texts]).then(([remoteDigest, t]) =>
      port ? observePreflight({ db, port, repository: this.deps.repository }, { currentImageId: version.imageId, remoteDigest, ...t }) : undefined,
    );
    // Read beside the compose files: the check's answer says whether an update would be refused.
    const signature = remote.then(async (digest): Promise<SignatureObservation> => {
      const checker = this.deps.signatures;
      const policy = checker?.policy ?? 'off';
      if (!checker || policy === 'off' || !digest || !channel) return { policy, verdict: null };
      const check = await checker.check(`${this.deps.repository}:${channel}-latest`, digest);
      return { policy, verdict: check.policy === 'off' ? null : check.verdict };
    });
    const [remoteDigest, composeChanged, signatureCheck, preflightFacts] = await Promise.all([remote, compose, signature, preflight]);
    const availability = updateAvailableCondition({ channel, currentDigest, remoteDigest }, at);
    const updateAvailable = availability.status === 'True';
    const failure = registryFailure as { missing: boolean; message: string } | null;
    const registryCondition: ObservedCondition = failure
      ? { type: 'RegistryReachable', status: failure.missing ? 'True' : 'False', reason: failure.missing ? 'NotFound' : 'Unreachable', message: failure.message, observedAt: at }
      : remoteDigest !== null
        ? { type: 'RegistryReachable', status: 'True', reason: 'DigestResolved', message: `${channel}-latest is ${remoteDigest}`, observedAt: at }
        : { type: 'RegistryReachable', status: 'Unknown', reason: 'NotAsked', message: errors.join('; '), observedAt: at };
    const conditions: ObservedCondition[] = [
      registryCondition,
      availability,
      {
        type: 'ComposeDrift',
        status: composeChanged === null ? 'Unknown' : composeChanged ? 'True' : 'False',
        reason: composeChanged === null ? 'Unreadable' : composeChanged ? 'Differs' : 'Same',
        message: composeChanged === null ? errors.filter((e) => e.includes('compose')).join('; ') : composeChanged ? 'the published compose file differs from the local one' : 'the local compose file is the published one',
        observedAt: at,
      },
    ];
    await db.transaction().execute(async (tx) => {
      const data = { channel, currentDigest, remoteDigest, composeChanged, errors, signature: signatureCheck, ...(preflightFacts ? { preflight: preflightFacts } : {}) };
      await writeObserved(tx, 'channel', { data, conditions, ...begun });
      // Once per remote digest (the event id names it): every later observation of it queues nothing.
      if (updateAvailable) {
        await enqueueNotification(tx, { type: 'update.available', eventId: `update.available:${remoteDigest}`, data: { channel, currentDigest, remoteDigest, composeChanged } });
      }
    });
    const registry: ObservedData['registry'] = failure
      ? { reachable: failure.missing, error: failure.message }
      : { reachable: remoteDigest !== null ? true : null };
    await writeObserved(db, 'registry', { data: registry, conditions: [{ ...registryCondition, observedAt: begunRegistry.startedAt.toISOString() }], ...begunRegistry });
  }

  private debounce(key: ObservedKey): void {
    if (this.debounced.has(key) || this.stopped) return;
    const t = setTimeout(() => {
      this.debounced.delete(key);
      this.kick(key);
    }, this.deps.debounceMs ?? 250);
    t.unref();
    this.debounced.set(key, t);
  }

  /** Follows the engine's events; reconnects after the stream ends (the engine restarted or went away). */
  private follow(): void {
    const watch = this.deps.watch;
    if (!watch || this.stopped) return;
    this.watcher = watch(
      [this.deps.platform.project, this.deps.installerProject],
      (project) => this.debounce(project === this.deps.platform.project ? 'platform' : 'engine'),
      (err) => {
        this.watcher = undefined;
        if (this.stopped) return;
        this.log.debug({ err }, 'engine event stream ended; reconnecting');
        for (const k of FAST_KEYS) this.kick(k);
        const t = setTimeout(() => {
          this.timers.delete(t);
          // Back on: what changed while the stream was down is read again.
          this.follow();
          for (const k of FAST_KEYS) this.debounce(k);
        }, RECONNECT_MS);
        t.unref();
        this.timers.add(t);
      },
    );
  }
}

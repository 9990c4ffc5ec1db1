// Observed state (docs/adr/0023-observed-state.md): one row per observed thing, written only by the
// observer controller, read by the API. A reader that finds a row too old asks for a refresh by
// bumping the row's `requested_generation` (and NOTIFY on OBSERVED_CHANNEL); the observer reads the
// world again and writes `observed_generation` = the generation it saw when it began, so a reader
// knows its request was served once `observed_generation` reaches the value it wrote.
import { sql, type Kysely } from 'kysely';
import type { DB } from '../db/schema.ts';
import type { Database } from '../db/database.ts';
import { LazyListen } from './lazy-listen.ts';
import type { ContainerView, VersionInfo } from '../contracts/ports.ts';
import type { Condition } from '../contracts/conditions.ts';
import type { ObservedPreflight } from '../contracts/preflight-report.ts';
import type { SignatureObservation } from '../contracts/signatures.ts';
import type { PlatformRuntime, SwarmObservation } from '../contracts/swarm.ts';

export const OBSERVED_CHANNEL = 'observed_refresh';
/** NOTIFY after the observer wrote a row, the key as payload: for readers that act on a change. */
export const OBSERVED_WRITTEN_CHANNEL = 'observed_written';

export const OBSERVED_KEYS = ['platform', 'installer', 'channel', 'engine', 'registry', 'platformEnv'] as const;
export type ObservedKey = (typeof OBSERVED_KEYS)[number];

/** A condition of an observed row: the one shape (src/contracts/conditions.ts), with the observer's types. */
export type ObservedCondition = Condition<'EngineReachable' | 'RegistryReachable' | 'UpdateAvailable' | 'ComposeDrift' | 'ServicesKnown' | 'EnvRead' | 'SwarmReachable'>;

/**
 * Whether the channel's newest build differs from the running one: decided once, by the observer
 * when it writes the channel's row; the API serves the condition's status.
 */
export function updateAvailableCondition(c: Pick<ObservedData['channel'], 'channel' | 'currentDigest' | 'remoteDigest'>, observedAt: string): ObservedCondition {
  const known = c.remoteDigest !== null && c.currentDigest !== null;
  const newer = known && c.currentDigest !== c.remoteDigest;
  return {
    type: 'UpdateAvailable',
    status: !known ? 'Unknown' : newer ? 'True' : 'False',
    reason: !known ? 'DigestUnknown' : newer ? 'NewerDigest' : 'Newest',
    message: `current ${c.currentDigest ?? 'unknown'}, ${c.channel ?? '?'}-latest ${c.remoteDigest ?? 'unknown'}`,
    observedAt,
  };
}

/** What each key's `data` holds. Never a secret value. */
export interface ObservedData {
  /**
   * The platform's containers (engine) and its service list (compose file). On a Swarm
   * (`runtime` swarm) also its nodes, the stack's services and tasks, or why they could not be read;
   * `containers` are then the stack's current tasks, on whichever node (controllers/observer/platform.ts).
   */
  platform: {
    project: string;
    /** Absent in rows of older builds: compose. */
    runtime?: PlatformRuntime;
    containers: ContainerView[];
    engineError?: string;
    services: string[] | null;
    servicesError?: string;
    swarm?: SwarmObservation;
    swarmError?: string;
  };
  /** The installer's own image and container. */
  installer: VersionInfo;
  /** The channel's newest build and whether the published compose file differs from the local one. */
  channel: {
    channel: string | null;
    currentDigest: string | null;
    remoteDigest: string | null;
    composeChanged: boolean | null;
    errors: string[];
    /** The remote build's signature as checked (docs/adr/0053-signed-builds.md); absent in rows of older builds. */
    signature?: SignatureObservation;
    /** What an update to the remote build would meet (docs/adr/0054-preflight-report.md); absent in rows of older builds. */
    preflight?: ObservedPreflight;
  };
  /** The engine's reachability and facts (diagnostics), and the installer project's containers. */
  engine: { reachable: boolean; facts: Record<string, unknown> | null; error?: string; installerContainers: ContainerView[]; installerContainersError?: string };
  /** The registry's reachability (as the channel's digest lookup found it). */
  registry: { reachable: boolean | null; error?: string };
  /**
   * The platform's .env: its entries sealed with the encryption key (values may be the customer's
   * secrets), and its key names in clear (diagnostics lists keys only). Null `sealed` with `error`
   * when the file could not be read.
   */
  platformEnv: { sealed: string | null; keys: string[]; error?: string };
}

export interface ObservedRow<K extends ObservedKey = ObservedKey> {
  key: K;
  data: ObservedData[K] | null;
  conditions: ObservedCondition[];
  observedAt: Date | null;
  requestedGeneration: number;
  observedGeneration: number;
  /** Age of the observation in milliseconds (database clock); null when never observed. */
  ageMs: number | null;
}

export async function readObserved<K extends ObservedKey>(db: Kysely<DB>, key: K): Promise<ObservedRow<K> | null> {
  const row = await db
    .selectFrom('observed_state')
    .select(['key', 'data', 'conditions', 'observed_at', 'requested_generation', 'observed_generation', sql<number | null>`(extract(epoch from now() - observed_at) * 1000)::float8`.as('age_ms')])
    .where('key', '=', key)
    .executeTakeFirst();
  if (!row) return null;
  return {
    key,
    data: row.observed_at ? (row.data as ObservedData[K]) : null,
    conditions: (row.conditions as ObservedCondition[]) ?? [],
    observedAt: row.observed_at,
    requestedGeneration: Number(row.requested_generation),
    observedGeneration: Number(row.observed_generation),
    ageMs: row.age_ms === null ? null : Math.max(0, Number(row.age_ms)),
  };
}

/** Asks the observer to read `key` again; returns the generation to wait for. */
export async function requestRefresh(db: Kysely<DB>, key: ObservedKey): Promise<number> {
  const row = await db
    .insertInto('observed_state')
    .values({ key, requested_generation: 1, refresh_requested_at: sql<Date>`now()` })
    .onConflict((oc) =>
      oc.column('key').doUpdateSet({ requested_generation: sql`observed_state.requested_generation + 1`, refresh_requested_at: sql<Date>`now()` }),
    )
    .returning('requested_generation')
    .executeTakeFirstOrThrow();
  await sql`select pg_notify(${OBSERVED_CHANNEL}, ${key})`.execute(db);
  return Number(row.requested_generation);
}

/**
 * Called by the observer before it reads the world for `key`: the generation it will serve and the
 * database time the observation begins (so a row is never dated after what it saw).
 */
export async function beginObservation(db: Kysely<DB>, key: ObservedKey): Promise<{ generation: number; startedAt: Date }> {
  const row = await db
    .insertInto('observed_state')
    .values({ key })
    .onConflict((oc) => oc.column('key').doUpdateSet({ key: sql`excluded.key` }))
    .returning(['requested_generation', sql<Date>`now()`.as('now')])
    .executeTakeFirstOrThrow();
  return { generation: Number(row.requested_generation), startedAt: row.now };
}

/** Written by the observer only: the row of `key` as observed from `startedAt`, serving `generation`. */
export async function writeObserved<K extends ObservedKey>(
  db: Kysely<DB>,
  key: K,
  obs: { data: ObservedData[K]; conditions: ObservedCondition[]; startedAt: Date; generation: number },
): Promise<void> {
  await db
    .updateTable('observed_state')
    .set({
      data: JSON.stringify(obs.data),
      conditions: JSON.stringify(obs.conditions),
      observed_at: obs.startedAt,
      observed_generation: sql`greatest(observed_generation, ${obs.generation})`,
    })
    .where('key', '=', key)
    .execute();
  await sql`select pg_notify(${OBSERVED_WRITTEN_CHANNEL}, ${key})`.execute(db);
}

/** Keys whose refresh was requested and not yet served (the observer's catch-up after a missed NOTIFY). */
export async function pendingRefreshes(db: Kysely<DB>): Promise<ObservedKey[]> {
  const rows = await db.selectFrom('observed_state').select('key').whereRef('requested_generation', '>', 'observed_generation').execute();
  return rows.map((r) => r.key as ObservedKey);
}

export interface FreshnessNeed {
  /** The oldest observation the reader accepts, in milliseconds. */
  maxAgeMs: number;
  /** Also stale when observed before this instant (e.g. the end of the latest job). */
  notBefore?: Date | null;
  /** How long the reader waits for its refresh to be served. */
  waitMs: number;
  /** Stale whatever its age (the reader knows the row no longer describes the world). */
  force?: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function isStale(row: ObservedRow | null, need: FreshnessNeed): boolean {
  if (!row || row.observedAt === null || row.ageMs === null || need.force) return true;
  if (row.ageMs > need.maxAgeMs) return true;
  return !!need.notBefore && row.observedAt.getTime() < need.notBefore.getTime();
}

/**
 * The row of `key`, refreshed first when it is stale: writes a refresh request and waits, bounded,
 * for the observer to serve it. Answers with what is there (possibly stale, possibly null) when the
 * wait runs out: the caller reports the row's age.
 */
export async function readFresh<K extends ObservedKey>(db: Kysely<DB>, key: K, need: FreshnessNeed): Promise<ObservedRow<K> | null> {
  const row = await readObserved(db, key);
  if (!isStale(row, need)) return row;
  const neverObserved = !row || row.observedAt === null;
  // Nothing was known: the first observation serves, if it is not older than what the reader needs.
  const firstServes = (now: ObservedRow<K>) => neverObserved && now.observedAt !== null && !(need.notBefore && now.observedAt.getTime() < need.notBefore.getTime());
  return (await refreshAndWait(db, key, need.waitMs, firstServes)).row;
}

/**
 * A new observation of `key`: asks the observer to read the world again and waits, up to `waitMs`,
 * for an observation that began after the request. Callers asking together share one: the
 * observer serves every generation requested before its observation began. `fresh` is false when
 * the wait ran out; `row` is then what was there (older than the request, or null).
 */
export async function observeNow<K extends ObservedKey>(
  db: Kysely<DB>,
  key: K,
  waitMs: number,
  writes?: ObservedWrites,
): Promise<{ row: ObservedRow<K> | null; fresh: boolean }> {
  return refreshAndWait(db, key, waitMs, () => false, writes);
}

/**
 * The reader's pause between two looks at the row: until the observer writes it (or has written it
 * since `mark`, a count of the writes heard), or `ms`.
 */
type Pause = (key: ObservedKey, ms: number, mark?: number) => Promise<void>;

async function refreshAndWait<K extends ObservedKey>(
  db: Kysely<DB>,
  key: K,
  waitMs: number,
  servesAnyway: (row: ObservedRow<K>) => boolean,
  writes?: ObservedWrites,
): Promise<{ row: ObservedRow<K> | null; fresh: boolean }> {
  // Heard before the request is written, so that no write after it goes unheard.
  // Without the writes heard (none given, or the LISTEN failed), the row is polled, ever slower.
  const heard = writes ? await writes.pause().catch(() => null) : null;
  const pause: Pause = heard ?? ((_key, ms) => sleep(ms).then(() => undefined));
  const wanted = await requestRefresh(db, key);
  const deadline = Date.now() + waitMs;
  // Woken by the write, the row is looked at again at once; the timed looks catch a missed NOTIFY.
  let delay = heard ? 250 : 10;
  for (;;) {
    // A write heard while the row is read ends the pause after it at once.
    const mark = writes?.heardOf(key) ?? 0;
    const now = await readObserved(db, key);
    if (now && now.observedGeneration >= wanted) return { row: now, fresh: true };
    if (now && servesAnyway(now)) return { row: now, fresh: false };
    if (Date.now() >= deadline) return { row: now, fresh: false };
    await pause(key, Math.min(delay, Math.max(1, deadline - Date.now())), mark);
    delay = heard ? 250 : Math.min(delay * 2, 100);
  }
}

/**
 * The observer's writes as they happen (NOTIFY on OBSERVED_WRITTEN_CHANNEL), for readers that wait
 * for an observation: they look at the row when it is written instead of at timed intervals. One
 * LISTEN for the process, opened at the first wait.
 */
export class ObservedWrites {
  private readonly waiting = new Set<{ key: ObservedKey; wake: () => void }>();
  /** Writes heard so far, by key. */
  private readonly heard = new Map<string, number>();
  private readonly writes: LazyListen;

  constructor(listen: Database['listen']) {
    this.writes = new LazyListen(listen, OBSERVED_WRITTEN_CHANNEL, (key) => {
      this.heard.set(key, this.heardOf(key) + 1);
      for (const w of this.waiting) if (w.key === key) w.wake();
    });
  }

  /** Listens (once), then answers the pause a waiting reader takes between its looks. */
  async pause(): Promise<Pause> {
    await this.writes.start();
    return (key, ms, mark) =>
      new Promise<void>((resolve) => {
        if (mark !== undefined && this.heardOf(key) > mark) return resolve();
        const w = {
          key,
          wake: () => {
            clearTimeout(timer);
            this.waiting.delete(w);
            resolve();
          },
        };
        const timer = setTimeout(w.wake, ms);
        this.waiting.add(w);
      });
  }

  /** How many writes of `key` were heard so far. */
  heardOf(key: string): number {
    return this.heard.get(key) ?? 0;
  }

  close(): Promise<void> {
    return this.writes.close();
  }
}

/** The age fields every observed-state answer carries. */
export function ageOf(row: ObservedRow | null): { observedAt: string | null; ageMs: number | null } {
  return { observedAt: row?.observedAt ? row.observedAt.toISOString() : null, ageMs: row?.ageMs === null || row?.ageMs === undefined ? null : Math.round(row.ageMs) };
}

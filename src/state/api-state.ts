// What the API may read and ask, bound to the installer's database (docs/architecture.md):
// - read models: views of desired and observed state, each a read that decides nothing;
// - request writers: each a transactional function of src/state that admits or refuses a request
//   and writes only what a request owns (a claimed request's status is its controller's).
// The API gets both through one Fastify plugin (src/api/state-plugin.ts). No route holds the
// database, the sealer or the job event log the controllers append to: a job's events are read
// through `jobs.events`, which can only read and wake.
import { preflightFacts } from './preflight.ts';
import type { Database } from '../db/database.ts';
import type { RecordedActor } from '../auth/actor.ts';
import { actionExists, AuditTrailPages, lastActionOfEachKind, listActionsPage, type ActionFilter, type ActionRow } from './actions.ts';
import { requestJobCancel } from './cancel-requests.ts';
import { DatabaseProbe, databaseUp } from './health.ts';
import { requestHostMigration, VM_USER_SETTING } from './host-migration.ts';
import type { JobEventLog } from './job-events.ts';
import { createJob, getJob, lastJobEnd, listJobs, queueState } from './jobs.ts';
import { addEndpoint, changeEndpoint, enqueueTest, listDeliveries, listEndpoints, removeEndpoint } from './notifications.ts';
import { observeNow, ObservedWrites, readFresh, readObserved, type FreshnessNeed, type ObservedKey, type ObservedRow } from './observed.ts';
import { finishedJobDurations, jobCounts, recentActions, recentJobs, recentSelfUpdates, selfUpdateCounts } from './observability.ts';
import { pendingConfigChanges, putConfigChanges, recordConfigReveal, type Sealer } from './platform-config.ts';
import { getSelfUpdate, lastUpdate, requestSelfUpdate, withdrawUnclaimed } from './self-update.ts';
import { getSetting, putSetting } from './settings.ts';
import { countAttempt, giveBack, pruneCounters } from './sign-in-throttle.ts';
import { historyEntryExists, listUpdateHistory, updateHistoryFigures } from './update-history.ts';
import { getUpdatePolicy, listQuarantine, putUpdatePolicy } from './update-policy.ts';
import { addUser, changeOwnPassword, changeUser, deleteUser, resetPassword, revokeToken, upgradePasswordHash, userViews, verifyCredentials } from './users.ts';
import { currentMigration } from '../db/migrate.ts';

export interface ApiStateDeps {
  database: Database;
  sealer: Sealer;
  /** The job event log: the API reads and follows it, never appends. */
  events: Pick<JobEventLog, 'read' | 'subscribe'>;
}

/** The read models the API serves from. */
export function readModels({ database, sealer, events }: ApiStateDeps) {
  const db = database.db;
  const listen: Database['listen'] = (channel, onNotify) => database.listen(channel, onNotify);
  const writes = new ObservedWrites(listen);
  const pages: AuditTrailPages[] = [];
  return {
    observed: {
      /** The row of `key` when it is as fresh as `need` asks (asking the observer otherwise). */
      fresh: <K extends ObservedKey>(key: K, need: FreshnessNeed) => readFresh(db, key, need),
      /** As `fresh`, and observed after the last job ended: what a job changed shows at once. */
      sinceLastJob: async <K extends ObservedKey>(key: K, need: FreshnessNeed) => readFresh(db, key, { ...need, notBefore: await lastJobEnd(db) }),
      /** The row of `key` as it stands. */
      current: <K extends ObservedKey>(key: K) => readObserved(db, key),
      /** A new observation of `key`, waited for up to `waitMs` (docs/adr/0049-live-update-check.md). */
      now: <K extends ObservedKey>(key: K, waitMs: number) => observeNow(db, key, waitMs, writes),
    },
    jobs: {
      get: (jobId: string) => getJob(db, jobId),
      list: (opts: Parameters<typeof listJobs>[1]) => listJobs(db, opts),
      /** When the last job ended: observed rows older than that are not served. */
      lastEnd: () => lastJobEnd(db),
      queue: () => queueState(db),
      events: { read: (jobId: string, afterSeq: number) => events.read(jobId, afterSeq), subscribe: events.subscribe.bind(events) },
    },
    audit: {
      exists: (id: string) => actionExists(db, id),
      page: (filter: ActionFilter, page: { before?: string; limit: number }) => listActionsPage(db, filter, page),
      lastOfEachKind: () => lastActionOfEachKind(db),
      /** Reused pages of the trail, dropped when a write is heard (docs/adr/0014-audit-trail-reads.md). */
      pages: (render: (rows: ActionRow[]) => string, maxAgeMs: number) => {
        const p = new AuditTrailPages(db, render, listen, maxAgeMs);
        pages.push(p);
        return p;
      },
    },
    selfUpdate: {
      get: (requestId: string) => getSelfUpdate(db, requestId),
      last: () => lastUpdate(db),
      /** The preflight report's facts for an observation of the channel (docs/adr/0054-preflight-report.md). */
      preflightFacts: (channel: ObservedRow<'channel'>) => preflightFacts(db, channel),
    },
    updateHistory: {
      exists: (requestId: string) => historyEntryExists(db, requestId),
      list: (page: Parameters<typeof listUpdateHistory>[1]) => listUpdateHistory(db, page),
    },
    updatePolicy: {
      get: () => getUpdatePolicy(db),
      quarantine: (opts: Parameters<typeof listQuarantine>[1]) => listQuarantine(db, opts),
    },
    users: { list: () => userViews(db) },
    notifications: {
      endpoints: () => listEndpoints(db),
      deliveries: (opts: Parameters<typeof listDeliveries>[1]) => listDeliveries(db, opts),
    },
    platformConfig: {
      /** Changes saved and not yet deployed. */
      pending: () => pendingConfigChanges(db, sealer),
      /** The observed .env's entries, from the sealed form the observer stored. */
      observedEntries: (sealed: string) => JSON.parse(sealer.open(sealed)) as { key: string; value: string }[],
    },
    hostMigration: {
      vmUser: async () => (await getSetting<string>(db, VM_USER_SETTING)) ?? null,
      /** The newest host migration among the last 200 jobs. */
      lastJob: async () => (await listJobs(db, { limit: 200 })).find((j) => j.kind === 'migrate-host'),
    },
    health: { probe: new DatabaseProbe(db), up: (timeoutMs?: number) => databaseUp(db, timeoutMs) },
    /** What the metrics scrape counts. */
    metrics: {
      jobCounts: () => jobCounts(db),
      finishedJobDurations: () => finishedJobDurations(db),
      selfUpdateCounts: () => selfUpdateCounts(db),
      updateHistoryFigures: () => updateHistoryFigures(db),
    },
    /** What the diagnostics bundle shows of the database. */
    diagnostics: {
      databaseKind: database.kind,
      schemaMigration: () => currentMigration(db),
      recentJobs: (limit: number) => recentJobs(db, limit),
      recentActions: (limit: number) => recentActions(db, limit),
      recentSelfUpdates: (limit: number) => recentSelfUpdates(db, limit),
    },
    /** Closes the LISTENs the read models opened (the app closes). */
    async close(): Promise<void> {
      await Promise.all([writes.close(), ...pages.map((p) => p.close())]);
    },
  };
}

/** The requests the API may write; each refuses or admits inside one transaction. */
export function requestWriters({ database, sealer }: Pick<ApiStateDeps, 'database' | 'sealer'>) {
  const db = database.db;
  return {
    jobs: {
      create: (input: Parameters<typeof createJob>[1]) => createJob(db, input),
      cancel: (jobId: string, actor: RecordedActor) => requestJobCancel(db, jobId, actor),
    },
    selfUpdate: {
      request: (actor: RecordedActor) => requestSelfUpdate(db, actor),
      /** Closes a request no controller claimed in time; false once one has (it is then the controller's). */
      withdrawUnclaimed: (requestId: string, detail: string) => withdrawUnclaimed(db, requestId, detail),
    },
    hostMigration: {
      request: (input: Parameters<typeof requestHostMigration>[1]) => requestHostMigration(db, input),
      setVmUser: (vmUser: string, by: string) => putSetting(db, VM_USER_SETTING, vmUser, by),
    },
    platformConfig: {
      put: (set: Record<string, string>, remove: readonly string[], by: string) => putConfigChanges(db, sealer, set, remove, by),
      recordReveal: (...args: Tail<Parameters<typeof recordConfigReveal>>) => recordConfigReveal(db, ...args),
    },
    updatePolicy: { put: (...args: Tail<Parameters<typeof putUpdatePolicy>>) => putUpdatePolicy(db, ...args) },
    users: {
      add: (...args: Tail<Parameters<typeof addUser>>) => addUser(db, ...args),
      change: (...args: Tail<Parameters<typeof changeUser>>) => changeUser(db, ...args),
      resetPassword: (...args: Tail<Parameters<typeof resetPassword>>) => resetPassword(db, ...args),
      remove: (username: string) => deleteUser(db, username),
    },
    /** Sign-in, sign-out and a user's own password. */
    auth: {
      verify: (username: string, password: string) => verifyCredentials(db, username, password),
      upgradeHash: (...args: Tail<Parameters<typeof upgradePasswordHash>>) => upgradePasswordHash(db, ...args),
      revoke: (...args: Tail<Parameters<typeof revokeToken>>) => revokeToken(db, ...args),
      changeOwnPassword: (...args: Tail<Parameters<typeof changeOwnPassword>>) => changeOwnPassword(db, ...args),
      countAttempt: (...args: Tail<Parameters<typeof countAttempt>>) => countAttempt(db, ...args),
      giveBack: (...args: Tail<Parameters<typeof giveBack>>) => giveBack(db, ...args),
      pruneCounters: () => pruneCounters(db),
    },
    notifications: {
      add: (input: Parameters<typeof addEndpoint>[2]) => addEndpoint(db, sealer, input),
      change: (...args: Tail<Parameters<typeof changeEndpoint>>) => changeEndpoint(db, ...args),
      remove: (...args: Tail<Parameters<typeof removeEndpoint>>) => removeEndpoint(db, ...args),
      test: (...args: Tail<Parameters<typeof enqueueTest>>) => enqueueTest(db, ...args),
    },
  };
}

type Tail<T extends readonly unknown[]> = T extends readonly [unknown, ...infer R] ? R : never;

export type ReadModels = ReturnType<typeof readModels>;
export type RequestWriters = ReturnType<typeof requestWriters>;

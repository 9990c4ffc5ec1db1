// Self-update requests (desired state, written by the API) and their status (observed state,
// written by the self-update controller and the boot reconciliation). "One update in flight, none
// while a deployment job is queued or running" is decided inside one transaction holding an
// advisory lock, so concurrent requests cannot both start; a partial unique index backs it up.
import { randomUUID } from 'node:crypto';
import { sql, type Kysely, type Transaction } from 'kysely';
import type { DB, SelfUpdatePhase } from '../db/schema.ts';
import type { ActorKind, RecordedActor } from '../auth/actor.ts';
import { conflict } from '../errors.ts';
import { refuseConflicting } from './exclusion.ts';
import { finishJob, insertSelfUpdateJob } from './jobs.ts';
import { appendJobEvents, type NewJobEvent } from './job-events.ts';

type Conn = Kysely<DB> | Transaction<DB>;

export const SELF_UPDATE_CHANNEL = 'self_update_requests';
export { IN_FLIGHT } from './exclusion.ts';
/** Phases that end preflight: the API answers once one of these is reached. */
export const PREFLIGHT_ENDED: readonly SelfUpdatePhase[] = ['newest', 'unresolved', 'aborted', 'helper-running', 'completed', 'rolled-back', 'neither', 'undecided'];
/** Phases of an update that ran its helper: in flight, or the outcome the boot reconciliation recorded. */
export const SPAWNED: readonly SelfUpdatePhase[] = ['helper-running', 'completed', 'rolled-back', 'neither', 'undecided'];

export interface SelfUpdateView {
  requestId: string;
  /** The update's own job: its transcript (`/api/deployment/jobs/{jobId}/logs`). */
  jobId: string | null;
  actor: string;
  actorEmail: string | null;
  /** Null for a request written before kinds were recorded. */
  actorKind: ActorKind | null;
  /** The digest the update policy decided on: preflight installs only it (null for a start by hand). */
  decidedDigest: string | null;
  phase: SelfUpdatePhase;
  state: string | null;
  channel: string | null;
  targetTag: string | null;
  targetDigest: string | null;
  targetImageId: string | null;
  previousReference: string | null;
  previousDigest: string | null;
  previousImageId: string | null;
  preUpdateMigration: string | null;
  /** The database backup preflight took (a file name in the backups volume). */
  backupFile: string | null;
  /** The sha256 of the compose file preflight staged. */
  stagedComposeSha256: string | null;
  actionId: string | null;
  helperContainerId: string | null;
  helperDeadline: Date | null;
  helperExitCode: number | null;
  abortCode: string | null;
  detail: string | null;
  snapshot: unknown;
  createdAt: Date;
  updatedAt: Date;
  finishedAt: Date | null;
  /** When the boot found the update taken back by a restore of its preflight's backup (its outcome then re-derived from the helper). */
  restoredAt: Date | null;
}

const columns = [
  'r.request_id', 'r.job_id', 'r.actor', 'r.actor_email', 'r.actor_kind', 'r.decided_digest', 'r.created_at', 's.phase', 's.snapshot', 's.channel', 's.target_tag', 's.target_digest',
  's.target_image_id', 's.previous_reference', 's.previous_digest', 's.previous_image_id', 's.pre_update_migration', 's.backup_file', 's.staged_compose_sha256', 's.action_id',
  's.helper_container_id', 's.helper_deadline', 's.helper_exit_code', 's.abort_code', 's.detail', 's.updated_at', 's.finished_at', 's.restored_at',
] as const;

type Row = {
  request_id: string; job_id: string | null; actor: string; actor_email: string | null; actor_kind: ActorKind | null; decided_digest: string | null; created_at: Date; phase: SelfUpdatePhase; snapshot: unknown;
  channel: string | null; target_tag: string | null; target_digest: string | null; target_image_id: string | null;
  previous_reference: string | null; previous_digest: string | null; previous_image_id: string | null; pre_update_migration: string | null; backup_file: string | null; staged_compose_sha256: string | null;
  action_id: string | null; helper_container_id: string | null; helper_deadline: Date | null; helper_exit_code: number | null;
  abort_code: string | null; detail: string | null; updated_at: Date; finished_at: Date | null; restored_at: Date | null;
};

const date = (d: Date | string | null) => (d === null ? null : new Date(d));

function toView(r: Row): SelfUpdateView {
  const value = (r.snapshot as { value?: unknown } | null)?.value;
  return {
    requestId: r.request_id,
    jobId: r.job_id,
    actor: r.actor,
    actorEmail: r.actor_email,
    actorKind: r.actor_kind,
    decidedDigest: r.decided_digest,
    phase: r.phase,
    state: value === undefined ? null : typeof value === 'string' ? value : JSON.stringify(value),
    channel: r.channel,
    targetTag: r.target_tag,
    targetDigest: r.target_digest,
    targetImageId: r.target_image_id,
    previousReference: r.previous_reference,
    previousDigest: r.previous_digest,
    previousImageId: r.previous_image_id,
    preUpdateMigration: r.pre_update_migration,
    backupFile: r.backup_file,
    stagedComposeSha256: r.staged_compose_sha256,
    actionId: r.action_id === null ? null : String(r.action_id),
    helperContainerId: r.helper_container_id,
    helperDeadline: date(r.helper_deadline),
    helperExitCode: r.helper_exit_code,
    abortCode: r.abort_code,
    detail: r.detail,
    snapshot: r.snapshot,
    createdAt: new Date(r.created_at),
    updatedAt: new Date(r.updated_at),
    finishedAt: date(r.finished_at),
    restoredAt: date(r.restored_at),
  };
}

const base = (db: Conn) => db.selectFrom('self_update_requests as r').innerJoin('self_update_status as s', 's.request_id', 'r.request_id').select(columns);

/**
 * Writes a self-update request when no update is in flight and no deployment job is queued or
 * running, and wakes the controller. Throws a 409 AppError otherwise (src/state/exclusion.ts).
 * `decidedDigest`: the digest the caller decided on (the update policy); preflight aborts when the
 * channel's tag names another one by then, or when it is quarantined. `withRequest` writes what
 * must be there exactly when the request is (the policy's attempt), in its transaction.
 */
export async function requestSelfUpdate(
  db: Kysely<DB>,
  actor: RecordedActor,
  opts: { decidedDigest?: string; withRequest?: (tx: Transaction<DB>, requestId: string) => Promise<void> } = {},
): Promise<string> {
  const requestId = randomUUID();
  const jobId = randomUUID();
  try {
    await db.transaction().execute(async (tx) => {
      await refuseConflicting(tx, { kind: 'update' });
      // The update's transcript is a job of its own, written with the request (never queued).
      await insertSelfUpdateJob(tx, jobId, actor);
      await tx.insertInto('self_update_requests').values({ request_id: requestId, actor: actor.id, actor_email: actor.email ?? null, actor_kind: actor.kind ?? null, job_id: jobId, decided_digest: opts.decidedDigest ?? null }).execute();
      await tx.insertInto('self_update_status').values(emptyStatus(requestId)).execute();
      await opts.withRequest?.(tx, requestId);
      await sql`select pg_notify(${SELF_UPDATE_CHANNEL}, ${requestId})`.execute(tx);
    });
  } catch (err) {
    if ((err as { code?: string }).code === '23505') throw conflict('a self-update is already in flight');
    throw err;
  }
  return requestId;
}

function emptyStatus(requestId: string) {
  return {
    request_id: requestId, phase: 'requested' as const, conditions: '[]', snapshot: null, chart_version: null, claimed_by: null, channel: null,
    target_tag: null, target_digest: null, target_image_id: null, previous_reference: null, previous_digest: null, previous_image_id: null,
    pre_update_migration: null, backup_file: null, staged_compose_sha256: null, action_id: null, helper_container_id: null, helper_deadline: null, hung_deadline: null, helper_exit_code: null, abort_code: null,
    detail: null, finished_at: null,
  };
}

export async function getSelfUpdate(db: Conn, requestId: string): Promise<SelfUpdateView | undefined> {
  const r = await base(db).where('r.request_id', '=', requestId).executeTakeFirst();
  return r ? toView(r as Row) : undefined;
}

export async function listSelfUpdates(db: Conn, opts: { phases?: readonly SelfUpdatePhase[]; limit?: number } = {}): Promise<SelfUpdateView[]> {
  let q = base(db).orderBy('r.created_at', 'desc').limit(opts.limit ?? 50);
  if (opts.phases?.length) q = q.where('s.phase', 'in', opts.phases);
  return (await q.execute()).map((r) => toView(r as Row));
}

/** Claims the oldest requested update for this worker: its phase becomes `preflight`. */
export async function claimNextSelfUpdate(db: Kysely<DB>, worker: string, hungDeadline: Date | null = null): Promise<SelfUpdateView | undefined> {
  const id = await db.transaction().execute(async (tx) => {
    const row = await tx
      .selectFrom('self_update_status as s')
      .innerJoin('self_update_requests as r', 'r.request_id', 's.request_id')
      .select('s.request_id')
      .where('s.phase', '=', 'requested')
      .orderBy('r.created_at')
      .limit(1)
      .forUpdate('s')
      .skipLocked()
      .executeTakeFirst();
    if (!row) return undefined;
    await tx
      .updateTable('self_update_status')
      .set({ phase: 'preflight', claimed_by: worker, updated_at: new Date(), ...(hungDeadline ? { hung_deadline: hungDeadline } : {}) })
      .where('request_id', '=', row.request_id)
      .execute();
    return row.request_id;
  });
  return id ? getSelfUpdate(db, id) : undefined;
}

/** Requests in preflight past their hung deadline (the database's clock). */
export async function overduePreflights(db: Conn): Promise<{ requestId: string; hungDeadline: Date }[]> {
  const rows = await db
    .selectFrom('self_update_status')
    .select(['request_id', 'hung_deadline'])
    .where('phase', '=', 'preflight')
    .where('hung_deadline', '<', sql<Date>`now()`)
    .execute();
  return rows.map((r) => ({ requestId: r.request_id, hungDeadline: r.hung_deadline! }));
}

export interface SelfUpdatePatch {
  phase?: SelfUpdatePhase;
  snapshot?: unknown;
  chartVersion?: string;
  channel?: string | null;
  targetTag?: string | null;
  targetDigest?: string | null;
  targetImageId?: string | null;
  previousReference?: string | null;
  previousDigest?: string | null;
  previousImageId?: string | null;
  preUpdateMigration?: string | null;
  backupFile?: string | null;
  stagedComposeSha256?: string | null;
  actionId?: string | null;
  helperContainerId?: string | null;
  helperDeadline?: Date | null;
  hungDeadline?: Date | null;
  helperExitCode?: number | null;
  abortCode?: string | null;
  detail?: string | null;
  restoredAt?: Date | null;
  finished?: boolean;
}

const COLUMN: Record<Exclude<keyof SelfUpdatePatch, 'snapshot' | 'finished'>, string> = {
  phase: 'phase', chartVersion: 'chart_version', channel: 'channel', targetTag: 'target_tag', targetDigest: 'target_digest',
  targetImageId: 'target_image_id', previousReference: 'previous_reference', previousDigest: 'previous_digest',
  previousImageId: 'previous_image_id', preUpdateMigration: 'pre_update_migration', backupFile: 'backup_file', stagedComposeSha256: 'staged_compose_sha256', actionId: 'action_id',
  helperContainerId: 'helper_container_id', helperDeadline: 'helper_deadline', hungDeadline: 'hung_deadline', helperExitCode: 'helper_exit_code',
  abortCode: 'abort_code', detail: 'detail', restoredAt: 'restored_at',
};

function patchValues(patch: SelfUpdatePatch): Record<string, unknown> {
  const set: Record<string, unknown> = { updated_at: new Date() };
  for (const [k, col] of Object.entries(COLUMN)) {
    const v = patch[k as keyof typeof COLUMN];
    if (v !== undefined) set[col] = v;
  }
  if (patch.snapshot !== undefined) set.snapshot = JSON.stringify(patch.snapshot);
  if (patch.finished) set.finished_at = new Date();
  return set;
}

/** Updates a status row; with `onlyIn`, only while it is in one of those phases. True when a row changed. */
export async function updateSelfUpdate(db: Conn, requestId: string, patch: SelfUpdatePatch, onlyIn?: readonly SelfUpdatePhase[]): Promise<boolean> {
  let q = db.updateTable('self_update_status').set(patchValues(patch)).where('request_id', '=', requestId);
  if (onlyIn?.length) q = q.where('phase', 'in', onlyIn);
  const res = await q.executeTakeFirst();
  return Number(res.numUpdatedRows) > 0;
}

/**
 * Notes in the stored chart snapshot a change preflight is about to make and what it replaces
 * (`context.changes.<key> = {before}`), so that a restart in the middle of the step still knows
 * what to put back. Putting back a change that was never made is a no-op.
 */
/** Wakes whatever reconciles self-updates (a phase changed that another reconciler acts on). */
export async function notifySelfUpdate(db: Conn, requestId: string): Promise<void> {
  await sql`select pg_notify(${SELF_UPDATE_CHANNEL}, ${requestId})`.execute(db);
}

export async function noteSelfUpdateChange(db: Conn, requestId: string, key: string, before: string | null): Promise<void> {
  await sql`update self_update_status
    set snapshot = jsonb_set(snapshot, array['context', 'changes', ${key}]::text[], ${JSON.stringify({ before })}::jsonb, true), updated_at = now()
    where request_id = ${requestId} and snapshot ? 'context'`.execute(db);
}

/** The update whose helper was spawned and whose outcome is not recorded yet (at most one). */
export async function pendingReconciliation(db: Conn): Promise<SelfUpdateView | undefined> {
  const r = await base(db).where('s.phase', '=', 'helper-running').orderBy('r.created_at', 'desc').executeTakeFirst();
  return r ? toView(r as Row) : undefined;
}

export interface LastUpdate {
  /** `started` while in flight, then `completed`, `rolled-back`, `neither` or `undecided`; null if never updated. */
  status: string | null;
  detail: string | null;
  at: string | null;
  targetDigest: string | null;
  /** The update's job, whose events are its transcript; null if never updated or for an update made before jobs had one. */
  jobId: string | null;
}

/**
 * What the check says when the channel still offers the build the last update tried and did not keep
 * (rolled back, restarted on another build, or undecided): the digests differ, so an update is
 * available, but not as if nothing had happened. Undefined otherwise.
 */
export function failedTargetWarning(last: LastUpdate, remoteDigest: string | null): string | undefined {
  if (!remoteDigest || last.targetDigest !== remoteDigest) return undefined;
  const when = last.at ? ` at ${last.at}` : '';
  switch (last.status) {
    case 'rolled-back':
      return `the last update to ${remoteDigest} did not stick and was rolled back${when} (${last.detail ?? 'no detail'}); updating again retries the same build`;
    case 'neither':
      return `the last update to ${remoteDigest} did not stick: another build runs since${when} (${last.detail ?? 'no detail'}); updating again retries the same build`;
    case 'undecided':
      return `the last update to ${remoteDigest} ended without a known outcome${when} (${last.detail ?? 'no detail'}); updating again retries the same build`;
    default:
      return undefined;
  }
}

/** The most recent self-update that ran its helper (an aborted preflight changed nothing). */
export async function lastUpdate(db: Conn): Promise<LastUpdate> {
  const r = await db
    .selectFrom('self_update_status as s')
    .innerJoin('self_update_requests as r', 'r.request_id', 's.request_id')
    .select(['s.phase', 's.detail', 's.target_digest', 's.created_at', 's.finished_at', 'r.job_id'])
    .where('s.action_id', 'is not', null)
    .where('s.phase', 'in', SPAWNED)
    .orderBy('s.created_at', 'desc')
    .limit(1)
    .executeTakeFirst();
  if (!r) return { status: null, detail: null, at: null, targetDigest: null, jobId: null };
  return {
    status: r.phase === 'helper-running' ? 'started' : r.phase,
    detail: r.detail,
    at: new Date(r.finished_at ?? r.created_at).toISOString(),
    targetDigest: r.target_digest,
    jobId: r.job_id,
  };
}

/** Appends lines to an update's transcript (its job's events); nothing for a request without a job. */
export async function appendTranscript(db: Conn, jobId: string | null, events: readonly NewJobEvent[], scrub?: (s: string) => string): Promise<void> {
  if (jobId) await appendJobEvents(db, jobId, events, scrub);
}

/** How an update's job ends: `completed` only when the update completed or was not needed. */
export interface TranscriptEnd {
  /** The update's phase (completed, rolled-back, neither, undecided, newest, unresolved, aborted). */
  state: SelfUpdatePhase;
  detail: string | null;
  exitCode: number | null;
}

/**
 * Withdraws a request no self-update controller claimed in time (none runs in any process): the
 * request is aborted in preflight and its transcript ended, in one transaction, only while it is
 * still `requested`. False when a controller claimed it meanwhile (it then goes on as usual).
 */
export async function withdrawUnclaimed(db: Kysely<DB>, requestId: string, detail: string): Promise<boolean> {
  return db.transaction().execute(async (tx) => {
    const row = await tx.selectFrom('self_update_requests').select('job_id').where('request_id', '=', requestId).executeTakeFirst();
    if (!(await updateSelfUpdate(tx, requestId, { phase: 'aborted', abortCode: 'preflight', detail, finished: true }, ['requested']))) return false;
    await finishTranscript(tx, row?.job_id ?? null, { state: 'aborted', detail, exitCode: null });
    return true;
  });
}

/**
 * Ends an update's job: the last events (the helper's output and status), the decision (the update's
 * phase and detail), then `finished`, and the job's phase, all in one transaction (the caller's, when
 * given one). Only a running job ends, so a second call (another process, a retry after a restart)
 * writes nothing twice. True when it ended it here.
 */
export async function finishTranscript(db: Conn, jobId: string | null, end: TranscriptEnd, last: readonly NewJobEvent[] = [], scrub?: (s: string) => string): Promise<boolean> {
  if (!jobId) return false;
  const write = async (tx: Transaction<DB>) => {
    const outcome = end.state === 'completed' || end.state === 'newest' ? 'completed' : 'failed';
    // Its conditions say how it ended, as every job's do, with the update's phase as their reason.
    if (!(await finishJob(tx, jobId, { phase: outcome, state: end.state, detail: end.detail, exitCode: end.exitCode }, ['running']))) return false;
    await appendJobEvents(
      tx,
      jobId,
      [
        ...last,
        { type: 'phase', payload: { phase: 'decision', outcome: end.state, detail: end.detail } },
        { type: 'finished', payload: { outcome, state: end.state, exitCode: end.exitCode, detail: end.detail } },
      ],
      scrub,
    );
    return true;
  };
  return db.isTransaction ? write(db as Transaction<DB>) : (db as Kysely<DB>).transaction().execute(write);
}

/**
 * Jobs of updates that have ended (or never got past their request) while the job still runs: a
 * restart came between the two writes. Ended here with the update's own outcome.
 */
export async function unfinishedTranscripts(db: Conn): Promise<{ jobId: string; phase: SelfUpdatePhase; detail: string | null; exitCode: number | null }[]> {
  const rows = await db
    .selectFrom('self_update_requests as r')
    .innerJoin('self_update_status as s', 's.request_id', 'r.request_id')
    .innerJoin('deployment_job_status as j', 'j.job_id', 'r.job_id')
    .select(['r.job_id', 's.phase', 's.detail', 's.helper_exit_code'])
    .where('j.phase', '=', 'running')
    .where('s.phase', 'not in', ['requested', 'preflight', 'helper-running'])
    .execute();
  return rows.map((r) => ({ jobId: r.job_id!, phase: r.phase, detail: r.detail, exitCode: r.helper_exit_code }));
}

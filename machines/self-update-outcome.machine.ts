// The outcome of a self-update, as the boot reconciliation chart (boot-reconcile.machine.ts) decides
// it: what the chart reads (the pending update, the helper's exit, what runs now), the rules its
// guards, inputs and outputs apply (the outcome by digests, the channel tag's order, the notification,
// the schema alarm, the quarantine) and their words. Pure functions; the chart is beside it.

/** The self-update action whose helper was spawned and whose outcome is not recorded yet. */
export interface PendingUpdate {
  requestId: string;
  actionId: string | null;
  targetTag: string;
  targetDigest: string;
  targetImageId: string | null;
  previousReference: string | null;
  previousDigest: string | null;
  previousImageId: string | null;
  preUpdateMigration: string | null;
  /** The database backup preflight took (a file in the backups volume); null when none was recorded. */
  backup?: string | null;
  helperId: string | null;
  /** The database was restored from this update's preflight backup, and the outcome is read again. */
  restored?: boolean;
  /** ISO time after which the helper is no longer waited for. */
  helperDeadline: string | null;
  /** ISO time the update was read: the helper's deadline is measured from it. */
  readAt: string;
}

/** What the helper container told, read from the engine after it exited. */
export interface HelperOutcome {
  /** `missing`: no such container (removed by hand); `timed-out`: still running at the deadline. */
  state: 'exited' | 'missing' | 'timed-out';
  exitCode: number | null;
  /** The status the helper printed: `ok`, `rolled-back` or `failed`. */
  status: 'ok' | 'rolled-back' | 'failed' | null;
  /** Why the switch failed, from the helper's output. */
  switchFailure: string | null;
  /** Why the rollback failed, from the helper's output. */
  rollbackFailure: string | null;
}

/** What this backend runs now. */
export interface RunningNow {
  reference: string | null;
  digest: string | null;
  imageId: string | null;
  /** The newest applied schema migration. */
  migration: string | null;
}

export type ReconcileOutcome = 'completed' | 'rolled-back' | 'rolled-back-onto-changed-schema' | 'neither';

/** The step whose engine or database call kept failing. */
export type ReconcileStep = 'findPending' | 'waitForHelper' | 'inspectRunning' | 'recordOutcome';

export const CHANGED_SCHEMA = 'ROLLED BACK ONTO A CHANGED SCHEMA';

/**
 * The documented restore of a backup (docs/self-update.md): the backend stopped, the database
 * recreated from the dump inside installer-postgres, the backend started again on this build.
 */
export function restoreCommand(backup: string): string {
  return (
    `docker stop installer-backend && ` +
    `docker exec installer-postgres pg_restore --clean --create --if-exists -U installer -d postgres /backups/${backup} && ` +
    `docker start installer-backend`
  );
}

/** The alarm's words: the spec's text, then the backup taken before the update and how to restore it. */
export function changedSchemaDetail(backup: string | null | undefined): string {
  if (!backup) return CHANGED_SCHEMA;
  return `${CHANGED_SCHEMA}; the database was backed up before the update as ${backup}; to bring the old schema back: ${restoreCommand(backup)} (docs/self-update.md)`;
}

/**
 * What the repoint step is asked to do with the local channel tag: `keep` it (with why, when the
 * update did not stick and the tag still stays), or `move` it to the image that runs, only while it
 * names the failed build (or nothing): a tag moved since, by a newer pull, is left alone.
 */
export type RepointOrder =
  | { action: 'keep'; tag: string; why: string | null }
  | { action: 'move'; tag: string; imageId: string; onlyFrom: string | null };


/** What the repoint step did: `unchanged` when the tag already named the image, or was moved since. */
export type RepointResult = 'moved' | 'unchanged';

export type SelfUpdateNotification = 'self-update.completed' | 'self-update.rolled-back' | 'self-update.failed';

interface VerdictBase {
  pending: PendingUpdate;
  /** The status and audit detail, the same words in both. */
  detail: string;
  /** The audit row's end. */
  audit: 'completed' | 'failed';
  notification: SelfUpdateNotification;
  /** The target build is quarantined: no policy starts it again (docs/update-policy.md). */
  quarantine: boolean;
}

/** How the update ended, decided from digests and the helper's word. */
export interface DecidedVerdict extends VerdictBase {
  phase: 'completed' | 'rolled-back' | 'neither';
  outcome: ReconcileOutcome;
  helper: HelperOutcome;
  now: RunningNow;
  /** The schema alarm goes out beside the notification. */
  schemaAlarm: boolean;
}

/** Closed without an outcome: helper as far as it was read. */
export interface UndecidedVerdict extends VerdictBase {
  phase: 'undecided';
  helper: HelperOutcome | null;
}

/** What the reconciler writes, in one transaction: status, transcript, audit row, notifications, quarantine. */
export type Verdict = DecidedVerdict | UndecidedVerdict;

/** Same build: digests when both are known, else image ids. */
function sameBuild(digest: string | null, imageId: string | null, wantDigest: string | null, wantImageId: string | null): boolean {
  if (digest && wantDigest) return digest === wantDigest;
  return imageId !== null && imageId === wantImageId;
}

export function isUpdated(p: PendingUpdate, now: RunningNow): boolean {
  return sameBuild(now.digest, now.imageId, p.targetDigest, p.targetImageId);
}

export function isRolledBack(p: PendingUpdate, now: RunningNow): boolean {
  return !isUpdated(p, now) && sameBuild(now.digest, now.imageId, p.previousDigest, p.previousImageId);
}

export function schemaChanged(p: PendingUpdate, now: RunningNow): boolean {
  return now.migration !== p.preUpdateMigration;
}

/** Why the update did not stick, in the helper's words. */
export function helperReason(h: HelperOutcome, targetTag: string): string {
  if (h.state === 'missing') return 'the helper container installer-self-updater is gone, so its outcome is unknown';
  if (h.state === 'timed-out') return 'the helper installer-self-updater was still running at its deadline';
  const sw = h.switchFailure ? `the switch to ${targetTag} failed (${h.switchFailure})` : `the switch to ${targetTag} did not stick`;
  if (h.status === 'failed' || h.rollbackFailure) {
    return `${sw} and the rollback failed too (${h.rollbackFailure ?? `helper exit ${h.exitCode}`}); the backend was started again by hand`;
  }
  return `${sw}; helper exit ${h.exitCode ?? 'unknown'}`;
}

const show = (ref: string | null, digest: string | null, imageId: string | null) =>
  `${ref ?? 'an unknown image'} (${digest ?? imageId ?? 'no digest'})`;

/**
 * The outcome in words. The image named is the one that runs now (after a rollback that is the
 * rollback tag, not the reference the update started from); `channelTag` says what became of the
 * local channel tag. The changed-schema detail starts with the spec's words; the backup and its restore follow.
 */
export function outcomeDetail(outcome: ReconcileOutcome, p: PendingUpdate, now: RunningNow, h: HelperOutcome, channelTag: string | null = null): string {
  const tagNote = channelTag ? `; ${channelTag}` : '';
  switch (outcome) {
    case 'completed':
      return `updated to ${p.targetTag} (${p.targetDigest}) from ${p.previousDigest ?? p.previousImageId ?? 'an unknown digest'}`;
    case 'rolled-back':
      return `rolled back: ${helperReason(h, p.targetTag)}; still on the previous image ${show(now.reference, now.digest ?? p.previousDigest, now.imageId)}${tagNote}`;
    case 'rolled-back-onto-changed-schema':
      return changedSchemaDetail(p.backup);
    case 'neither':
      return `restarted on ${show(now.reference, now.digest, now.imageId)}, which is neither the target ${p.targetDigest} nor the previous ${p.previousDigest ?? p.previousImageId ?? 'image'}; ${helperReason(h, p.targetTag)}${tagNote}`;
  }
}

const UNREADABLE: Record<ReconcileStep, string> = {
  findPending: 'the unfinished self-update could not be read from the database',
  waitForHelper: 'the helper container installer-self-updater could not be read through the Docker engine',
  inspectRunning: 'the image this backend runs (or the schema migration) could not be read',
  recordOutcome: 'the outcome could not be written to the database',
};

/** Why an update is closed without an outcome: what could not be read, how often it was tried, the last error. */
export function undecidedDetail(p: PendingUpdate, step: ReconcileStep | null, attempts: number, lastError: string | null): string {
  const what = step ? UNREADABLE[step] : 'the outcome could not be read';
  return (
    `could not decide how the update to ${p.targetTag} (${p.targetDigest}) ended: ${what} ` +
    `(${attempts} attempt${attempts === 1 ? '' : 's'}, last error: ${lastError ?? 'unknown'}); ` +
    'closed without an outcome so that jobs and updates are accepted again: compare GET /api/version with the target digest and read docker logs installer-self-updater'
  );
}

/**
 * The notification an outcome sends: a build that stuck completed; one rolled back rolled back,
 * unless the helper itself reported that the rollback failed too; a restart on neither build failed.
 */
export function notificationOf(outcome: ReconcileOutcome, helperStatus: HelperOutcome['status']): SelfUpdateNotification {
  if (outcome === 'completed') return 'self-update.completed';
  if (outcome === 'neither' || helperStatus === 'failed') return 'self-update.failed';
  return 'self-update.rolled-back';
}

/** `neither` after a switch the helper reported done: someone started another build since, and the target did not fail. */
const switchWorked = (outcome: ReconcileOutcome, h: HelperOutcome) => outcome === 'neither' && h.status === 'ok';

/** An update that did not stick has its channel tag taken back from the failed build, unless the switch worked. */
export function repointOrderOf(p: PendingUpdate, outcome: ReconcileOutcome, h: HelperOutcome, now: RunningNow): RepointOrder {
  if (outcome === 'completed' || switchWorked(outcome, h)) return { action: 'keep', tag: p.targetTag, why: null };
  if (!now.imageId) return { action: 'keep', tag: p.targetTag, why: 'the id of the running image is unknown' };
  return { action: 'move', tag: p.targetTag, imageId: now.imageId, onlyFrom: p.targetImageId };
}

/** What became of the channel tag, in words for the detail; null when there is nothing to say. */
export function channelTagNote(order: RepointOrder, result: RepointResult): string | null {
  if (order.action === 'keep') return order.why ? `the local tag ${order.tag} was left alone: ${order.why}` : null;
  return result === 'moved' ? `the local tag ${order.tag} points at it again` : null;
}

/** An outcome read again after a restore says so. */
export const restoredNote = (p: PendingUpdate, detail: string): string =>
  p.restored ? `${detail}; recorded again from installer-self-updater after the database was restored from the backup taken in this update's preflight` : detail;

/** The verdict of a decided outcome: a build that did not stick, or failed, is quarantined. */
export function decidedVerdict(p: PendingUpdate, outcome: ReconcileOutcome, h: HelperOutcome, now: RunningNow, detail: string): DecidedVerdict {
  const phase = phaseOfOutcome(outcome);
  return {
    pending: p, phase, outcome, helper: h, now, detail: restoredNote(p, detail),
    audit: outcome === 'completed' ? 'completed' : 'failed',
    notification: notificationOf(outcome, h.status),
    schemaAlarm: outcome === 'rolled-back-onto-changed-schema',
    quarantine: !!p.targetDigest && phase !== 'completed' && !switchWorked(outcome, h),
  };
}

/** The verdict of an update closed without an outcome: not known to have stuck, so quarantined. */
export function undecidedVerdict(p: PendingUpdate, h: HelperOutcome | null, detail: string): UndecidedVerdict {
  return { pending: p, phase: 'undecided', helper: h, detail: restoredNote(p, detail), audit: 'failed', notification: 'self-update.failed', quarantine: !!p.targetDigest };
}

/** The status stored for an outcome (the audit row stores `completed` or `failed`). */
export function phaseOfOutcome(outcome: ReconcileOutcome): 'completed' | 'rolled-back' | 'neither' {
  if (outcome === 'completed') return 'completed';
  if (outcome === 'neither') return 'neither';
  return 'rolled-back';
}

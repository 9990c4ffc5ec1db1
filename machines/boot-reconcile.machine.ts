// Decides how the last unfinished self-update ended, once its helper has exited: by comparing the
// digest this backend now runs with the update's target and previous digests (the helper's status
// file is not readable here), and the schema migration with the one recorded before the update.
// When it did not stick, the local channel tag is taken back from the failed build; when nothing can
// be read, the update is closed as `undecided` rather than left in flight. Every waiting state has
// the hung guard, which counts as a failed attempt; the helper's wait runs to the helper's deadline
// (a timestamp on the request) first, so its guard fires the guard's minutes after that deadline:
// an engine that accepts a request and never answers cannot hold the installer.
// The chart decides everything the outcome entails: what becomes of the local channel tag, the
// notification, the schema alarm, the quarantine of the target build. Its final states output that
// verdict, and the reconciler writes it as it stands (controllers/self-update-outcome.ts). Time
// enters as data: the instant the update was read comes with it, and the helper's deadline is
// measured from there.
import { assign, fromPromise, setup } from 'xstate';
import { hungMessage } from './job.machine.ts';

export const BOOT_RECONCILE_CHART_VERSION = '3';

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

export interface ReconcileInput {
  /** Attempts before giving up on an engine or database that does not answer. */
  maxAttempts?: number;
  retryMs?: number;
  /** The hung guard: an attempt that has not answered after this many minutes counts as failed (default 15). */
  hungMinutes?: number;
}

export interface ReconcileContext {
  pending: PendingUpdate | null;
  helper: HelperOutcome | null;
  now: RunningNow | null;
  outcome: ReconcileOutcome | null;
  /** What became of the local channel tag after an update that did not stick. */
  channelTag: string | null;
  detail: string | null;
  attempts: number;
  maxAttempts: number;
  retryMs: number;
  hungMinutes: number;
  lastError: string | null;
  failedStep: ReconcileStep | null;
}

/**
 * What the repoint step is asked to do with the local channel tag: `keep` it (with why, when the
 * update did not stick and the tag still stays), or `move` it to the image that runs, only while it
 * names the failed build (or nothing): a tag moved since, by a newer pull, is left alone.
 */
export type RepointOrder =
  | { action: 'keep'; tag: string; why: string | null }
  | { action: 'move'; tag: string; imageId: string; onlyFrom: string | null };

export interface RepointInput {
  requestId: string;
  order: RepointOrder;
}

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

/** How a run ended: nothing pending, an outcome recorded, closed undecided, or given up with nothing known to close. */
export type BootReconcileOutput =
  | { end: 'idle' }
  | { end: 'reconciled' | 'undecided'; verdict: Verdict }
  | { end: 'failed'; requestId: string | null; error: string };

const never = <T, I = undefined>() => fromPromise<T, I>(() => new Promise<T>(() => {}));
const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e));

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

/** How long the helper's wait may take, from `now` (ms): until its deadline, then the hung guard's minutes. */
export function helperWaitMs(deadline: string | null, hungMinutes: number, now: number): number {
  const untilDeadline = deadline === null ? 0 : Math.max(0, Date.parse(deadline) - now);
  return (Number.isFinite(untilDeadline) ? untilDeadline : 0) + hungMinutes * 60_000;
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

const decidedOf = (c: ReconcileContext) => decidedVerdict(c.pending!, c.outcome!, c.helper!, c.now!, c.detail!);
const undecidedOf = (c: ReconcileContext) => undecidedVerdict(c.pending!, c.helper, c.detail!);

export const bootReconcileMachine = setup({
  types: {
    context: {} as ReconcileContext,
    input: {} as ReconcileInput,
    output: {} as BootReconcileOutput,
  },
  actors: {
    // Implemented by the self-update controller; fakes in simulations. All are idempotent: a
    // restart simply runs the chart again from the start.
    findPending: never<PendingUpdate | null>(),
    waitForHelper: never<HelperOutcome, { pending: PendingUpdate }>(),
    inspectRunning: never<RunningNow>(),
    // Carries out the chart's order for the local channel tag, so that a plain `docker compose up
    // -d` (VERSION unset) does not bring the failed build back.
    repointChannelTag: never<RepointResult, RepointInput>(),
    // Both write the verdict, in one transaction.
    recordOutcome: never<void, Verdict>(),
    recordUndecided: never<void, Verdict>(),
  },
  actions: {
    // The controller logs this at error level: the rolled-back build must tolerate the newer schema.
    alertChangedSchema: () => {},
    decide: assign((_, params: { outcome: ReconcileOutcome }) => ({ outcome: params.outcome })),
    /** An attempt at `step` failed (an error, or the hung guard): counted, with why. */
    attemptFailed: assign(({ context, event }, params: { step: ReconcileStep; hung?: boolean }) => ({
      attempts: context.attempts + 1,
      lastError: params.hung ? hungMessage(context.hungMinutes) : errorText(event.error),
      failedStep: params.step,
    })),
    /** The repoint step ended (`stuck`: an error, or the hung guard, said in the detail, not retried). */
    repointed: assign(({ context, event }, params: { stuck?: 'error' | 'hung' }) => {
      const order = repointOrderOf(context.pending!, context.outcome!, context.helper!, context.now!);
      if (order.action === 'keep' || !params.stuck) return { channelTag: channelTagNote(order, event.output) };
      return { channelTag: `the local tag ${order.tag} still names the failed build: ${params.stuck === 'hung' ? hungMessage(context.hungMinutes) : errorText(event.error)}` };
    }),
    describeOutcome: assign({ detail: ({ context }) => outcomeDetail(context.outcome!, context.pending!, context.now!, context.helper!, context.channelTag) }),
    describeUndecided: assign({ detail: ({ context }) => undecidedDetail(context.pending!, context.failedStep, context.attempts, context.lastError) }),
  },
  guards: {
    nothingPending: ({ event }) => event.output === null,
    updated: ({ context }) => isUpdated(context.pending!, context.now!),
    rolledBackOntoChangedSchema: ({ context }) => isRolledBack(context.pending!, context.now!) && schemaChanged(context.pending!, context.now!),
    rolledBack: ({ context }) => isRolledBack(context.pending!, context.now!),
    exhausted: ({ context }) => context.attempts >= context.maxAttempts,
    exhaustedUnknown: ({ context }) => context.attempts >= context.maxAttempts && context.pending === null,
  },
  delays: {
    retryDelay: ({ context }) => context.retryMs,
    hungTimeout: ({ context }) => context.hungMinutes * 60_000,
    helperTimeout: ({ context }) => helperWaitMs(context.pending?.helperDeadline ?? null, context.hungMinutes, Date.parse(context.pending?.readAt ?? '')),
  },
}).createMachine({
  id: 'bootReconcile',
  context: ({ input }) => ({
    pending: null,
    helper: null,
    now: null,
    outcome: null,
    channelTag: null,
    detail: null,
    attempts: 0,
    maxAttempts: input.maxAttempts ?? 10,
    retryMs: input.retryMs ?? 5_000,
    hungMinutes: input.hungMinutes ?? 15,
    lastError: null,
    failedStep: null,
  }),
  initial: 'finding',
  // The final state's output, as the run's.
  output: ({ event }) => event.output as BootReconcileOutput,
  states: {
    finding: {
      after: { hungTimeout: { target: 'retrying', actions: { type: 'attemptFailed', params: { step: 'findPending', hung: true } } } },
      invoke: {
        id: 'findPending',
        src: 'findPending',
        onDone: [{ guard: 'nothingPending', target: 'idle' }, { target: 'waitingForHelper', actions: assign({ pending: ({ event }) => event.output }) }],
        onError: { target: 'retrying', actions: { type: 'attemptFailed', params: { step: 'findPending' } } },
      },
    },
    // The outcome is decided only after the helper has exited: a new build that boots and is
    // then judged unhealthy must not report itself completed.
    waitingForHelper: {
      after: { helperTimeout: { target: 'retrying', actions: { type: 'attemptFailed', params: { step: 'waitForHelper', hung: true } } } },
      invoke: {
        id: 'waitForHelper',
        src: 'waitForHelper',
        input: ({ context }) => ({ pending: context.pending! }),
        onDone: { target: 'inspecting', actions: assign({ helper: ({ event }) => event.output }) },
        onError: { target: 'retrying', actions: { type: 'attemptFailed', params: { step: 'waitForHelper' } } },
      },
    },
    inspecting: {
      after: { hungTimeout: { target: 'retrying', actions: { type: 'attemptFailed', params: { step: 'inspectRunning', hung: true } } } },
      invoke: {
        id: 'inspectRunning',
        src: 'inspectRunning',
        onDone: { target: 'deciding', actions: assign({ now: ({ event }) => event.output }) },
        onError: { target: 'retrying', actions: { type: 'attemptFailed', params: { step: 'inspectRunning' } } },
      },
    },
    deciding: {
      always: [
        { guard: 'updated', target: 'recording', actions: { type: 'decide', params: { outcome: 'completed' } } },
        { guard: 'rolledBackOntoChangedSchema', target: 'repointing', actions: [{ type: 'decide', params: { outcome: 'rolled-back-onto-changed-schema' } }, 'alertChangedSchema'] },
        { guard: 'rolledBack', target: 'repointing', actions: { type: 'decide', params: { outcome: 'rolled-back' } } },
        { target: 'repointing', actions: { type: 'decide', params: { outcome: 'neither' } } },
      ],
    },
    // The outcome is decided; a tag that cannot be moved is said in the detail, not retried.
    repointing: {
      after: { hungTimeout: { target: 'recording', actions: { type: 'repointed', params: { stuck: 'hung' } } } },
      invoke: {
        id: 'repointChannelTag',
        src: 'repointChannelTag',
        input: ({ context }) => ({ requestId: context.pending!.requestId, order: repointOrderOf(context.pending!, context.outcome!, context.helper!, context.now!) }),
        onDone: { target: 'recording', actions: { type: 'repointed', params: {} } },
        onError: { target: 'recording', actions: { type: 'repointed', params: { stuck: 'error' } } },
      },
    },
    recording: {
      after: { hungTimeout: { target: 'retrying', actions: { type: 'attemptFailed', params: { step: 'recordOutcome', hung: true } } } },
      entry: 'describeOutcome',
      invoke: {
        id: 'recordOutcome',
        src: 'recordOutcome',
        input: ({ context }) => decidedOf(context),
        onDone: 'reconciled',
        onError: { target: 'retrying', actions: { type: 'attemptFailed', params: { step: 'recordOutcome' } } },
      },
    },
    retrying: {
      always: [
        // Nothing known to close: the database never answered. The next boot tries again.
        { guard: 'exhaustedUnknown', target: 'failed' },
        { guard: 'exhausted', target: 'givingUp' },
      ],
      after: { retryDelay: 'finding' },
    },
    // Gave up: the update is closed as `undecided`, its audit row finished, so that it no longer
    // counts as in flight (jobs and updates are accepted) and no later boot brings it back.
    givingUp: {
      after: { hungTimeout: { target: 'failed', actions: assign({ lastError: ({ context }) => hungMessage(context.hungMinutes) }) } },
      entry: 'describeUndecided',
      invoke: {
        id: 'recordUndecided',
        src: 'recordUndecided',
        input: ({ context }) => undecidedOf(context),
        onDone: 'undecided',
        onError: { target: 'failed', actions: assign({ lastError: ({ event }) => errorText(event.error) }) },
      },
    },
    idle: { type: 'final', output: (): BootReconcileOutput => ({ end: 'idle' }) },
    reconciled: { type: 'final', output: ({ context }): BootReconcileOutput => ({ end: 'reconciled', verdict: decidedOf(context) }) },
    undecided: { type: 'final', output: ({ context }): BootReconcileOutput => ({ end: 'undecided', verdict: undecidedOf(context) }) },
    failed: {
      type: 'final',
      output: ({ context }): BootReconcileOutput => ({ end: 'failed', requestId: context.pending?.requestId ?? null, error: context.lastError ?? 'the database did not answer' }),
    },
  },
});

/** The status stored for an outcome (the audit row stores `completed` or `failed`). */
export function phaseOfOutcome(outcome: ReconcileOutcome): 'completed' | 'rolled-back' | 'neither' {
  if (outcome === 'completed') return 'completed';
  if (outcome === 'neither') return 'neither';
  return 'rolled-back';
}

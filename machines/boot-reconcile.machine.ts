// Decides how the last unfinished self-update ended, once its helper has exited: by comparing the
// digest this backend now runs with the update's target and previous digests (the helper's status
// file is not readable here), and the schema migration with the one recorded before the update.
import { assign, fromPromise, setup } from 'xstate';

export const BOOT_RECONCILE_CHART_VERSION = '1';

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
  helperId: string | null;
  /** ISO time after which the helper is no longer waited for. */
  helperDeadline: string | null;
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

export const CHANGED_SCHEMA = 'ROLLED BACK ONTO A CHANGED SCHEMA';

export interface ReconcileInput {
  /** Attempts before giving up on an engine or database that does not answer. */
  maxAttempts?: number;
  retryMs?: number;
}

export interface ReconcileContext {
  pending: PendingUpdate | null;
  helper: HelperOutcome | null;
  now: RunningNow | null;
  outcome: ReconcileOutcome | null;
  detail: string | null;
  attempts: number;
  maxAttempts: number;
  retryMs: number;
  lastError: string | null;
}

export interface RecordInput {
  pending: PendingUpdate;
  outcome: ReconcileOutcome;
  detail: string;
  helper: HelperOutcome;
  now: RunningNow;
}

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

export function outcomeDetail(outcome: ReconcileOutcome, p: PendingUpdate, now: RunningNow, h: HelperOutcome): string {
  switch (outcome) {
    case 'completed':
      return `updated to ${p.targetTag} (${p.targetDigest}) from ${p.previousDigest ?? p.previousImageId ?? 'an unknown digest'}`;
    case 'rolled-back':
      return `rolled back: ${helperReason(h, p.targetTag)}; still on the previous image ${show(p.previousReference, p.previousDigest, p.previousImageId)}`;
    case 'rolled-back-onto-changed-schema':
      return CHANGED_SCHEMA;
    case 'neither':
      return `restarted on ${show(now.reference, now.digest, now.imageId)}, which is neither the target ${p.targetDigest} nor the previous ${p.previousDigest ?? p.previousImageId ?? 'image'}; ${helperReason(h, p.targetTag)}`;
  }
}

export const bootReconcileMachine = setup({
  types: {
    context: {} as ReconcileContext,
    input: {} as ReconcileInput,
  },
  actors: {
    // Implemented by the self-update controller; fakes in simulations. All are idempotent: a
    // restart simply runs the chart again from the start.
    findPending: never<PendingUpdate | null>(),
    waitForHelper: never<HelperOutcome, { pending: PendingUpdate }>(),
    inspectRunning: never<RunningNow>(),
    recordOutcome: never<void, RecordInput>(),
  },
  actions: {
    // The controller logs this at error level: the rolled-back build must tolerate the newer schema.
    alertChangedSchema: () => {},
  },
  guards: {
    nothingPending: ({ event }) => (event as unknown as { output: PendingUpdate | null }).output === null,
    updated: ({ context }) => isUpdated(context.pending!, context.now!),
    rolledBackOntoChangedSchema: ({ context }) => isRolledBack(context.pending!, context.now!) && schemaChanged(context.pending!, context.now!),
    rolledBack: ({ context }) => isRolledBack(context.pending!, context.now!),
    exhausted: ({ context }) => context.attempts >= context.maxAttempts,
  },
  delays: {
    retryDelay: ({ context }) => context.retryMs,
  },
}).createMachine({
  id: 'bootReconcile',
  context: ({ input }) => ({
    pending: null,
    helper: null,
    now: null,
    outcome: null,
    detail: null,
    attempts: 0,
    maxAttempts: input.maxAttempts ?? 10,
    retryMs: input.retryMs ?? 5_000,
    lastError: null,
  }),
  initial: 'finding',
  states: {
    finding: {
      invoke: {
        id: 'findPending',
        src: 'findPending',
        onDone: [{ guard: 'nothingPending', target: 'idle' }, { target: 'waitingForHelper', actions: assign({ pending: ({ event }) => event.output }) }],
        onError: { target: 'retrying', actions: assign({ attempts: ({ context }) => context.attempts + 1, lastError: ({ event }) => errorText(event.error) }) },
      },
    },
    // The outcome is decided only after the helper has exited: a new build that boots and is
    // then judged unhealthy must not report itself completed.
    waitingForHelper: {
      invoke: {
        id: 'waitForHelper',
        src: 'waitForHelper',
        input: ({ context }) => ({ pending: context.pending! }),
        onDone: { target: 'inspecting', actions: assign({ helper: ({ event }) => event.output }) },
        onError: { target: 'retrying', actions: assign({ attempts: ({ context }) => context.attempts + 1, lastError: ({ event }) => errorText(event.error) }) },
      },
    },
    inspecting: {
      invoke: {
        id: 'inspectRunning',
        src: 'inspectRunning',
        onDone: { target: 'deciding', actions: assign({ now: ({ event }) => event.output }) },
        onError: { target: 'retrying', actions: assign({ attempts: ({ context }) => context.attempts + 1, lastError: ({ event }) => errorText(event.error) }) },
      },
    },
    deciding: {
      always: [
        { guard: 'updated', target: 'recording', actions: assign({ outcome: 'completed' }) },
        { guard: 'rolledBackOntoChangedSchema', target: 'recording', actions: [assign({ outcome: 'rolled-back-onto-changed-schema' }), 'alertChangedSchema'] },
        { guard: 'rolledBack', target: 'recording', actions: assign({ outcome: 'rolled-back' }) },
        { target: 'recording', actions: assign({ outcome: 'neither' }) },
      ],
    },
    recording: {
      entry: assign({ detail: ({ context }) => outcomeDetail(context.outcome!, context.pending!, context.now!, context.helper!) }),
      invoke: {
        id: 'recordOutcome',
        src: 'recordOutcome',
        input: ({ context }) => ({ pending: context.pending!, outcome: context.outcome!, detail: context.detail!, helper: context.helper!, now: context.now! }),
        onDone: 'reconciled',
        onError: { target: 'retrying', actions: assign({ attempts: ({ context }) => context.attempts + 1, lastError: ({ event }) => errorText(event.error) }) },
      },
    },
    retrying: {
      always: { guard: 'exhausted', target: 'failed' },
      after: { retryDelay: 'finding' },
    },
    idle: { type: 'final' },
    reconciled: { type: 'final' },
    failed: { type: 'final' },
  },
});

/** The status stored for an outcome (the audit row stores `completed` or `failed`). */
export function phaseOfOutcome(outcome: ReconcileOutcome): 'completed' | 'rolled-back' | 'neither' {
  if (outcome === 'completed') return 'completed';
  if (outcome === 'neither') return 'neither';
  return 'rolled-back';
}

// Decides how the last unfinished self-update ended, once its helper has exited: by comparing the
// digest this backend now runs with the update's target and previous digests (the helper's status
// file is not readable here), and the schema migration with the one recorded before the update.
// When it did not stick, the local channel tag is taken back from the failed build; when nothing can
// be read, the update is closed as `undecided` rather than left in flight. Every waiting state has
// the hung guard, which counts as a failed attempt; the helper's wait runs to the helper's deadline
// (a timestamp on the request) first, so its guard fires the guard's minutes after that deadline:
// an engine that accepts a request and never answers cannot hold the installer.
// The chart decides everything the outcome entails: what becomes of the local channel tag, the
// notification, the schema alarm, the quarantine of the target build (the rules and their words are
// in self-update-outcome.machine.ts). Its final states output that verdict, and the reconciler writes
// it as it stands (controllers/self-update-outcome.ts). Time
// enters as data: the instant the update was read comes with it, and the helper's deadline is
// measured from there.
import { assign, fromPromise, setup } from 'xstate';
import { hungMessage } from './job.machine.ts';
import {
  channelTagNote, decidedVerdict, isRolledBack, isUpdated, outcomeDetail, repointOrderOf, schemaChanged, undecidedDetail, undecidedVerdict,
  type HelperOutcome, type PendingUpdate, type ReconcileOutcome, type ReconcileStep, type RepointOrder, type RepointResult, type RunningNow, type Verdict,
} from './self-update-outcome.machine.ts';

export const BOOT_RECONCILE_CHART_VERSION = '3';

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

export interface RepointInput {
  requestId: string;
  order: RepointOrder;
}

/** How a run ended: nothing pending, an outcome recorded, closed undecided, or given up with nothing known to close. */
export type BootReconcileOutput =
  | { end: 'idle' }
  | { end: 'reconciled' | 'undecided'; verdict: Verdict }
  | { end: 'failed'; requestId: string | null; error: string };

const never = <T, I = undefined>() => fromPromise<T, I>(() => new Promise<T>(() => {}));
const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** How long the helper's wait may take, from `now` (ms): until its deadline, then the hung guard's minutes. */
export function helperWaitMs(deadline: string | null, hungMinutes: number, now: number): number {
  const untilDeadline = deadline === null ? 0 : Math.max(0, Date.parse(deadline) - now);
  return (Number.isFinite(untilDeadline) ? untilDeadline : 0) + hungMinutes * 60_000;
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

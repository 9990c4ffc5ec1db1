// One self-update request inside the running backend: resolve the channel's target digest, stop if
// already newest, run the preflight (with a database backup before anything is changed), record the
// audit action, clear a leftover helper and spawn it.
// A failure before the helper runs undoes what preflight changed: then nothing has changed. Every
// step is bounded by the hung guard, so a stalled engine or registry cannot hold an update in flight.
// A step that fails or hangs runs one named action (`stepFailed`) with the step's name and what its
// failure leads to; the final states output how the request ends.
import { assign, fromPromise, setup } from 'xstate';
import { hungMessage } from './job.machine.ts';

export const SELF_UPDATE_CHART_VERSION = '3';

/** The preflight's steps, by the state that runs each: the step a failure names. */
export type SelfUpdateStep =
  | 'resolving' | 'checking' | 'pulling' | 'fetchingCompose' | 'backingUp'
  | 'taggingRollback' | 'staging' | 'taggingNew' | 'recording' | 'removingLeftover' | 'spawning';

/** The image this backend runs, as the engine reports it. */
export interface RunningImage {
  inContainer: boolean;
  reference: string | null;
  tag: string | null;
  /** Registry digest; null when the image was never pushed or pulled. */
  digest: string | null;
  imageId: string | null;
}

/** What the update moves to: the registry digest of `<channel>-latest`, pulled by digest and tagged. */
export interface UpdateTarget {
  channel: string;
  /** `<channel>-latest`: the tag the helper switches to (VERSION=<tag>). */
  tag: string;
  digest: string;
}

/**
 * What preflight changed, with what was there before, so that an abort can put it back:
 * `null` before means the tag or file did not exist.
 */
export interface PreflightChanges {
  rollbackTag?: { before: string | null };
  stagedFile?: { before: string | null };
  newTag?: { before: string | null };
}

export interface SelfUpdateInput {
  requestId: string;
  /** The hung guard: a step that has not finished after this many minutes is abandoned (default 15). */
  hungMinutes?: number;
}

export interface SelfUpdateContext {
  requestId: string;
  hungMinutes: number;
  running: RunningImage | null;
  target: UpdateTarget | null;
  /** The published compose file, fetched in preflight and staged for the helper. */
  composeFile: string | null;
  targetImageId: string | null;
  changes: PreflightChanges;
  actionId: string | null;
  preUpdateMigration: string | null;
  helperId: string | null;
  /** The database backup taken before anything was changed (a file name in the backups volume). */
  backup: string | null;
  /** The step that failed, and why. */
  failedStep: SelfUpdateStep | null;
  detail: string | null;
  /** `conflict` when preflight found a deployment job (the API answers 409), else `preflight`. */
  abortCode: 'conflict' | 'preflight' | null;
  undoFailed: string | null;
}

export interface ResolvedTarget {
  running: RunningImage;
  target: UpdateTarget;
}

export interface RecordedAction {
  actionId: string;
  preUpdateMigration: string | null;
}

export interface RecordActionInput {
  running: RunningImage;
  target: UpdateTarget;
  targetImageId: string | null;
}

export interface UndoInput {
  changes: PreflightChanges;
  target: UpdateTarget | null;
  actionId: string | null;
  detail: string | null;
}

const never = <T, I = undefined>() => fromPromise<T, I>(() => new Promise<T>(() => {}));

const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e));
const isConflict = (e: unknown) => typeof e === 'object' && e !== null && (e as { code?: unknown }).code === 'conflict';

/** How the request ends: the helper runs, or the request ended (with the detail the row and the API report). */
export type SelfUpdateOutput =
  | { phase: 'helper-running'; target: UpdateTarget; helperId: string; preUpdateMigration: string | null }
  | { phase: 'newest'; target: UpdateTarget; detail: string }
  | { phase: 'unresolved'; detail: string }
  | { phase: 'aborted'; detail: string; abortCode: 'conflict' | 'preflight'; failedStep: SelfUpdateStep | null };

/** The end of an aborted request, from the chart's context (also for a chart that threw). */
export const abortedOutput = (ctx: SelfUpdateContext): SelfUpdateOutput => ({
  phase: 'aborted', detail: abortDetail(ctx), abortCode: ctx.abortCode ?? 'preflight', failedStep: ctx.failedStep,
});

/** A failed step: its name; `aborts` when it ends the request (nothing changed yet); words put before the error's. */
type FailureParams = { step: SelfUpdateStep; aborts?: boolean; why?: string };

export const selfUpdateMachine = setup({
  types: {
    context: {} as SelfUpdateContext,
    input: {} as SelfUpdateInput,
    output: {} as SelfUpdateOutput,
  },
  actors: {
    // Implemented by the self-update controller with the Docker engine, the host files and the
    // database; fakes in simulations. Each is idempotent or changes one thing atomically.
    resolveTarget: never<ResolvedTarget>(),
    // Also holds a start to the digest it was decided on (the update policy's), and refuses a
    // quarantined one for it.
    checkPreconditions: never<void, { running: RunningImage | null; target: UpdateTarget | null }>(),
    fetchPublishedCompose: never<string, { target: UpdateTarget; imageId: string }>(),
    // Dumps the installer's database into the backups volume and keeps the last N; answers the
    // backup's name. It changes nothing an abort would have to put back.
    backupDatabase: never<string, { running: RunningImage; target: UpdateTarget }>(),
    pullTarget: never<string, { target: UpdateTarget }>(),
    tagRollback: never<{ before: string | null }, { running: RunningImage }>(),
    stageComposeFile: never<{ before: string | null }, { content: string }>(),
    tagNew: never<{ before: string | null }, { target: UpdateTarget; imageId: string }>(),
    recordAction: never<RecordedAction, RecordActionInput>(),
    removeLeftoverHelper: never<void>(),
    spawnHelper: never<string, { target: UpdateTarget }>(),
    undoPreflight: never<void, UndoInput>(),
  },
  actions: {
    /**
     * A step failed (`hung`: its hung guard fired): its name, and why, after `why` when given. One
     * that aborts says whether the API answers 409 (a conflict found in preflight) or not.
     */
    stepFailed: assign(({ context, event }, p: FailureParams & { hung?: boolean }) => ({
      failedStep: p.step,
      detail: `${p.why ?? ''}${p.hung ? hungMessage(context.hungMinutes) : errorText(event.error)}`,
      abortCode: !p.aborts ? context.abortCode : !p.hung && isConflict(event.error) ? 'conflict' : 'preflight',
    })),
    /** What a step changed, with what was there before, for the undo. */
    changed: assign(({ context, event }, p: { key: keyof PreflightChanges }) => ({ changes: { ...context.changes, [p.key]: event.output as { before: string | null } } })),
    /** The undo ended: everything put back (`failed` unset), or why not. */
    undone: assign(({ context, event }, p: { failed?: 'error' | 'hung' }) => ({
      abortCode: 'preflight' as const,
      ...(!p.failed ? { changes: {} } : { undoFailed: p.failed === 'hung' ? hungMessage(context.hungMinutes) : errorText(event.error) }),
    })),
  },
  guards: {
    alreadyNewest: ({ context }) => context.running?.digest != null && context.running.digest === context.target?.digest,
  },
  delays: {
    hungTimeout: ({ context }) => context.hungMinutes * 60_000,
  },
}).createMachine({
  id: 'selfUpdate',
  context: ({ input }) => ({
    requestId: input.requestId,
    hungMinutes: input.hungMinutes ?? 15,
    running: null,
    target: null,
    composeFile: null,
    targetImageId: null,
    changes: {},
    actionId: null,
    preUpdateMigration: null,
    helperId: null,
    backup: null,
    failedStep: null,
    detail: null,
    abortCode: null,
    undoFailed: null,
  }),
  initial: 'resolving',
  // The final state's output, as the chart's.
  output: ({ event }) => event.output as SelfUpdateOutput,
  states: {
    // The registry digest of `<channel>-latest`, through the engine. Failing here is a 400.
    resolving: {
      after: { hungTimeout: { target: 'unresolved', actions: { type: 'stepFailed', params: { step: 'resolving', hung: true } } } },
      invoke: {
        id: 'resolveTarget',
        src: 'resolveTarget',
        onDone: { target: 'deciding', actions: assign({ running: ({ event }) => event.output.running, target: ({ event }) => event.output.target }) },
        onError: { target: 'unresolved', actions: { type: 'stepFailed', params: { step: 'resolving' } } },
      },
    },
    deciding: {
      always: [{ guard: 'alreadyNewest', target: 'newest' }, { target: 'checking' }],
    },
    // Nothing is changed until the pull and the fetch have succeeded.
    checking: {
      after: { hungTimeout: { target: 'aborted', actions: { type: 'stepFailed', params: { step: 'checking', aborts: true, hung: true } } } },
      invoke: {
        id: 'checkPreconditions',
        src: 'checkPreconditions',
        input: ({ context }) => ({ running: context.running, target: context.target }),
        onDone: 'pulling',
        // A deployment job found here is a conflict: the API answers 409.
        onError: { target: 'aborted', actions: { type: 'stepFailed', params: { step: 'checking', aborts: true } } },
      },
    },
    // Pulled by digest, so a stale local tag cannot win (rig.md).
    pulling: {
      after: { hungTimeout: { target: 'aborted', actions: { type: 'stepFailed', params: { step: 'pulling', aborts: true, hung: true } } } },
      invoke: {
        id: 'pullTarget',
        src: 'pullTarget',
        input: ({ context }) => ({ target: context.target! }),
        onDone: { target: 'fetchingCompose', actions: assign({ targetImageId: ({ event }) => event.output }) },
        onError: { target: 'aborted', actions: { type: 'stepFailed', params: { step: 'pulling', aborts: true } } },
      },
    },
    // The published compose file: PUBLISHED_COMPOSE_URL, else the one the pulled target image ships.
    fetchingCompose: {
      after: { hungTimeout: { target: 'aborted', actions: { type: 'stepFailed', params: { step: 'fetchingCompose', aborts: true, hung: true } } } },
      invoke: {
        id: 'fetchPublishedCompose',
        src: 'fetchPublishedCompose',
        input: ({ context }) => ({ target: context.target!, imageId: context.targetImageId! }),
        onDone: { target: 'backingUp', actions: assign({ composeFile: ({ event }) => event.output }) },
        onError: { target: 'aborted', actions: { type: 'stepFailed', params: { step: 'fetchingCompose', aborts: true } } },
      },
    },
    // The database backup, before anything is changed: a failed dump aborts with nothing to undo
    // (docs/adr/0032-backup-before-the-switch.md).
    backingUp: {
      after: { hungTimeout: { target: 'aborted', actions: { type: 'stepFailed', params: { step: 'backingUp', aborts: true, hung: true } } } },
      invoke: {
        id: 'backupDatabase',
        src: 'backupDatabase',
        input: ({ context }) => ({ running: context.running!, target: context.target! }),
        onDone: { target: 'taggingRollback', actions: assign({ backup: ({ event }) => event.output }) },
        onError: { target: 'aborted', actions: { type: 'stepFailed', params: { step: 'backingUp', aborts: true, why: 'the database backup failed: ' } } },
      },
    },
    // From here on every step records what it replaced; a failure goes through `undoing`.
    taggingRollback: {
      after: { hungTimeout: { target: 'undoing', actions: { type: 'stepFailed', params: { step: 'taggingRollback', hung: true } } } },
      invoke: {
        id: 'tagRollback',
        src: 'tagRollback',
        input: ({ context }) => ({ running: context.running! }),
        onDone: { target: 'staging', actions: { type: 'changed', params: { key: 'rollbackTag' } } },
        onError: { target: 'undoing', actions: { type: 'stepFailed', params: { step: 'taggingRollback' } } },
      },
    },
    staging: {
      after: { hungTimeout: { target: 'undoing', actions: { type: 'stepFailed', params: { step: 'staging', hung: true } } } },
      invoke: {
        id: 'stageComposeFile',
        src: 'stageComposeFile',
        input: ({ context }) => ({ content: context.composeFile! }),
        onDone: { target: 'taggingNew', actions: { type: 'changed', params: { key: 'stagedFile' } } },
        onError: { target: 'undoing', actions: { type: 'stepFailed', params: { step: 'staging' } } },
      },
    },
    taggingNew: {
      after: { hungTimeout: { target: 'undoing', actions: { type: 'stepFailed', params: { step: 'taggingNew', hung: true } } } },
      invoke: {
        id: 'tagNew',
        src: 'tagNew',
        input: ({ context }) => ({ target: context.target!, imageId: context.targetImageId! }),
        onDone: { target: 'recording', actions: { type: 'changed', params: { key: 'newTag' } } },
        onError: { target: 'undoing', actions: { type: 'stepFailed', params: { step: 'taggingNew' } } },
      },
    },
    // The audit row: target digest, current schema migration (preUpdateMigration), previous digest.
    recording: {
      after: { hungTimeout: { target: 'undoing', actions: { type: 'stepFailed', params: { step: 'recording', hung: true } } } },
      invoke: {
        id: 'recordAction',
        src: 'recordAction',
        input: ({ context }) => ({ running: context.running!, target: context.target!, targetImageId: context.targetImageId }),
        onDone: {
          target: 'removingLeftover',
          actions: assign({ actionId: ({ event }) => event.output.actionId, preUpdateMigration: ({ event }) => event.output.preUpdateMigration }),
        },
        onError: { target: 'undoing', actions: { type: 'stepFailed', params: { step: 'recording' } } },
      },
    },
    removingLeftover: {
      after: { hungTimeout: { target: 'undoing', actions: { type: 'stepFailed', params: { step: 'removingLeftover', hung: true } } } },
      invoke: {
        id: 'removeLeftoverHelper',
        src: 'removeLeftoverHelper',
        onDone: 'spawning',
        onError: { target: 'undoing', actions: { type: 'stepFailed', params: { step: 'removingLeftover' } } },
      },
    },
    spawning: {
      after: { hungTimeout: { target: 'undoing', actions: { type: 'stepFailed', params: { step: 'spawning', hung: true } } } },
      invoke: {
        id: 'spawnHelper',
        src: 'spawnHelper',
        input: ({ context }) => ({ target: context.target! }),
        onDone: { target: 'helperRunning', actions: assign({ helperId: ({ event }) => event.output }) },
        onError: { target: 'undoing', actions: { type: 'stepFailed', params: { step: 'spawning' } } },
      },
    },
    undoing: {
      after: { hungTimeout: { target: 'aborted', actions: { type: 'undone', params: { failed: 'hung' } } } },
      invoke: {
        id: 'undoPreflight',
        src: 'undoPreflight',
        input: ({ context }) => ({ changes: context.changes, target: context.target, actionId: context.actionId, detail: context.detail }),
        onDone: { target: 'aborted', actions: { type: 'undone', params: {} } },
        onError: { target: 'aborted', actions: { type: 'undone', params: { failed: 'error' } } },
      },
    },
    unresolved: { type: 'final', output: ({ context }): SelfUpdateOutput => ({ phase: 'unresolved', detail: `the target digest cannot be resolved: ${context.detail ?? 'unknown error'}` }) },
    newest: {
      type: 'final',
      output: ({ context }): SelfUpdateOutput => ({ phase: 'newest', target: context.target!, detail: `already on the newest build of channel ${context.target!.channel} (${context.target!.digest})` }),
    },
    aborted: { type: 'final', output: ({ context }) => abortedOutput(context) },
    helperRunning: {
      type: 'final',
      output: ({ context }): SelfUpdateOutput => ({ phase: 'helper-running', target: context.target!, helperId: context.helperId!, preUpdateMigration: context.preUpdateMigration }),
    },
  },
});

/** The request phase a state of the chart stands for. */
export function phaseOfState(state: string): 'preflight' | 'unresolved' | 'newest' | 'aborted' | 'helper-running' {
  switch (state) {
    case 'unresolved': return 'unresolved';
    case 'newest': return 'newest';
    case 'aborted': return 'aborted';
    case 'helperRunning': return 'helper-running';
    default: return 'preflight';
  }
}

/** The detail of an aborted preflight, as the API and the status row report it. */
export function abortDetail(ctx: Pick<SelfUpdateContext, 'failedStep' | 'detail' | 'undoFailed'>): string {
  const step = ctx.failedStep ? `${ctx.failedStep}: ` : '';
  if (ctx.undoFailed) return `${step}${ctx.detail ?? 'failed'}; undoing the preflight failed too (${ctx.undoFailed}): check the rollback tag and the staged compose file`;
  return `${step}${ctx.detail ?? 'failed'}; nothing was changed`;
}

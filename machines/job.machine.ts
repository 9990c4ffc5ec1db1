// The life of one platform job: prepare (a deploy fetches templates and renders .env), then run
// its compose steps one by one; in every waiting state output resets the hung guard, a cancel stops
// the work. The exit code is the one of the step that ended the job: null when no process ended it.
import { assign, fromCallback, setup, type EventObject } from 'xstate';

export const JOB_CHART_VERSION = '2';

export interface JobInput {
  steps: readonly string[];
  /** A deploy first fetches templates and renders the platform .env. */
  needsPrepare: boolean;
  hungMinutes: number;
}

export interface JobContext {
  steps: readonly string[];
  stepIndex: number;
  needsPrepare: boolean;
  hungMinutes: number;
  exitCode: number | null;
  detail: string | null;
}

export type JobEvent =
  | { type: 'PREPARED' }
  | { type: 'PREPARE_FAILED'; message: string }
  | { type: 'OUTPUT' }
  | { type: 'STEP_DONE'; exitCode: number }
  /** The step could not do its work; `exitCode` when its process did end (with that code). */
  | { type: 'STEP_FAILED'; message: string; exitCode?: number }
  | { type: 'CANCEL'; by: string };

export interface StepInput {
  step: string;
  index: number;
}

export const hungMessage = (minutes: number) => `No output for ${minutes} minutes — aborted as hung`;

export type JobOutcomeState = 'completed' | 'failed' | 'hung' | 'cancelled';

/** How a job's chart ended (the output of its final states, this chart's and the host migration's). */
export interface JobChartOutput {
  state: JobOutcomeState;
  detail: string | null;
  exitCode: number | null;
}

/** The output of the final state `state`: the detail and exit code the chart holds. */
export const endIn = (state: JobOutcomeState) => ({ context }: { context: { detail: string | null; exitCode: number | null } }): JobChartOutput => ({
  state, detail: context.detail, exitCode: context.exitCode,
});

const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e));

export const jobMachine = setup({
  types: {
    context: {} as JobContext,
    events: {} as JobEvent,
    input: {} as JobInput,
    output: {} as JobChartOutput,
  },
  actors: {
    // Implemented by the jobs controller; they report back with PREPARED / PREPARE_FAILED,
    // OUTPUT, STEP_DONE / STEP_FAILED. Leaving the state stops them (kills the process).
    prepare: fromCallback<EventObject, Record<string, never>>(() => {}),
    runStep: fromCallback<EventObject, StepInput>(() => {}),
  },
  guards: {
    needsPrepare: ({ context }) => context.needsPrepare,
    stepFailed: ({ event }) => event.type === 'STEP_DONE' && event.exitCode !== 0,
    moreSteps: ({ context }) => context.stepIndex + 1 < context.steps.length,
  },
  actions: {
    // The spec's message, from every state that waits on work and stops hearing from it.
    markHung: assign({ detail: ({ context }) => hungMessage(context.hungMinutes) }),
  },
  delays: {
    hungTimeout: ({ context }) => context.hungMinutes * 60_000,
  },
}).createMachine({
  id: 'job',
  context: ({ input }) => ({
    steps: input.steps,
    stepIndex: 0,
    needsPrepare: input.needsPrepare,
    hungMinutes: input.hungMinutes,
    exitCode: null,
    detail: null,
  }),
  initial: 'starting',
  // The final state's output, as the chart's.
  output: ({ event }) => event.output as JobChartOutput,
  states: {
    starting: {
      always: [{ guard: 'needsPrepare', target: 'preparing' }, { target: 'running' }],
    },
    preparing: {
      invoke: {
        id: 'prepare',
        src: 'prepare',
        input: () => ({}),
        onError: { target: 'failed', actions: assign({ detail: ({ event }) => errorText(event.error) }) },
      },
      // Preparing waits on work too (a template download can stall): the same hung guard.
      initial: 'watching',
      states: {
        watching: {
          after: { hungTimeout: { target: '#job.hung', actions: 'markHung' } },
          on: { OUTPUT: { target: 'watching', reenter: true } },
        },
      },
      on: {
        PREPARED: 'running',
        PREPARE_FAILED: { target: 'failed', actions: assign({ detail: ({ event }) => event.message }) },
        CANCEL: { target: 'cancelled', actions: assign({ detail: ({ event }) => `cancelled by ${event.by}` }) },
      },
    },
    running: {
      // Each step starts without an exit code: a cancel, the hung guard or a step that cannot run
      // ends the job with null, never with the 0 of the step before.
      entry: assign({ exitCode: null }),
      invoke: {
        id: 'runStep',
        src: 'runStep',
        input: ({ context }) => ({ step: context.steps[context.stepIndex]!, index: context.stepIndex }),
        onError: { target: 'failed', actions: assign({ detail: ({ event }) => errorText(event.error) }) },
      },
      initial: 'watching',
      states: {
        // Re-entered on every output line, which restarts the hung timer.
        watching: {
          after: { hungTimeout: { target: '#job.hung', actions: 'markHung' } },
          on: { OUTPUT: { target: 'watching', reenter: true } },
        },
      },
      on: {
        STEP_DONE: [
          {
            guard: 'stepFailed',
            target: 'failed',
            actions: assign({
              exitCode: ({ event }) => event.exitCode,
              detail: ({ context, event }) => `${context.steps[context.stepIndex]} exited with code ${event.exitCode}`,
            }),
          },
          {
            guard: 'moreSteps',
            target: 'running',
            reenter: true,
            actions: assign({ stepIndex: ({ context }) => context.stepIndex + 1, exitCode: ({ event }) => event.exitCode }),
          },
          { target: 'completed', actions: assign({ exitCode: ({ event }) => event.exitCode }) },
        ],
        STEP_FAILED: { target: 'failed', actions: assign({ detail: ({ event }) => event.message, exitCode: ({ event }) => event.exitCode ?? null }) },
        CANCEL: { target: 'cancelled', actions: assign({ detail: ({ event }) => `cancelled by ${event.by}` }) },
      },
    },
    completed: { type: 'final', output: endIn('completed') },
    failed: { type: 'final', output: endIn('failed') },
    hung: { type: 'final', output: endIn('hung') },
    cancelled: { type: 'final', output: endIn('cancelled') },
  },
});

/** The stored job phase for a final chart state: only `completed` is a success. */
export function phaseOf(state: JobOutcomeState): 'completed' | 'failed' {
  return state === 'completed' ? 'completed' : 'failed';
}

// The host migration job: copy the bundled migrate-host.sh to the host, then run it in the host's
// namespaces from a short-lived privileged container; in both waiting states output resets the hung
// guard. The exit code is that of the step that failed (the copy's container, or the script's):
// null when the job ends without a process ending.
import { assign, fromCallback, setup, type EventObject } from 'xstate';
import { endIn, hungMessage, type JobChartOutput } from './job.machine.ts';

export const HOST_MIGRATION_CHART_VERSION = '2';

export interface HostMigrationInput {
  hungMinutes: number;
}

export interface HostMigrationContext {
  hungMinutes: number;
  exitCode: number | null;
  detail: string | null;
}

export type HostMigrationEvent =
  | { type: 'COPIED' }
  /** exitCode: the copy container's, when it ran and failed; absent when it could not run. */
  | { type: 'COPY_FAILED'; message: string; exitCode?: number }
  | { type: 'OUTPUT' }
  | { type: 'EXITED'; exitCode: number }
  | { type: 'RUN_FAILED'; message: string }
  | { type: 'CANCEL'; by: string };

const errorText = (e: unknown) => (e instanceof Error ? e.message : String(e));

export const hostMigrationMachine = setup({
  types: {
    context: {} as HostMigrationContext,
    events: {} as HostMigrationEvent,
    input: {} as HostMigrationInput,
    output: {} as JobChartOutput,
  },
  actors: {
    // Implemented by the jobs controller with the host runner adapter.
    copyScript: fromCallback<EventObject, Record<string, never>>(() => {}),
    runScript: fromCallback<EventObject, Record<string, never>>(() => {}),
  },
  guards: {
    succeeded: ({ event }) => event.type === 'EXITED' && event.exitCode === 0,
  },
  actions: {
    // The spec's message, from every state that waits on work and stops hearing from it.
    markHung: assign({ detail: ({ context }) => hungMessage(context.hungMinutes) }),
  },
  delays: {
    hungTimeout: ({ context }) => context.hungMinutes * 60_000,
  },
}).createMachine({
  id: 'hostMigration',
  context: ({ input }) => ({ hungMinutes: input.hungMinutes, exitCode: null, detail: null }),
  initial: 'copying',
  // The final state's output, as the chart's.
  output: ({ event }) => event.output as JobChartOutput,
  states: {
    copying: {
      invoke: {
        id: 'copyScript',
        src: 'copyScript',
        input: () => ({}),
        onError: { target: 'failed', actions: assign({ detail: ({ event }) => errorText(event.error) }) },
      },
      // Copying runs a container too, and can stall: the same hung guard as the script's run.
      initial: 'watching',
      states: {
        watching: {
          after: { hungTimeout: { target: '#hostMigration.hung', actions: 'markHung' } },
          on: { OUTPUT: { target: 'watching', reenter: true } },
        },
      },
      on: {
        COPIED: 'running',
        COPY_FAILED: { target: 'failed', actions: assign({ detail: ({ event }) => event.message, exitCode: ({ event }) => event.exitCode ?? null }) },
        CANCEL: { target: 'cancelled', actions: assign({ detail: ({ event }) => `cancelled by ${event.by}` }) },
      },
    },
    running: {
      invoke: {
        id: 'runScript',
        src: 'runScript',
        input: () => ({}),
        onError: { target: 'failed', actions: assign({ detail: ({ event }) => errorText(event.error) }) },
      },
      initial: 'watching',
      states: {
        watching: {
          after: { hungTimeout: { target: '#hostMigration.hung', actions: 'markHung' } },
          on: { OUTPUT: { target: 'watching', reenter: true } },
        },
      },
      on: {
        EXITED: [
          { guard: 'succeeded', target: 'completed', actions: assign({ exitCode: 0 }) },
          {
            target: 'failed',
            actions: assign({
              exitCode: ({ event }) => event.exitCode,
              detail: ({ event }) => `migrate-host.sh exited with code ${event.exitCode}`,
            }),
          },
        ],
        RUN_FAILED: { target: 'failed', actions: assign({ detail: ({ event }) => event.message }) },
        CANCEL: { target: 'cancelled', actions: assign({ detail: ({ event }) => `cancelled by ${event.by}` }) },
      },
    },
    completed: { type: 'final', output: endIn('completed') },
    failed: { type: 'final', output: endIn('failed') },
    hung: { type: 'final', output: endIn('hung') },
    cancelled: { type: 'final', output: endIn('cancelled') },
  },
});

// Running one state chart for one piece of work: the actor, its snapshot persisted after each
// transition (in order, one write at a time), and the end awaited. Every reconciler that drives a
// chart goes through here, so "the stored snapshot is the chart's state" holds the same way for all.
import { createActor, type AnyStateMachine, type SnapshotFrom } from 'xstate';

/**
 * Writes in the order they were asked for, one at a time. A failed write does not hold up later
 * ones: `add` hands its failure to the caller, `queue` to `onError`.
 */
export class OrderedWrites {
  private chain: Promise<unknown> = Promise.resolve();

  constructor(private readonly onError: (err: unknown) => void) {}

  /** A write whose failure the caller handles (it must await or catch the result). */
  add(write: () => Promise<unknown>): Promise<void> {
    const done = this.chain.then(write).then(() => undefined);
    this.chain = done.catch(() => {});
    return done;
  }

  /** A write whose failure is only reported. */
  queue(write: () => Promise<unknown>): void {
    this.chain = this.chain.then(write).catch(this.onError);
  }

  /** Resolves once every write asked for so far has ended. */
  async flush(): Promise<void> {
    await this.chain;
  }
}

export interface RunningChart {
  send(event: { type: string; [key: string]: unknown }): void;
}

export interface ChartRun<M extends AnyStateMachine> {
  machine: M;
  input: unknown;
  /**
   * Stores the persisted snapshot; called after each transition that changes the state value, with
   * the snapshot it was taken from (typed, to read the state and context from).
   */
  persist(snapshot: unknown, state: SnapshotFrom<M>): Promise<unknown>;
  /** Where persist writes go; pass one to order other writes (made by the chart's actors) with them. */
  writes: OrderedWrites;
  /** Stops the chart (the process is shutting down): the result then says `stopped`. */
  signal?: AbortSignal;
  /** The chart threw: reported, and the run ends as if the chart had stopped. */
  onChartError(err: unknown): void;
  /**
   * Whether to wait for the persist writes before resolving (default true). A caller that records
   * the end itself may start that write at once and flush `writes` after it.
   */
  awaitWrites?: boolean;
  /** Called once the actor has started, with a handle to send it events. */
  started?(actor: RunningChart): void | Promise<void>;
}

export interface ChartResult<M extends AnyStateMachine> {
  snapshot: SnapshotFrom<M>;
  /** What persist would store for the final state. */
  persisted: unknown;
  /** The run was stopped through `signal` before the chart ended. */
  stopped: boolean;
}

/** Runs the chart to its end (or until `signal` aborts); every persist write has ended when it resolves, unless `awaitWrites` is false. */
export async function runChart<M extends AnyStateMachine>(run: ChartRun<M>): Promise<ChartResult<M>> {
  const actor = createActor(run.machine as AnyStateMachine, { input: run.input });
  let lastValue: string | undefined;
  let finish!: () => void;
  const done = new Promise<void>((resolve) => (finish = resolve));
  let stopped = false;
  const stop = () => {
    stopped = true;
    actor.stop();
    finish();
  };
  actor.subscribe({
    next: (snap) => {
      const value = JSON.stringify((snap as { value: unknown }).value);
      if (value === lastValue) return;
      lastValue = value;
      const persisted = actor.getPersistedSnapshot();
      run.writes.queue(() => run.persist(persisted, snap as SnapshotFrom<M>));
    },
    complete: finish,
    error: (err) => {
      run.onChartError(err);
      finish();
    },
  });
  if (run.signal?.aborted) stop();
  else run.signal?.addEventListener('abort', stop, { once: true });
  if (!stopped) {
    actor.start();
    await run.started?.(actor as unknown as RunningChart);
  }
  await done;
  run.signal?.removeEventListener('abort', stop);
  if (run.awaitWrites !== false) await run.writes.flush();
  return { snapshot: actor.getSnapshot() as SnapshotFrom<M>, persisted: actor.getPersistedSnapshot(), stopped };
}

// Polling that rests in a hidden tab: nothing is requested while `document.visibilityState` is
// `hidden`, and the data is loaded again at once when the tab is shown.

export interface PageVisibility {
  hidden(): boolean;
  /** Calls `fn` on every change; returns the unsubscribe. */
  onChange(fn: () => void): () => void;
}

export const documentVisibility: PageVisibility = {
  hidden: () => typeof document !== 'undefined' && document.visibilityState === 'hidden',
  onChange(fn) {
    if (typeof document === 'undefined') return () => {};
    document.addEventListener('visibilitychange', fn);
    return () => document.removeEventListener('visibilitychange', fn);
  },
};

/**
 * Runs `run` now, then `everyMs` after each run ends, while the page is visible. Hiding the tab
 * cancels the next run; showing it runs at once and resumes the rhythm. `run` resolving to `false`
 * ends the polling (a job that has finished, say). `everyMs` <= 0 runs once. Returns the stop.
 */
export function whilePageVisible(run: () => Promise<unknown>, everyMs: number, visibility: PageVisibility = documentVisibility): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let stopped = false;
  let running = false;
  /** A run was skipped or cancelled because the page was hidden. */
  let owed = false;
  let unsubscribe = () => {};

  const stop = () => {
    stopped = true;
    clearTimeout(timer);
    timer = undefined;
    unsubscribe();
  };

  const tick = async () => {
    timer = undefined;
    if (stopped) return;
    if (visibility.hidden()) {
      owed = true;
      return;
    }
    running = true;
    let more: unknown;
    try {
      more = await run();
    } catch {
      // `run` reports its own errors; the rhythm goes on.
    } finally {
      running = false;
    }
    if (stopped) return;
    if (more === false) return stop();
    if (visibility.hidden()) owed = true;
    else timer = setTimeout(() => void tick(), everyMs);
  };

  if (everyMs <= 0) {
    void run();
    return () => {
      stopped = true;
    };
  }
  unsubscribe = visibility.onChange(() => {
    if (stopped) return;
    if (visibility.hidden()) {
      if (timer !== undefined) {
        clearTimeout(timer);
        timer = undefined;
        owed = true;
      }
    } else if (owed && !running) {
      owed = false;
      void tick();
    }
  });
  void tick();
  return stop;
}

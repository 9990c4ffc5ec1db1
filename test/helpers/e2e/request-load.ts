// A steady request load that records every answer, and the percentiles of what it measured.

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface Answer {
  path: string;
  /** Milliseconds since the load started, when the request was sent. */
  at: number;
  ms: number;
  /** 0: no HTTP answer at all (connection failure or the client's own timeout). */
  status: number;
  body: unknown;
  error?: string;
}

export interface Load {
  answers: Answer[];
  /** Milliseconds since the load started. */
  now(): number;
  stop(): Promise<void>;
}

/**
 * A steady load: `workers` loops, worker w sending path w mod paths.length again and again with the
 * headers, `pauseMs` apart (so a path whose requests wait never holds up the others). A request
 * gets `clientTimeoutMs` before it counts as hung.
 */
export function startLoad(base: string, paths: string[], headers: Record<string, string>, opts: { workers?: number; pauseMs?: number; clientTimeoutMs?: number } = {}): Load {
  const answers: Answer[] = [];
  const t0 = Date.now();
  let stopped = false;
  const worker = async (w: number) => {
    const path = paths[w % paths.length]!;
    while (!stopped) {
      const at = Date.now() - t0;
      try {
        const res = await fetch(`${base}${path}`, { headers, signal: AbortSignal.timeout(opts.clientTimeoutMs ?? 20_000) });
        const text = await res.text();
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          /* not JSON: kept as text */
        }
        answers.push({ path, at, ms: Date.now() - t0 - at, status: res.status, body });
      } catch (err) {
        answers.push({ path, at, ms: Date.now() - t0 - at, status: 0, body: null, error: (err as Error).message });
      }
      await sleep(opts.pauseMs ?? 25);
    }
  };
  const running = Array.from({ length: opts.workers ?? 8 }, (_, w) => worker(w));
  return {
    answers,
    now: () => Date.now() - t0,
    async stop() {
      stopped = true;
      await Promise.all(running);
    },
  };
}

export const percentile = (xs: number[], p: number) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};

// The one way tests wait for something another process or a timer brings about: poll until the
// function returns a truthy value, or fail naming what never came (with the last error, if any).

type Falsy = undefined | null | false | 0 | '';

/** Polls `fn` every `everyMs` until it returns a truthy value and returns it; throws after `timeoutMs`. */
export async function eventually<T>(fn: () => Promise<T | Falsy> | T | Falsy, what: string, timeoutMs = 10_000, everyMs = 50): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v as T;
    } catch (err) {
      last = err;
    }
    if (Date.now() > until) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

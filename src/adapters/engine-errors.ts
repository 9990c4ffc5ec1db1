// What the engine says went wrong, as readable text, and its HTTP status (dockerode's errors),
// registry answers it passes on among them.

/** The engine's own message for a failed request (its JSON `message`), else the error's. */
export const engineMessage = (err: unknown): string => {
  const e = err as { json?: { message?: string }; reason?: string; message?: string; statusCode?: number };
  return e.json?.message ?? e.message ?? String(err);
};

/** The HTTP status of a failed engine request, if it got that far. */
export const statusOf = (err: unknown) => (err as { statusCode?: number }).statusCode;

/** The registry's "no such repository or tag", as the engine passes it on (404, or 401 "repository does not exist"). */
export const isNotFound = (err: unknown): boolean =>
  statusOf(err) === 404 || /manifest unknown|name unknown|repository does not exist|not found: manifest/i.test(engineMessage(err));

/**
 * The engine quotes what a broken registry sent ("malformed HTTP response \"<bytes>\""): the bytes
 * are dropped, anything unprintable is replaced and the message is capped, so it stays readable.
 */
export function registryMessage(message: string): string {
  const text = message
    .replace(/(malformed (?:HTTP [a-z ]+|MIME header line)) ".*"/s, '$1 (the answer is not HTTP)')
    .replace(/[^\x20-\x7e]/g, '?');
  return text.length > 300 ? `${text.slice(0, 300)}...` : text;
}

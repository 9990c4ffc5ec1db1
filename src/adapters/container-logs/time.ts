// Timestamps of container logs: the engine's RFC 3339 form, epoch nanoseconds, and the engine's
// `since`/`until` form. The engine writes RFC 3339 with exactly nine fraction digits in UTC; such
// strings compare correctly as strings, which is what every merge of the adapter does.

const FIXED_TS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z$/;
const ANY_TS = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/;
export const NS_PER_MS = 1_000_000n;
const NS_PER_S = 1_000_000_000n;

/** Epoch nanoseconds of an engine timestamp (RFC 3339, any offset, up to nine fraction digits). */
export function timestampToNs(ts: string): bigint {
  const m = ANY_TS.exec(ts);
  if (!m) throw new Error(`not an engine timestamp: ${ts}`);
  const ms = Date.parse(`${m[1]}${m[3]}`);
  if (Number.isNaN(ms)) throw new Error(`not an engine timestamp: ${ts}`);
  return BigInt(ms) * NS_PER_MS + BigInt((m[2] ?? '').padEnd(9, '0'));
}

/** `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` for epoch nanoseconds. */
export function nsToTimestamp(ns: bigint): string {
  const ms = ns / NS_PER_MS;
  const iso = new Date(Number(ms)).toISOString(); // …SS.mmmZ
  const frac = (((ns % NS_PER_S) + NS_PER_S) % NS_PER_S).toString().padStart(9, '0');
  return `${iso.slice(0, 19)}.${frac}Z`;
}

export function normalizeTimestamp(ts: string): string {
  return FIXED_TS.test(ts) ? ts : nsToTimestamp(timestampToNs(ts));
}

/** The engine's `since`/`until` form: seconds and nanoseconds since the epoch. */
export function engineTime(ns: bigint): string {
  const s = ns / NS_PER_S;
  return `${s}.${(ns % NS_PER_S).toString().padStart(9, '0')}`;
}

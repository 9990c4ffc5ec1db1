// Log timestamps (RFC 3339, UTC, up to nanoseconds) as the viewer shows them.

const p2 = (n: number) => String(n).padStart(2, '0');

/** `HH:MM:SS.mmm` of a timestamp, in UTC or in the browser's time zone; the text as is when it is not one. */
export function formatTime(ts: string, utc: boolean): string {
  const m = /^(\d{4}-\d{2}-\d{2}T(\d{2}:\d{2}:\d{2}))(?:[.,](\d+))?Z$/i.exec(ts);
  if (!m) return ts;
  const ms = (m[3] ?? '').slice(0, 3).padEnd(3, '0');
  if (utc) return `${m[2]}.${ms}`;
  const d = new Date(`${m[1]}.${ms}Z`);
  if (Number.isNaN(d.getTime())) return ts;
  return `${p2(d.getHours())}:${p2(d.getMinutes())}:${p2(d.getSeconds())}.${ms}`;
}

/** The browser's offset from UTC now, e.g. `UTC+05:30`. */
export function zoneName(): string {
  const off = -new Date().getTimezoneOffset();
  return `UTC${off < 0 ? '−' : '+'}${p2(Math.floor(Math.abs(off) / 60))}:${p2(Math.abs(off) % 60)}`;
}

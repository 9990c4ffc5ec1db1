// CSV as RFC 4180 writes it (CRLF line ends, fields quoted when they hold a quote, a comma or a line
// break), with a guard against formula injection for files opened in a spreadsheet
// (docs/adr/0021-audit-filters-and-export.md).

/** A text cell a spreadsheet would read as a formula: it starts with = + - @, a tab or a carriage return. */
const FORMULA = /^[=+\-@\t\r]/;

/**
 * One field. Text that a spreadsheet would run as a formula gets a leading apostrophe (shown as
 * text, not evaluated); numbers are written as they are, so a negative exit code stays a number.
 */
export function csvField(value: string | number | null | undefined): string {
  if (value === null || value === undefined) return '';
  if (typeof value === 'number') return String(value);
  const text = FORMULA.test(value) ? `'${value}` : value;
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** One record, CRLF-terminated. */
export function csvLine(values: readonly (string | number | null | undefined)[]): string {
  return `${values.map(csvField).join(',')}\r\n`;
}

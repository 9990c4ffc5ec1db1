// Placing a chart's state value on its drawn graph: shared by the state repositories that read
// stored snapshots and by the UI's contract (GET /api/machines).

/** Active node ids for a state value (`'running'`, `{ running: 'watching' }`), outermost first. */
export function activeIds(rootId: string, value: unknown): string[] {
  const out: string[] = [];
  const visit = (prefix: string, v: unknown) => {
    if (typeof v === 'string') {
      out.push(`${prefix}.${v}`);
      return;
    }
    if (v && typeof v === 'object') {
      for (const [k, child] of Object.entries(v as Record<string, unknown>)) {
        out.push(`${prefix}.${k}`);
        visit(`${prefix}.${k}`, child);
      }
    }
  };
  visit(rootId, value);
  return out;
}

/** `{ running: 'watching' }` → `running.watching`. */
export function valueText(value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value === 'string') return value;
  const entries = Object.entries(value as Record<string, unknown>);
  return entries.map(([k, v]) => (v && (typeof v === 'string' || Object.keys(v as object).length) ? `${k}.${valueText(v)}` : k)).join(', ');
}


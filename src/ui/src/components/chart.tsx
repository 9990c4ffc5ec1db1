// Draws a state chart (the flattened toDirectedGraph of GET /api/machines) as an SVG: top-level
// states in rows by distance from the initial state, child states inside their parent, and the
// current state highlighted together with the transitions that leave it.
import type { Chart, ChartEdge, ChartNode } from '../api.ts';

const ROW_GAP = 56;
const COL_GAP = 28;
const NODE_H = 34;
const CHILD_H = 24;
const PAD = 24;
const CHAR_W = 7.2;

interface Box {
  node: ChartNode;
  children: ChartNode[];
  loops: string[];
  rank: number;
  x: number;
  y: number;
  w: number;
  h: number;
}

interface Link {
  source: string;
  target: string;
  labels: string[];
}

export interface Layout {
  width: number;
  height: number;
  boxes: Map<string, Box>;
  links: Link[];
}

export function layoutChart(chart: Chart): Layout {
  const byId = new Map(chart.nodes.map((n) => [n.id, n]));
  const root = byId.get(chart.rootId)!;
  const tops = chart.nodes.filter((n) => n.parent === chart.rootId);
  const topOf = (id: string): string => {
    let n = byId.get(id);
    while (n && n.parent && n.parent !== chart.rootId) n = byId.get(n.parent);
    return n?.id ?? id;
  };
  const boxes = new Map<string, Box>();
  for (const n of tops) {
    const children = chart.nodes.filter((c) => c.parent && c.parent !== chart.rootId && topOf(c.id) === n.id);
    const w = Math.max(96, Math.ceil(n.key.length * CHAR_W) + 28, ...children.map((c) => Math.ceil(c.key.length * CHAR_W) + 44));
    boxes.set(n.id, { node: n, children, loops: [], rank: -1, x: 0, y: 0, w, h: NODE_H + (children.length ? children.length * CHILD_H + 8 : 0) });
  }
  const linkMap = new Map<string, Link>();
  for (const e of chart.edges) {
    const s = topOf(e.source);
    const t = topOf(e.target);
    if (!boxes.has(s) || !boxes.has(t)) continue;
    if (s === t) {
      const b = boxes.get(s)!;
      if (!b.loops.includes(e.label)) b.loops.push(e.label);
      continue;
    }
    const key = `${s}→${t}`;
    const l = linkMap.get(key) ?? { source: s, target: t, labels: [] };
    if (!l.labels.includes(e.label)) l.labels.push(e.label);
    linkMap.set(key, l);
  }
  for (const b of boxes.values()) if (b.loops.length) b.h += 18;
  const links = [...linkMap.values()];

  // Rank: the longest path from the initial state once the edges that lead back (found by a
  // depth-first walk) are set aside, so every forward transition points down.
  const start = root.initial ?? tops[0]?.id;
  const back = new Set<Link>();
  const seen = new Set<string>();
  const onStack = new Set<string>();
  const order: string[] = [];
  const dfs = (id: string) => {
    seen.add(id);
    onStack.add(id);
    for (const l of links) {
      if (l.source !== id) continue;
      if (onStack.has(l.target)) back.add(l);
      else if (!seen.has(l.target)) dfs(l.target);
    }
    onStack.delete(id);
    order.push(id);
  };
  if (start && boxes.has(start)) dfs(start);
  for (const id of boxes.keys()) if (!seen.has(id)) dfs(id);
  order.reverse(); // a topological order of the forward edges
  for (const id of order) {
    const b = boxes.get(id)!;
    const preds = links.filter((l) => l.target === id && !back.has(l)).map((l) => boxes.get(l.source)!.rank);
    b.rank = preds.length ? Math.max(...preds) + 1 : 0;
  }

  // Rows, ordered by where their predecessors sit (one barycentre pass), then placed centred.
  const rows: Box[][] = [];
  for (const b of boxes.values()) (rows[b.rank] ??= []).push(b);
  const widthOf = (row: Box[]) => row.reduce((a, b) => a + b.w, 0) + COL_GAP * (row.length - 1);
  const width = Math.max(...rows.filter(Boolean).map(widthOf)) + PAD * 2 + 140;
  let y = PAD;
  for (const row of rows) {
    if (!row) continue;
    const centre = (b: Box) => {
      const preds = links.filter((l) => l.target === b.node.id).map((l) => boxes.get(l.source)!).filter((p) => p.rank < b.rank);
      return preds.length ? preds.reduce((a, p) => a + p.x + p.w / 2, 0) / preds.length : width / 2;
    };
    const order = row.map((b, i) => ({ b, c: centre(b), i }));
    order.sort((a, z) => a.c - z.c || a.i - z.i);
    let x = (width - 140 - widthOf(row)) / 2;
    const h = Math.max(...row.map((b) => b.h));
    for (const { b } of order) {
      b.x = x;
      b.y = y;
      x += b.w + COL_GAP;
    }
    row.splice(0, row.length, ...order.map((o) => o.b));
    y += h + ROW_GAP;
  }
  return { width, height: y - ROW_GAP + PAD, boxes, links };
}

function path(s: Box, t: Box, boxes: Map<string, Box>): string {
  if (t.rank > s.rank + 1) {
    // Past the rows in between: around their side, not through their states.
    const between = [...boxes.values()].filter((b) => b.rank > s.rank && b.rank < t.rank);
    const x1 = s.x + s.w / 2;
    const y1 = s.y + s.h;
    const x2 = t.x + t.w / 2;
    const y2 = t.y;
    const right = x2 >= x1;
    const side = right ? Math.max(...between.map((b) => b.x + b.w)) + 22 : Math.min(...between.map((b) => b.x)) - 22;
    const top = Math.min(...between.map((b) => b.y));
    const bottom = Math.max(...between.map((b) => b.y + b.h));
    return `M${x1},${y1} C${x1},${top} ${side},${y1} ${side},${top} L${side},${bottom} C${side},${y2} ${x2},${bottom} ${x2},${y2}`;
  }
  if (t.rank > s.rank) {
    const x1 = s.x + s.w / 2;
    const y1 = s.y + s.h;
    const x2 = t.x + t.w / 2;
    const y2 = t.y;
    const dy = (y2 - y1) / 2;
    return `M${x1},${y1} C${x1},${y1 + dy} ${x2},${y2 - dy} ${x2},${y2}`;
  }
  if (t.rank === s.rank) {
    const right = t.x > s.x;
    const x1 = right ? s.x + s.w : s.x;
    const x2 = right ? t.x : t.x + t.w;
    const y1 = s.y + NODE_H / 2;
    const y2 = t.y + NODE_H / 2;
    return `M${x1},${y1} C${(x1 + x2) / 2},${y1 - 26} ${(x1 + x2) / 2},${y2 - 26} ${x2},${y2}`;
  }
  // Back up: around the right-hand side.
  const x1 = s.x + s.w;
  const y1 = s.y + NODE_H / 2;
  const x2 = t.x + t.w;
  const y2 = t.y + NODE_H / 2;
  const bulge = Math.max(x1, x2) + 40 + 12 * (s.rank - t.rank);
  return `M${x1},${y1} C${bulge},${y1} ${bulge},${y2} ${x2},${y2}`;
}

export function ChartDrawing(props: { chart: Chart; active: string[] }) {
  const { chart } = props;
  const L = layoutChart(chart);
  const active = new Set(props.active);
  const currentTop = [...L.boxes.keys()].find((id) => active.has(id)) ?? null;
  return (
    <svg
      class="chart"
      viewBox={`0 0 ${L.width} ${L.height}`}
      width={L.width}
      height={L.height}
      role="img"
      aria-label={`${chart.title} state chart${currentTop ? `, current state ${currentTop.slice(chart.rootId.length + 1)}` : ''}`}
      data-testid={`chart-svg-${chart.id}`}
    >
      <defs>
        <marker id={`arrow-${chart.id}`} viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
          <path d="M0,0 L10,5 L0,10 z" class="arrow" />
        </marker>
        <marker id={`arrow-hot-${chart.id}`} viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">
          <path d="M0,0 L10,5 L0,10 z" class="arrow hot" />
        </marker>
      </defs>
      {L.links.map((l) => {
        const s = L.boxes.get(l.source)!;
        const t = L.boxes.get(l.target)!;
        const d = path(s, t, L.boxes);
        const hot = l.source === currentTop;
        return (
          <g key={`${l.source}-${l.target}`} class={`edge ${hot ? 'hot' : ''}`}>
            <title>{`${s.node.key} → ${t.node.key}: ${l.labels.join(', ')}`}</title>
            <path d={d} marker-end={`url(#${hot ? 'arrow-hot' : 'arrow'}-${chart.id})`} />
          </g>
        );
      })}
      {[...L.boxes.values()].map((b) => {
        const cur = active.has(b.node.id);
        const initial = chart.nodes.find((n) => n.id === chart.rootId)?.initial === b.node.id;
        return (
          <g key={b.node.id} class={`state ${cur ? 'current' : ''} ${b.node.type === 'final' ? 'final' : ''}`} data-state-id={b.node.id}>
            <title>{`${b.node.id}${b.node.type === 'final' ? ' (final)' : ''}${b.loops.length ? `\nself: ${b.loops.join(', ')}` : ''}`}</title>
            {initial && <circle cx={b.x - 12} cy={b.y + NODE_H / 2} r={5} class="initial-dot" />}
            <rect x={b.x} y={b.y} width={b.w} height={b.h} rx={10} />
            {b.node.type === 'final' && <rect x={b.x + 3} y={b.y + 3} width={b.w - 6} height={b.h - 6} rx={8} class="inner" />}
            <text x={b.x + b.w / 2} y={b.y + 22} text-anchor="middle" class="state-label">
              {b.node.key}
            </text>
            {b.children.map((c, i) => {
              const cy = b.y + NODE_H + i * CHILD_H;
              const childCur = active.has(c.id);
              return (
                <g key={c.id} class={`substate ${childCur ? 'current' : ''}`} data-state-id={c.id}>
                  <rect x={b.x + 10} y={cy} width={b.w - 20} height={CHILD_H - 4} rx={6} />
                  <text x={b.x + b.w / 2} y={cy + 14} text-anchor="middle">
                    {c.key}
                  </text>
                </g>
              );
            })}
            {b.loops.length > 0 && (
              <text x={b.x + b.w / 2} y={b.y + b.h - 7} text-anchor="middle" class="loop-label">
                ↻ {b.loops.length} self
              </text>
            )}
          </g>
        );
      })}
    </svg>
  );
}

/** The transitions out of the active states, innermost first (what the chart can do next). */
export function outgoing(chart: Chart, active: string[]): ChartEdge[] {
  const set = new Set(active);
  return chart.edges.filter((e) => set.has(e.source)).sort((a, b) => b.source.length - a.source.length);
}

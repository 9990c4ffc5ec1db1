// The logs viewer: filters (text, services, stdout/stderr), wrapping and UTC/local time over a
// virtual list that renders only the rows in sight, following the end until the user scrolls up
// (docs/adr/0022-logs-viewer.md).
import { useLayoutEffect, useMemo, useRef, useState } from 'preact/hooks';
import { memo } from 'preact/compat';
import { ansiLine } from './ansi.tsx';
import { formatTime, zoneName } from './time.ts';
import { CAPACITY, FilteredView, matcher, type Entry, type Filter, type LogStore } from './store.ts';
import './logs.css';

/** Height of one row (one screen line) in pixels: logs.css sets the same line-height. */
export const ROW = 18;
/** Rows rendered above and below the visible ones. */
const OVERSCAN = 20;
/** Characters before the text: the time (12), a space, and a space after the container. */
const PREFIX = 14;

interface Prefs {
  wrap: boolean;
  utc: boolean;
}
const PREFS_KEY = 'installer.logs.view';

function loadPrefs(): Prefs {
  try {
    const p = JSON.parse(localStorage.getItem(PREFS_KEY) ?? '{}') as Partial<Prefs>;
    return { wrap: p.wrap === true, utc: p.utc !== false };
  } catch {
    return { wrap: false, utc: true };
  }
}

const Row = memo(function Row(props: { e: Entry; utc: boolean }) {
  const { e, utc } = props;
  return (
    <div class={e.stderr ? 'line stderr' : 'line'} data-seq={e.seq}>
      <span class="ts" title={e.timestamp}>
        {formatTime(e.timestamp, utc)}
      </span>{' '}
      {/* On a Swarm: the task and, beside it, the node that ran it (the container's full name on hover). */}
      <span class="ctr" title={e.task !== undefined ? e.container : undefined}>
        {e.task ?? e.container}
      </span>
      {e.node !== undefined && <span class="node">@{e.node}</span>} <span class="msg">{ansiLine(e.line)}</span>
    </div>
  );
});

const fmt = (n: number) => n.toLocaleString('en-GB');

/** Row geometry: offsets of rows from the top, and the row at a given height. */
interface Geometry {
  total: number;
  offset(i: number): number;
  indexAt(y: number): number;
}

function fixedGeometry(n: number): Geometry {
  return { total: n * ROW, offset: (i) => i * ROW, indexAt: (y) => Math.max(0, Math.min(n - 1, Math.floor(y / ROW))) };
}

/** Wrapped rows: heights estimated from character counts (monospace), corrected by measured ones. */
function wrappedGeometry(view: FilteredView, store: LogStore, cols: number, measured: Map<number, number>): Geometry {
  const n = view.length;
  const offsets = new Float64Array(n + 1);
  for (let i = 0; i < n; i++) {
    const e = store.at(view.seqAt(i));
    const h = measured.get(e.seq) ?? estimate(e, cols);
    offsets[i + 1] = offsets[i]! + h;
  }
  return {
    total: offsets[n]!,
    offset: (i) => offsets[Math.max(0, Math.min(n, i))]!,
    indexAt: (y) => {
      let lo = 0;
      let hi = n;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (offsets[mid + 1]! <= y) lo = mid + 1;
        else hi = mid;
      }
      return Math.min(lo, Math.max(0, n - 1));
    },
  };
}

function estimate(e: Entry, cols: number): number {
  const label = (e.task ?? e.container).length + (e.node !== undefined ? e.node.length + 1 : 0);
  return Math.max(1, Math.ceil((PREFIX + label + e.plain.length) / cols)) * ROW;
}

export interface LogViewerProps {
  store: LogStore;
  /** Changes whenever lines were added to the store or it was cleared. */
  version: number;
  /** Prefix of the test ids: `<id>-lines`, `<id>-count`, … */
  id: string;
}

export function LogViewer({ store, version, id }: LogViewerProps) {
  const [text, setText] = useState('');
  const [hidden, setHidden] = useState<ReadonlySet<string>>(new Set());
  const [stdout, setStdout] = useState(true);
  const [stderr, setStderr] = useState(true);
  const [prefs, setPrefs] = useState(loadPrefs);
  const [follow, setFollow] = useState(true);
  const [, setTick] = useState(0);
  const [size, setSize] = useState({ height: 0, width: 0, charWidth: 7.5 });
  const scroller = useRef<HTMLDivElement>(null);
  const rows = useRef<HTMLDivElement>(null);
  const scrollTop = useRef(0);
  /** Where the user left the view: the first row in sight and how far into it. */
  const anchor = useRef<{ seq: number; delta: number } | null>(null);
  /** The scrollTop the viewer itself set last, so that its scroll event is not taken for the user's. */
  const ownScroll = useRef(-1);
  const measured = useRef(new Map<number, number>());
  const geometry = useRef<Geometry>(fixedGeometry(0));
  const followRef = useRef(follow);
  followRef.current = follow;

  const updatePrefs = (p: Partial<Prefs>) => {
    const next = { ...prefs, ...p };
    setPrefs(next);
    try {
      localStorage.setItem(PREFS_KEY, JSON.stringify(next));
    } catch {
      // storage full or refused: the choice holds for this page only
    }
  };

  const filter: Filter = useMemo(() => ({ text, hidden, stdout, stderr }), [text, hidden, stdout, stderr]);
  // A new view when the filter changes or the store was cleared.
  const view = useMemo(() => new FilteredView(store, matcher(filter)), [store, filter, store.generation]);
  view.sync();
  void version;

  const cols = Math.max(1, Math.floor(size.width / size.charWidth));
  // Heights measured at another width (or before wrapping) no longer hold.
  const measuredFor = useRef('');
  if (measuredFor.current !== `${prefs.wrap} ${cols}`) {
    measuredFor.current = `${prefs.wrap} ${cols}`;
    measured.current.clear();
  }
  const geo = prefs.wrap ? wrappedGeometry(view, store, cols, measured.current) : fixedGeometry(view.length);
  geometry.current = geo;
  const n = view.length;
  const maxTop = Math.max(0, geo.total - size.height);
  let top: number;
  if (follow) top = maxTop;
  else if (anchor.current) top = Math.min(maxTop, geo.offset(view.indexOf(anchor.current.seq)) + anchor.current.delta);
  else top = Math.min(maxTop, scrollTop.current);
  const first = n ? geo.indexAt(top) : 0;
  const last = n ? geo.indexAt(top + size.height) : -1;
  const start = Math.max(0, first - OVERSCAN);
  const end = Math.min(n, last + 1 + OVERSCAN);
  const shown: Entry[] = [];
  for (let i = start; i < end; i++) shown.push(store.at(view.seqAt(i)));

  // Keep the scroll position where the render put it: at the end when following, on the anchor when not.
  useLayoutEffect(() => {
    const el = scroller.current;
    if (!el) return;
    if (Math.abs(el.scrollTop - top) > 1) {
      el.scrollTop = top;
      ownScroll.current = el.scrollTop;
    }
    scrollTop.current = el.scrollTop;
    if (!prefs.wrap || !rows.current) return;
    // Wrapped rows whose height differs from the estimate (wide characters, tabs) are measured.
    let changed = false;
    for (const child of Array.from(rows.current.children) as HTMLElement[]) {
      const seq = Number(child.dataset.seq);
      const h = child.offsetHeight;
      const e = store.at(seq);
      if (!e || e.seq !== seq) continue;
      const known = measured.current.get(seq) ?? estimate(e, cols);
      if (h && h !== known) {
        measured.current.set(seq, h);
        changed = true;
      }
    }
    if (measured.current.size > 20_000) measured.current.clear();
    if (changed) setTick((t) => t + 1);
  });

  // Size of the viewport and of a character, now and whenever the pane is resized.
  useLayoutEffect(() => {
    const el = scroller.current;
    if (!el) return;
    const probe = document.createElement('span');
    probe.className = 'probe';
    probe.textContent = 'x'.repeat(200);
    el.appendChild(probe);
    const charWidth = probe.getBoundingClientRect().width / 200 || 7.5;
    probe.remove();
    const measure = () => {
      const style = getComputedStyle(rows.current ?? el);
      const pad = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
      setSize({ height: el.clientHeight, width: el.clientWidth - pad, charWidth });
    };
    measure();
    const ro = new ResizeObserver(measure);
    ro.observe(el);
    return () => ro.disconnect();
  }, []);

  const onScroll = () => {
    const el = scroller.current;
    if (!el) return;
    if (el.scrollTop === ownScroll.current) return;
    ownScroll.current = -1;
    scrollTop.current = el.scrollTop;
    const atBottom = el.scrollHeight - el.scrollTop - el.clientHeight <= ROW / 2;
    const g = geometry.current;
    const i = g.indexAt(el.scrollTop);
    anchor.current = view.length ? { seq: view.seqAt(i), delta: el.scrollTop - g.offset(i) } : null;
    if (atBottom !== followRef.current) setFollow(atBottom);
    setTick((t) => t + 1);
  };

  const sources = [...store.sources].sort();
  const filtered = n !== store.size;
  return (
    <div class="logview">
      <div class="logview-bar" role="group" aria-label="Log view">
        <label class="logview-text">
          Filter
          <input type="search" placeholder="text in the line" value={text} onInput={(e) => setText(e.currentTarget.value)} data-testid={`${id}-filter`} />
        </label>
        <details class="logview-services" data-testid={`${id}-services`}>
          <summary>Services: {hidden.size === 0 ? 'all' : `${sources.filter((s) => !hidden.has(s)).length} of ${sources.length}`}</summary>
          <div class="logview-menu">
            {sources.length === 0 && <span class="muted small">none seen yet</span>}
            {sources.map((s) => (
              <label key={s} class="check">
                <input
                  type="checkbox"
                  checked={!hidden.has(s)}
                  onChange={(e) => {
                    const next = new Set(hidden);
                    if (e.currentTarget.checked) next.delete(s);
                    else next.add(s);
                    setHidden(next);
                  }}
                />{' '}
                {s}
              </label>
            ))}
            {hidden.size > 0 && (
              <button type="button" class="btn small" onClick={() => setHidden(new Set())}>
                Show all
              </button>
            )}
          </div>
        </details>
        <label class="check">
          <input type="checkbox" checked={stdout} onChange={(e) => setStdout(e.currentTarget.checked)} /> stdout
        </label>
        <label class="check">
          <input type="checkbox" checked={stderr} onChange={(e) => setStderr(e.currentTarget.checked)} /> stderr
        </label>
        <label class="check">
          <input type="checkbox" checked={prefs.wrap} onChange={(e) => updatePrefs({ wrap: e.currentTarget.checked })} /> Wrap lines
        </label>
        <label class="check" title={`Off: the browser's time zone (${zoneName()})`}>
          <input type="checkbox" checked={prefs.utc} onChange={(e) => updatePrefs({ utc: e.currentTarget.checked })} /> UTC
        </label>
        <span class="logview-count muted small" data-testid={`${id}-count`}>
          {filtered ? `${fmt(n)} of ${fmt(store.size)} lines` : `${fmt(store.size)} lines`}
          {prefs.utc ? ', times UTC' : `, times ${zoneName()}`}
        </span>
        {!follow && (
          <button type="button" class="btn small primary" data-testid={`${id}-follow`} onClick={() => setFollow(true)}>
            Follow
          </button>
        )}
      </div>
      {store.first > 0 && (
        <p class="logview-dropped small" data-testid={`${id}-dropped`}>
          The viewer keeps the newest {fmt(CAPACITY)} lines: {fmt(store.first)} older {store.first === 1 ? 'line was' : 'lines were'} dropped.
        </p>
      )}
      <div
        class={`logview-scroll${prefs.wrap ? ' wrap' : ''}`}
        ref={scroller}
        onScroll={onScroll}
        role="log"
        aria-live="off"
        tabIndex={0}
        data-testid={`${id}-lines`}
        data-follow={follow ? 'on' : 'off'}
      >
        {store.size === 0 ? (
          <div class="logview-empty">No lines yet.</div>
        ) : n === 0 ? (
          <div class="logview-empty">No line matches the filters.</div>
        ) : null}
        <div class="logview-sizer" style={{ height: `${geo.total}px` }}>
          <div class="logview-rows" ref={rows} style={{ transform: `translateY(${geo.offset(start)}px)` }}>
            {shown.map((e) => (
              <Row key={e.seq} e={e} utc={prefs.utc} />
            ))}
          </div>
        </div>
      </div>
    </div>
  );
}

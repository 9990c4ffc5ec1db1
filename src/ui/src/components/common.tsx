// Small shared pieces: badges, conditions, the modal dialog, error and notice boxes, scrolling tables, polling.
import type { ComponentChildren } from 'preact';
import { useEffect, useId, useLayoutEffect, useRef, useState } from 'preact/hooks';
import type { Condition } from '../api.ts';
import { time } from '../format.ts';
import { whilePageVisible } from '../visibility.ts';

const TONE: Record<string, string> = {
  running: 'ok', healthy: 'ok', completed: 'ok', ok: 'ok', up: 'ok',
  queued: 'info', started: 'info', starting: 'warn', restarting: 'warn', created: 'info', paused: 'warn',
  exited: 'muted', dead: 'bad', removing: 'warn', unhealthy: 'bad', failed: 'bad', 'rolled-back': 'warn', neither: 'bad', undecided: 'bad',
  delivered: 'ok', pending: 'info',
  // A Swarm's nodes, services and tasks (components/swarm-state.tsx).
  ready: 'ok', active: 'ok', down: 'bad', disconnected: 'bad', drain: 'warn', pause: 'warn', rejected: 'bad', orphaned: 'bad',
  updating: 'info', rollback_started: 'warn', rollback_paused: 'warn', rollback_completed: 'warn', assigned: 'info', preparing: 'info',
};

export function Badge(props: { value: string | null | undefined; title?: string }) {
  const v = props.value ?? '—';
  return (
    <span class={`badge tone-${TONE[v] ?? 'muted'}`} title={props.title}>
      {v}
    </span>
  );
}

/** `Progressing` is neither good nor bad; any other condition is good when True. */
const conditionTone = (c: Condition) =>
  c.status === 'Unknown' ? 'warn' : c.type === 'Progressing' ? (c.status === 'True' ? 'info' : 'muted') : c.status === 'True' ? 'ok' : 'bad';

/** A status row's conditions (a job's, an update's): type and status, reason, message; when, on hover. */
export function ConditionList(props: { conditions: readonly Condition[]; testid?: string }) {
  if (!props.conditions.length) return <span class="muted" data-testid={props.testid}>none</span>;
  return (
    <ul class="conditions" data-testid={props.testid}>
      {props.conditions.map((c) => (
        <li key={c.type} data-condition={c.type} data-status={c.status} title={`observed ${time(c.observedAt)}`}>
          <span class={`badge tone-${conditionTone(c)}`}>
            {c.type}={c.status}
          </span>{' '}
          <span class="muted">{c.reason}</span>
          {c.message ? `: ${c.message}` : ''}
        </li>
      ))}
    </ul>
  );
}

export function ErrorBox(props: { error: unknown }) {
  if (!props.error) return null;
  const message = props.error instanceof Error ? props.error.message : String(props.error);
  return (
    <div class="notice bad" role="alert">
      {message}
    </div>
  );
}

export function Notice(props: { tone?: 'ok' | 'info' | 'warn' | 'bad'; children: ComponentChildren; testid?: string }) {
  return (
    <div class={`notice ${props.tone ?? 'info'}`} data-testid={props.testid}>
      {props.children}
    </div>
  );
}

/**
 * A modal confirmation as a native `<dialog>` opened with `showModal()`: the rest of the page is
 * inert, so focus stays inside; Escape cancels (unless busy); on close, focus returns to the
 * element that opened it (or to the page's heading when that element is gone).
 */
export function Dialog(props: {
  title: string;
  children: ComponentChildren;
  confirmLabel: string;
  cancelLabel?: string;
  danger?: boolean;
  busy?: boolean;
  /** The confirm button only (e.g. until a confirmation word is typed). */
  confirmDisabled?: boolean;
  error?: unknown;
  onConfirm: () => void;
  onCancel: () => void;
  testid?: string;
}) {
  const titleId = useId();
  const confirm = useRef<HTMLButtonElement>(null);
  const body = useRef<HTMLDivElement>(null);
  // Read by the native event handlers, which outlive a render.
  const latest = useRef(props);
  latest.current = props;
  const dialog = useModal(() => {
    const p = latest.current;
    if (p.busy) return false;
    p.onCancel();
    return true;
  });
  useLayoutEffect(() => {
    // A field to fill comes first; otherwise the confirm button, as before.
    const field = body.current?.querySelector<HTMLElement>('input, select, textarea');
    (field ?? confirm.current)?.focus();
  }, []);
  return (
    <dialog ref={dialog} class="modal" aria-labelledby={titleId} data-testid={props.testid ?? 'dialog'}>
      <h2 id={titleId}>{props.title}</h2>
      <div class="modal-body" ref={body}>
        {props.children}
      </div>
      <ErrorBox error={props.error} />
      <div class="modal-actions">
        <button type="button" class="btn" onClick={props.onCancel} disabled={props.busy}>
          {props.cancelLabel ?? 'Cancel'}
        </button>
        <button type="button" ref={confirm} class={`btn ${props.danger ? 'danger' : 'primary'}`} onClick={props.onConfirm} disabled={props.busy || props.confirmDisabled}>
          {props.busy ? 'Working…' : props.confirmLabel}
        </button>
      </div>
    </dialog>
  );
}

const FOCUSABLE = 'a[href], button, input, select, textarea, [tabindex]:not([tabindex="-1"])';

/**
 * Opens the `<dialog>` it is attached to with `showModal()` while mounted. `onEscape` decides what
 * Escape does: true when the owner closes it (by unmounting), false to keep it open. On unmount,
 * focus goes back to where it was before the dialog opened.
 */
export function useModal(onEscape: () => boolean) {
  const ref = useRef<HTMLDialogElement>(null);
  const escape = useRef(onEscape);
  escape.current = onEscape;
  useLayoutEffect(() => {
    const d = ref.current;
    if (!d) return;
    const opener = document.activeElement instanceof HTMLElement ? document.activeElement : null;
    let closing = false;
    const onCancel = (e: Event) => {
      // The owner unmounts the dialog; the element never closes itself.
      e.preventDefault();
      escape.current();
    };
    const onClose = () => {
      // The browser may close a dialog whose cancel was refused too often: keep it open, or let
      // the owner close it.
      if (closing) return;
      if (!escape.current() && d.isConnected) d.showModal();
    };
    // Tab from the last control goes to the first, Shift+Tab from the first to the last: focus
    // never leaves for the (inert) page behind.
    const onKey = (e: KeyboardEvent) => {
      if (e.key !== 'Tab') return;
      const all = [...d.querySelectorAll<HTMLElement>(FOCUSABLE)].filter((el) => !el.matches(':disabled') && el.getClientRects().length > 0);
      const first = all[0];
      const last = all.at(-1);
      if (!first || !last) return e.preventDefault();
      const at = document.activeElement;
      if (e.shiftKey && (at === first || !d.contains(at))) {
        e.preventDefault();
        last.focus();
      } else if (!e.shiftKey && (at === last || !d.contains(at))) {
        e.preventDefault();
        first.focus();
      }
    };
    d.addEventListener('cancel', onCancel);
    d.addEventListener('close', onClose);
    d.addEventListener('keydown', onKey);
    if (!d.open) d.showModal();
    return () => {
      closing = true;
      d.removeEventListener('cancel', onCancel);
      d.removeEventListener('close', onClose);
      d.removeEventListener('keydown', onKey);
      if (d.open) d.close();
      const back = opener?.isConnected && !(opener as HTMLButtonElement).disabled ? opener : document.querySelector<HTMLElement>('main h1');
      back?.focus();
    };
  }, []);
  return ref;
}

/**
 * A wide table's own horizontal scroll, so that a narrow screen scrolls the table and not the page.
 * It can take focus (a scrolled region must be reachable by keyboard) and is named by `label`.
 */
export function TableScroll(props: { label: string; children: ComponentChildren }) {
  return (
    <div class="table-scroll" role="region" aria-label={props.label} tabIndex={0}>
      {props.children}
    </div>
  );
}

/** Loads `load` now and every `everyMs` while mounted and the tab is visible; `reload()` loads at once. */
export function usePoll<T>(load: (signal: AbortSignal) => Promise<T>, everyMs: number, deps: unknown[] = []) {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const abort = new AbortController();
    let alive = true;
    const run = async () => {
      try {
        const d = await load(abort.signal);
        if (!alive) return;
        setData(d);
        setError(null);
      } catch (err) {
        if (!alive || (err as Error).name === 'AbortError') return;
        setError(err);
      }
    };
    const stop = whilePageVisible(run, everyMs);
    return () => {
      alive = false;
      abort.abort();
      stop();
    };
  }, [...deps, tick]);
  return { data, error, reload: () => setTick((n) => n + 1) };
}

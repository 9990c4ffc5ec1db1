// Small shared pieces: badges, the modal dialog, error and notice boxes, polling.
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';

const TONE: Record<string, string> = {
  running: 'ok', healthy: 'ok', completed: 'ok', ok: 'ok', up: 'ok',
  queued: 'info', started: 'info', starting: 'warn', restarting: 'warn', created: 'info', paused: 'warn',
  exited: 'muted', dead: 'bad', removing: 'warn', unhealthy: 'bad', failed: 'bad', 'rolled-back': 'warn', neither: 'bad', undecided: 'bad',
};

export function Badge(props: { value: string | null | undefined; title?: string }) {
  const v = props.value ?? '—';
  return (
    <span class={`badge tone-${TONE[v] ?? 'muted'}`} title={props.title}>
      {v}
    </span>
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
  const confirm = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    confirm.current?.focus();
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape' && !props.busy) props.onCancel();
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, [props.busy]);
  return (
    <div class="modal-backdrop">
      <div class="modal" role="dialog" aria-modal="true" aria-labelledby="dialog-title" data-testid={props.testid ?? 'dialog'}>
        <h2 id="dialog-title">{props.title}</h2>
        <div class="modal-body">{props.children}</div>
        <ErrorBox error={props.error} />
        <div class="modal-actions">
          <button type="button" class="btn" onClick={props.onCancel} disabled={props.busy}>
            {props.cancelLabel ?? 'Cancel'}
          </button>
          <button type="button" ref={confirm} class={`btn ${props.danger ? 'danger' : 'primary'}`} onClick={props.onConfirm} disabled={props.busy || props.confirmDisabled}>
            {props.busy ? 'Working…' : props.confirmLabel}
          </button>
        </div>
      </div>
    </div>
  );
}

/** Loads `load` now and every `everyMs` while mounted; `reload()` loads at once. */
export function usePoll<T>(load: (signal: AbortSignal) => Promise<T>, everyMs: number, deps: unknown[] = []) {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const abort = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
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
      if (alive && everyMs > 0) timer = setTimeout(() => void run(), everyMs);
    };
    void run();
    return () => {
      alive = false;
      abort.abort();
      clearTimeout(timer);
    };
  }, [...deps, tick]);
  return { data, error, reload: () => setTick((n) => n + 1) };
}

// The one contract every reconciler keeps (docs/adr/0042-reconcile-contract.md): `reconcile(key)`
// brings one row (or, for the keyless ones, the one thing it owns) a step nearer its desired state
// and says how that went. It never loops or sleeps on its own: a wait is `requeueAfter`.
//
// - `done`: nothing more to do for this key until something wakes it again.
// - `requeueAfter(ms)`: look again after `ms` (a cancel waiting for its target, a window not yet open).
// - `terminal(error)`: the row cannot succeed; the runtime ends it failed with the error as its detail.
// - a throw: transient. The runtime records it as a condition on the row, retries with a bounded
//   backoff, and ends the row failed (the error in its detail, exit code null) when retries run out.
import type { Condition } from '../../src/contracts/conditions.ts';

export type ReconcileResult =
  | { readonly outcome: 'done' }
  | { readonly outcome: 'requeue'; readonly afterMs: number; readonly reason: string }
  | { readonly outcome: 'terminal'; readonly error: Error };

export const done = (): ReconcileResult => ({ outcome: 'done' });
export const requeueAfter = (afterMs: number, reason: string): ReconcileResult => ({ outcome: 'requeue', afterMs: Math.max(0, afterMs), reason });
export const terminal = (error: Error | string): ReconcileResult => ({ outcome: 'terminal', error: typeof error === 'string' ? new Error(error) : error });

/** A reconciler: one per kind. `K` is the row's key; keyless reconcilers (outcome, policy, observer) use `null`. */
export interface Reconciler<K> {
  /** For log lines and conditions: `jobs`, `self-update`, `update-policy`, … */
  readonly name: string;
  reconcile(key: K, signal: AbortSignal): Promise<ReconcileResult>;
}

/** How the runtime writes on a kind's rows when a reconcile goes wrong. */
export interface RowStatus<K> {
  /** Records the condition (`type: 'Reconciled'`, `status: 'False'`) on the key's row. */
  recordError(key: K, condition: Condition): Promise<void>;
  /** Replaces that condition with `Reconciled=True` once a reconcile succeeds after failed attempts. */
  recordRecovered?(key: K, condition: Condition): Promise<void>;
  /** Ends the key's row failed with `detail` (exit code null), if it is still in flight. */
  fail(key: K, detail: string): Promise<void>;
}

/** Retries of a key whose reconcile threw: `baseMs · 2^(n-1)`, at most `maxMs`, `attempts` in all. */
export interface Backoff {
  baseMs: number;
  maxMs: number;
  attempts: number;
}

export const DEFAULT_BACKOFF: Backoff = { baseMs: 1_000, maxMs: 30_000, attempts: 5 };

/** The wait before retry `attempt` (1-based), or null once retries have run out. */
export function backoffDelay(b: Backoff, attempt: number): number | null {
  if (attempt >= b.attempts) return null;
  return Math.min(b.maxMs, b.baseMs * 2 ** (attempt - 1));
}

/** The condition a thrown error leaves on the row. */
export function errorCondition(reconciler: string, err: unknown, attempt: number, at: Date = new Date()): Condition {
  const message = err instanceof Error ? err.message : String(err);
  return { type: 'Reconciled', status: 'False', reason: 'ReconcileError', message: `${reconciler} (attempt ${attempt}): ${message}`, observedAt: at.toISOString() };
}

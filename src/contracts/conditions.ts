// The one shape of a condition (Kubernetes style), wherever it is kept and served: on a job's and a
// self-update's status row (the reconcilers and the runtime write them), on an observed row (the
// observer writes them), in the API's answers and in the UI (docs/adr/0051-status-that-tells-the-truth.md).

export type ConditionStatus = 'True' | 'False' | 'Unknown';

export interface Condition<Type extends string = string> {
  type: Type;
  status: ConditionStatus;
  /** A word for why, CamelCase or the chart's state (`Running`, `cancelled`, `ReconcileError`). */
  reason: string;
  message: string;
  /** When its writer saw it hold (ISO 8601): an observation's start, or a reconciler's write. */
  observedAt: string;
}

/**
 * Conditions as stored, in today's shape: rows written before one shape was chosen (and by the build
 * before it, during a switch or after a rollback) name the time `at`.
 */
export function conditionsOf(stored: unknown): Condition[] {
  if (!Array.isArray(stored)) return [];
  return stored.map((c: Condition & { at?: string }) => {
    const { at, ...rest } = c;
    return { ...rest, observedAt: c.observedAt ?? at ?? '' };
  });
}

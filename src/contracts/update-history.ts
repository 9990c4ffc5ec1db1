// One entry of the self-update history as GET /api/system/self-update/history sends it and the UI
// reads it (docs/adr/0031-update-history.md).
import type { Condition } from './conditions.ts';

export interface UpdateHistoryEntry {
  requestId: string;
  actor: { id: string; email: string | null };
  /** The build that ran before the update. */
  from: { reference: string | null; digest: string | null };
  /** The build the update moved to. */
  to: { tag: string | null; digest: string | null };
  /** The phase: `helper-running` while in flight, then completed, rolled-back, neither or undecided. */
  outcome: string;
  detail: string | null;
  /** From the old backend's last answer to the new backend's first readiness; null when either end is unknown. */
  downtimeMs: number | null;
  /** Why downtimeMs is null: the update is still in flight, or an end was not recorded. */
  downtimeNote: string | null;
  lastAnswerAt: string | null;
  firstReadyAt: string | null;
  startedAt: string;
  finishedAt: string | null;
  /** The update's status conditions: the runtime's `Reconciled` once an attempt failed (docs/adr/0042-reconcile-contract.md). */
  conditions: Condition[];
}

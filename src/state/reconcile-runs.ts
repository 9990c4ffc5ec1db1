// Runs of the self-update outcome's reconciliation (the boot-reconcile chart): one row per run, its
// snapshot written after each transition like every other chart's (migration 0007).
import { randomUUID } from 'node:crypto';
import type { Kysely } from 'kysely';
import type { DB } from '../db/schema.ts';

export interface ReconcileRunView {
  runId: string;
  requestId: string | null;
  worker: string;
  snapshot: unknown;
  chartVersion: string;
  startedAt: Date;
  updatedAt: Date;
  finishedAt: Date | null;
}

export async function startReconcileRun(db: Kysely<DB>, worker: string, chartVersion: string): Promise<string> {
  const runId = randomUUID();
  await db.insertInto('reconcile_runs').values({ run_id: runId, worker, chart_version: chartVersion, snapshot: null, request_id: null, finished_at: null }).execute();
  return runId;
}

export async function updateReconcileRun(db: Kysely<DB>, runId: string, patch: { snapshot?: unknown; requestId?: string | null; finished?: boolean }): Promise<void> {
  await db
    .updateTable('reconcile_runs')
    .set({
      updated_at: new Date(),
      ...(patch.snapshot !== undefined ? { snapshot: JSON.stringify(patch.snapshot) } : {}),
      ...(patch.requestId !== undefined ? { request_id: patch.requestId } : {}),
      ...(patch.finished ? { finished_at: new Date() } : {}),
    })
    .where('run_id', '=', runId)
    .execute();
}

export async function listReconcileRuns(db: Kysely<DB>, limit: number): Promise<ReconcileRunView[]> {
  const rows = await db.selectFrom('reconcile_runs').selectAll().orderBy('started_at', 'desc').orderBy('run_id').limit(limit).execute();
  return rows.map((r) => ({
    runId: r.run_id, requestId: r.request_id, worker: r.worker, snapshot: r.snapshot, chartVersion: r.chart_version,
    startedAt: new Date(r.started_at), updatedAt: new Date(r.updated_at), finishedAt: r.finished_at ? new Date(r.finished_at) : null,
  }));
}

/**
 * Ends the runs a process that is gone left unfinished (stopped by a switch or killed): the row
 * keeps the state it stood in, and this process's own boot run takes the reconciliation over.
 * Returns how many.
 */
export async function closeOrphanedRuns(db: Kysely<DB>, worker: string): Promise<number> {
  const res = await db.updateTable('reconcile_runs').set({ finished_at: new Date(), updated_at: new Date() }).where('finished_at', 'is', null).where('worker', '!=', worker).executeTakeFirst();
  return Number(res.numUpdatedRows);
}

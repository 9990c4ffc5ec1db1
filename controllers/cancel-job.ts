// Reconciles cancel-job requests. The API has already written who cancels on the target's row; a
// running target's reconciler sees that at its next wake and sends its chart CANCEL. This
// reconciler records the request and its outcome: it drops a target still queued, looks again
// (requeue-after) while a running one has not ended, and says when the target had already ended.
import type { Kysely } from 'kysely';
import type { DB } from '../src/db/schema.ts';
import { getJob, observeJobGeneration, updateJobStatus } from '../src/state/jobs.ts';
import { recordFinished, recordStarted } from '../src/state/actions.ts';
import { hasJobEvent, type JobEventLog } from '../src/state/job-events.ts';
import { finishUnrun } from './runtime/job-run.ts';
import { done, requeueAfter, type ReconcileResult, type Reconciler } from './runtime/reconcile.ts';

export interface CancelJobDeps {
  db: Kysely<DB>;
  events: JobEventLog;
  /** How often a running target is looked at until it ends. */
  pollMs?: number;
  /** The request's deadline is moved this far at each look: waiting for a target is progress. */
  hungMinutes: number;
}

export class CancelJobReconciler implements Reconciler<string> {
  readonly name = 'cancels';
  /** Requests that saw their target running: its end, whatever it is, is this cancel's doing. */
  private readonly sawRunning = new Set<string>();

  constructor(private readonly d: CancelJobDeps) {}

  async reconcile(requestId: string): Promise<ReconcileResult> {
    const { db, events } = this.d;
    const req = await getJob(db, requestId);
    if (!req || req.phase !== 'running') {
      this.sawRunning.delete(requestId);
      return done();
    }
    const targetId = req.params.targetJobId ?? '';
    await events.open(requestId);
    // Written once: a requeue or a retry finds them.
    const audit =
      (await db.selectFrom('deployment_actions').select('id').where('job_id', '=', requestId).executeTakeFirst()) ??
      (await recordStarted(db, { kind: 'cancel-job', actor: { id: req.actor, email: req.actorEmail, kind: req.actorKind }, jobId: requestId, detail: `cancel job ${targetId}` }));
    if (!(await hasJobEvent(db, requestId, 'phase', { key: 'phase', value: 'cancelling' }))) {
      await events.append(requestId, 'phase', { phase: 'cancelling', targetJobId: targetId });
    }
    const outcome = await this.cancel(requestId, targetId, req.actor);
    if (outcome === 'running') {
      await updateJobStatus(db, requestId, { hungDeadline: new Date(Date.now() + this.d.hungMinutes * 60_000) });
      return requeueAfter(this.d.pollMs ?? 100, `job ${targetId} is still running`);
    }
    await finishUnrun(this.d, requestId, { phase: outcome.phase, state: outcome.phase, detail: outcome.detail }, () =>
      recordFinished(db, audit.id, { status: outcome.phase, exitCode: null, detail: outcome.detail }),
    );
    this.sawRunning.delete(requestId);
    return done();
  }

  private async cancel(requestId: string, targetId: string, by: string): Promise<{ phase: 'completed' | 'failed'; detail: string } | 'running'> {
    const { db } = this.d;
    for (;;) {
      const target = await getJob(db, targetId);
      if (!target) return { phase: 'failed', detail: `no job ${targetId}` };
      if (target.phase === 'queued') {
        const detail = `cancelled by ${by} before it started`;
        // Its end is the answer to the cancel's generation, written with it.
        if (await finishUnrun(this.d, targetId, { phase: 'failed', state: 'cancelled', detail, from: ['queued'], observedGeneration: target.generation }).catch(() => false)) {
          return { phase: 'completed', detail: `cancelled job ${targetId} before it started` };
        }
        continue; // claimed meanwhile: it runs now, and its reconciler sees the cancel on its row
      }
      if (target.phase === 'running') {
        this.sawRunning.add(requestId);
        return 'running';
      }
      // Ended: by this cancel (its chart ended `cancelled`, possibly before this reconciler looked), or before it.
      // Either way the target's status is final, and it answers the generation the cancel made.
      await observeJobGeneration(db, targetId, target.generation);
      // The detail is written with the phase (the snapshot may land later): the chart's cancelled end says who.
      const byCancel =
        this.sawRunning.has(requestId) ||
        (target.cancelRequestedBy !== null && (target.state === 'cancelled' || (target.detail ?? '').startsWith(`cancelled by ${target.cancelRequestedBy}`)));
      return byCancel ? { phase: 'completed', detail: `cancelled job ${targetId}` } : { phase: 'failed', detail: `job ${targetId} had already ended (${target.phase})` };
    }
  }
}

// Reconciles cancel-job requests. The API has already written who cancels on the target's row; a
// running target's reconciler sees that at its next wake and sends its chart CANCEL. This
// reconciler records the request and its outcome: it drops a target still queued, waits for a
// running one to end, and says when the target had already ended.
import type { Kysely } from 'kysely';
import type { DB } from '../src/db/schema.ts';
import { getJob } from '../src/state/jobs.ts';
import { recordFinished, recordStarted } from '../src/state/actions.ts';
import type { JobEventLog } from '../src/state/job-events.ts';
import { finishUnrun } from './runtime/job-run.ts';

export interface CancelJobDeps {
  db: Kysely<DB>;
  events: JobEventLog;
  /** Ends the wait for a running target when the process stops. */
  signal: AbortSignal;
  /** How often a running target is looked at until it ends. */
  pollMs?: number;
}

export class CancelJobReconciler {
  constructor(private readonly d: CancelJobDeps) {}

  async reconcile(requestId: string): Promise<void> {
    const { db, events } = this.d;
    const req = await getJob(db, requestId);
    if (!req || req.phase !== 'running') return;
    const targetId = req.params.targetJobId ?? '';
    await events.open(requestId);
    const audit = await recordStarted(db, { kind: 'cancel-job', actor: { id: req.actor, email: req.actorEmail, kind: req.actorKind }, jobId: requestId, detail: `cancel job ${targetId}` });
    await events.append(requestId, 'phase', { phase: 'cancelling', targetJobId: targetId });
    const outcome = await this.cancel(targetId, req.actor);
    if (!outcome) return; // stopping: the next boot closes this request as interrupted
    await finishUnrun(this.d, requestId, { phase: outcome.phase, state: outcome.phase, detail: outcome.detail }, () =>
      recordFinished(db, audit.id, { status: outcome.phase, exitCode: null, detail: outcome.detail }),
    );
  }

  private async cancel(targetId: string, by: string): Promise<{ phase: 'completed' | 'failed'; detail: string } | null> {
    const { db } = this.d;
    let sawRunning = false;
    for (;;) {
      const target = await getJob(db, targetId);
      if (!target) return { phase: 'failed', detail: `no job ${targetId}` };
      if (target.phase === 'queued') {
        const detail = `cancelled by ${by} before it started`;
        if (await finishUnrun(this.d, targetId, { phase: 'failed', state: 'cancelled', detail, from: ['queued'] }).catch(() => false)) {
          return { phase: 'completed', detail: `cancelled job ${targetId} before it started` };
        }
        continue; // claimed meanwhile: it runs now, and its reconciler sees the cancel on its row
      }
      if (target.phase === 'running') {
        sawRunning = true;
        if (this.d.signal.aborted) return null;
        await new Promise((r) => setTimeout(r, this.d.pollMs ?? 100));
        continue;
      }
      // Ended: by this cancel (its chart ended `cancelled`, possibly before this reconciler looked), or before it.
      // The detail is written with the phase (the snapshot may land later): the chart's cancelled end says who.
      const byCancel = sawRunning || (target.cancelRequestedBy !== null && (target.state === 'cancelled' || (target.detail ?? '').startsWith(`cancelled by ${target.cancelRequestedBy}`)));
      return byCancel ? { phase: 'completed', detail: `cancelled job ${targetId}` } : { phase: 'failed', detail: `job ${targetId} had already ended (${target.phase})` };
    }
  }
}

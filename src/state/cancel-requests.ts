// The rules that admit a cancel, in the transaction that writes it: the target exists, is a job a
// cancel can stop, and is still queued or running with no cancel asked for yet. The cancel is itself
// a job (`cancel-job`), queued with the mark on its target's row.
import type { Kysely } from 'kysely';
import type { DB } from '../db/schema.ts';
import type { RecordedActor } from '../auth/actor.ts';
import { badRequest, conflict, notFound } from '../errors.ts';
import { createJob, getJob, requestCancel } from './jobs.ts';

/** Queues a cancel of `targetJobId`; returns the cancel's job id, or refuses (404, 400, 409) naming why. */
export async function requestJobCancel(db: Kysely<DB>, targetJobId: string, actor: RecordedActor): Promise<string> {
  return db.transaction().execute(async (tx) => {
    const target = await getJob(tx, targetJobId);
    if (!target) throw notFound(`no job ${targetJobId}`);
    if (target.kind === 'cancel-job') throw badRequest('a cancel-job request cannot itself be cancelled');
    // Its job is the update's transcript: the helper, once started, is not stopped halfway.
    if (target.kind === 'self-update') throw badRequest('a self-update cannot be cancelled: its job is its transcript');
    if (!(await requestCancel(tx, targetJobId, actor.id))) {
      const now = await getJob(tx, targetJobId);
      throw conflict(now?.cancelRequestedBy ? `job ${targetJobId} is already being cancelled by ${now.cancelRequestedBy}` : `job ${targetJobId} has already ended (${now?.phase})`);
    }
    return createJob(tx, { kind: 'cancel-job', params: { targetJobId }, actor });
  });
}

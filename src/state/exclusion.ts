// "No job during an update, no update during a job", in one place. A job request and a self-update
// request each take the same transaction-level advisory lock before they look, so of two requests
// made at once the second sees the first. Every refusal is the same AppError `conflict` (409).
import { sql, type Kysely, type Transaction } from 'kysely';
import type { DB, SelfUpdatePhase } from '../db/schema.ts';
import { conflict } from '../errors.ts';

type Conn = Kysely<DB> | Transaction<DB>;

/** Phases during which an update is in flight: a second update and any job are refused. */
export const IN_FLIGHT: readonly SelfUpdatePhase[] = ['requested', 'preflight', 'helper-running'];

/** What is being asked for: a deployment job, or an update (`own`: the update asking, at its preflight). */
export type Wanted = { kind: 'job' } | { kind: 'update'; own?: string };

/**
 * Takes the lock and refuses with 409 what would conflict. Call it inside the transaction that
 * writes the request, before the write.
 */
export async function refuseConflicting(tx: Transaction<DB>, wanted: Wanted): Promise<void> {
  await sql`select pg_advisory_xact_lock(hashtext('installer.self-update'))`.execute(tx);
  const problem = await conflictOf(tx, wanted);
  if (problem) throw conflict(problem);
}

/** Why what is wanted cannot start now, or null. */
export async function conflictOf(db: Conn, wanted: Wanted): Promise<string | null> {
  let updates = db.selectFrom('self_update_status').select(['request_id', 'phase', 'created_at']).where('phase', 'in', IN_FLIGHT);
  if (wanted.kind === 'update' && wanted.own) updates = updates.where('request_id', '!=', wanted.own);
  const update = await updates.executeTakeFirst();
  if (update && wanted.kind === 'job') return `an installer self-update is in flight (request ${update.request_id}, ${update.phase}): try again when it has finished`;
  if (update) return `a self-update is already in flight (request ${update.request_id}, ${update.phase} since ${new Date(update.created_at).toISOString()})`;
  if (wanted.kind === 'job') return null;
  const job = await db
    .selectFrom('deployment_job_status as s')
    .innerJoin('deployment_jobs as j', 'j.job_id', 's.job_id')
    .select(['s.job_id', 's.phase', 'j.kind'])
    .where('s.phase', 'in', ['queued', 'running'])
    // A self-update's own job (its transcript) is no deployment job: updates in flight are seen above.
    .where('j.kind', '!=', 'self-update')
    .orderBy('j.created_at')
    .executeTakeFirst();
  return job ? `deployment job ${job.job_id} (${job.kind}) is ${job.phase}: updating the installer now would kill it` : null;
}

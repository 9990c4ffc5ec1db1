// The rules that admit a host migration request, in the transaction that writes it: a VM user set,
// PLATFORM_URL set, and no other host migration queued or running. Two requests made at once take
// the same advisory lock, so the second sees the first and is refused.
import { sql, type Kysely, type Transaction } from 'kysely';
import type { DB } from '../db/schema.ts';
import type { RecordedActor } from '../auth/actor.ts';
import { conflict } from '../errors.ts';
import { createJob } from './jobs.ts';

/** The installer setting that holds the VM user the host migration substitutes for <USER>. */
export const VM_USER_SETTING = 'vmUser';

/** Queues the `migrate-host` job, or refuses with 409 and the spec's message. */
export async function requestHostMigration(db: Kysely<DB>, input: { actor: RecordedActor; platformUrlSet: boolean }): Promise<string> {
  return db.transaction().execute(async (tx: Transaction<DB>) => {
    await sql`select pg_advisory_xact_lock(hashtext('installer.migrate-host'))`.execute(tx);
    const vmUser = await tx.selectFrom('installer_settings').select('value').where('key', '=', VM_USER_SETTING).executeTakeFirst();
    if (!vmUser?.value) throw conflict('VM user must be set before running host migration');
    if (!input.platformUrlSet) throw conflict('PLATFORM_URL must be set before running host migration');
    const active = await tx
      .selectFrom('deployment_jobs as j')
      .innerJoin('deployment_job_status as s', 's.job_id', 'j.job_id')
      .select(['j.job_id', 's.phase'])
      .where('j.kind', '=', 'migrate-host')
      .where('s.phase', 'in', ['queued', 'running'])
      .orderBy('j.created_at')
      .executeTakeFirst();
    if (active) throw conflict(`a host migration is already ${active.phase} (job ${active.job_id})`);
    return createJob(tx, { kind: 'migrate-host', params: {}, actor: input.actor });
  });
}

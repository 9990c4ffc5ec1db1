// The runtime's `Reconciled` condition on a row (docs/adr/0042-reconcile-contract.md): put in
// place of the row's previous one, beside the conditions its reconciler writes.
import { sql, type Kysely, type RawBuilder, type Transaction } from 'kysely';
import type { DB } from '../db/schema.ts';
import type { Condition } from '../contracts/conditions.ts';

type Conn = Kysely<DB> | Transaction<DB>;

/** The row's `Reconciled` conditions (none or one), to carry over a write of the whole array. */
export const RECONCILED_KEPT: RawBuilder<unknown> = sql`jsonb_path_query_array(conditions, '$[*] ? (@.type == "Reconciled")')`;

/** `conditions` replaced by `next`, with the row's `Reconciled` condition kept. */
export function withReconciled(next: Condition[]): RawBuilder<unknown> {
  return sql`${JSON.stringify(next)}::jsonb || ${RECONCILED_KEPT}`;
}

/** Replaces the row's `Reconciled` condition with `condition` (a job's status row or a self-update's). */
export async function putReconciled(db: Conn, table: 'deployment_job_status' | 'self_update_status', id: string, condition: Condition): Promise<void> {
  const others = sql`coalesce(jsonb_path_query_array(conditions, '$[*] ? (@.type != "Reconciled")'), '[]'::jsonb)`;
  const set = { conditions: sql`${others} || jsonb_build_array(${JSON.stringify(condition)}::jsonb)`, updated_at: new Date() } as never;
  if (table === 'deployment_job_status') await db.updateTable('deployment_job_status').set(set).where('job_id', '=', id).execute();
  else await db.updateTable('self_update_status').set(set).where('request_id', '=', id).execute();
}

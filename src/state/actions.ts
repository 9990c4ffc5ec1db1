// The audit trail (`deployment_actions`). Rows are written by controllers and never pruned.
import type { Kysely, Transaction } from 'kysely';
import type { ActionKind, DB, DeploymentAction } from '../db/schema.ts';
import type { Actor } from '../auth/actor.ts';

type Conn = Kysely<DB> | Transaction<DB>;

export interface StartAction {
  kind: ActionKind;
  actor: Actor;
  detail?: string | null;
  jobId?: string | null;
  targetDigest?: string | null;
  schemaMigration?: string | null;
}

export async function recordStarted(db: Conn, a: StartAction): Promise<DeploymentAction> {
  return db
    .insertInto('deployment_actions')
    .values({
      kind: a.kind,
      status: 'started',
      exit_code: null,
      actor: a.actor.id,
      actor_email: a.actor.email ?? null,
      detail: a.detail ?? null,
      job_id: a.jobId ?? null,
      target_digest: a.targetDigest ?? null,
      schema_migration: a.schemaMigration ?? null,
      finished_at: null,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

export async function recordFinished(
  db: Conn,
  id: string,
  outcome: { status: 'completed' | 'failed'; exitCode?: number | null; detail?: string | null },
): Promise<DeploymentAction | undefined> {
  const now = new Date();
  return db
    .updateTable('deployment_actions')
    .set({
      status: outcome.status,
      exit_code: outcome.exitCode ?? null,
      ...(outcome.detail !== undefined ? { detail: outcome.detail } : {}),
      updated_at: now,
      finished_at: now,
    })
    .where('id', '=', id)
    .returningAll()
    .executeTakeFirst();
}

export async function listActions(db: Conn, limit: number): Promise<DeploymentAction[]> {
  return db.selectFrom('deployment_actions').selectAll().orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).execute();
}

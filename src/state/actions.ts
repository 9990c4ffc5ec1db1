// The audit trail (`deployment_actions`). Rows are written by controllers and never pruned.
import { sql, type Kysely, type Transaction } from 'kysely';
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

/** An audit row as the API shows it, timestamps already ISO 8601 UTC strings. */
export interface ActionView {
  id: string;
  kind: ActionKind;
  status: string;
  exitCode: number | null;
  actor: string;
  actorEmail: string | null;
  detail: string | null;
  targetDigest: string | null;
  schemaMigration: string | null;
  jobId: string | null;
  createdAt: string;
  finishedAt: string | null;
}

/** A timestamptz as ISO 8601 in UTC with milliseconds, formatted by Postgres (as Date#toISOString would). */
const isoUtc = (column: string) => sql<string>`to_char(${sql.ref(column)} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/**
 * The newest audit rows. The audit trail is the most polled list of the API: Postgres formats the
 * times, so no row pays for parsing a timestamp into a Date and printing it again.
 */
export async function listActions(db: Conn, limit: number): Promise<ActionView[]> {
  return db
    .selectFrom('deployment_actions')
    .select([
      'id', 'kind', 'status', 'exit_code as exitCode', 'actor', 'actor_email as actorEmail', 'detail', 'target_digest as targetDigest',
      'schema_migration as schemaMigration', 'job_id as jobId', isoUtc('created_at').as('createdAt'), isoUtc('finished_at').as('finishedAt'),
    ])
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .limit(limit)
    .execute();
}

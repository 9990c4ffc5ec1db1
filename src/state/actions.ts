// The audit trail (`deployment_actions`). Rows are written by controllers and never pruned.
import { sql, type Kysely, type Transaction } from 'kysely';
import type { ActionKind, ActionStatus, DB, DeploymentAction } from '../db/schema.ts';
import type { Database } from '../db/database.ts';
import { LazyListen } from './lazy-listen.ts';
import type { ActorKind } from '../contracts/audit.ts';
import type { RecordedActor } from '../auth/actor.ts';

type Conn = Kysely<DB> | Transaction<DB>;

export interface StartAction {
  kind: ActionKind;
  /** Who did it, with the kind the request recorded (null for a request written before kinds were kept). */
  actor: RecordedActor;
  detail?: string | null;
  jobId?: string | null;
  targetDigest?: string | null;
  schemaMigration?: string | null;
}

/**
 * NOTIFY after every write of the audit trail, sent in the writer's transaction, so delivered when
 * it commits (and not at all when it rolls back): every process that keeps pages of the trail
 * (AuditTrailPages) reads them again, whichever process wrote.
 */
export const AUDIT_CHANNEL = 'audit_changed';

const auditChanged = (db: Conn) => sql`select pg_notify(${AUDIT_CHANNEL}, '')`.execute(db);

export async function recordStarted(db: Conn, a: StartAction): Promise<DeploymentAction> {
  const row = await insertStarted(db, a);
  await auditChanged(db);
  return row;
}

async function insertStarted(db: Conn, a: StartAction): Promise<DeploymentAction> {
  return db
    .insertInto('deployment_actions')
    .values({
      kind: a.kind,
      status: 'started',
      exit_code: null,
      actor: a.actor.id,
      actor_email: a.actor.email ?? null,
      actor_kind: a.actor.kind ?? null,
      detail: a.detail ?? null,
      job_id: a.jobId ?? null,
      target_digest: a.targetDigest ?? null,
      schema_migration: a.schemaMigration ?? null,
      finished_at: null,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** An action that is done as it is recorded (an admin's change to settings): one row, `completed`. */
export async function recordCompleted(db: Conn, a: StartAction): Promise<DeploymentAction> {
  const row = await db
    .insertInto('deployment_actions')
    .values({
      kind: a.kind, status: 'completed', exit_code: null, actor: a.actor.id, actor_email: a.actor.email ?? null, actor_kind: a.actor.kind ?? null,
      detail: a.detail ?? null, job_id: a.jobId ?? null, target_digest: a.targetDigest ?? null, schema_migration: a.schemaMigration ?? null, finished_at: new Date(),
    })
    .returningAll()
    .executeTakeFirstOrThrow();
  await auditChanged(db);
  return row;
}

export async function recordFinished(
  db: Conn,
  id: string,
  outcome: { status: 'completed' | 'failed'; exitCode?: number | null; detail?: string | null },
): Promise<DeploymentAction | undefined> {
  const row = await updateFinished(db, id, outcome);
  if (row) await auditChanged(db);
  return row;
}

async function updateFinished(
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

/** A timestamptz as ISO 8601 in UTC with milliseconds, formatted by Postgres (as Date#toISOString would). */
const isoUtc = (column: string) => sql<string>`to_char(${sql.ref(column)} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/** The columns of an audit row as the API shows them, times formatted by Postgres. */
function selectActions(db: Conn) {
  return db
    .selectFrom('deployment_actions')
    .select([
      'id', 'kind', 'status', 'exit_code as exitCode', 'actor', 'actor_email as actorEmail', 'detail', 'target_digest as targetDigest',
      'schema_migration as schemaMigration', 'job_id as jobId', isoUtc('created_at').as('createdAt'), isoUtc('finished_at').as('finishedAt'),
      'actor_kind as actorKind',
    ])
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc');
}

/**
 * The newest audit rows. The audit trail is the most polled list of the API: Postgres formats the
 * times, so no row pays for parsing a timestamp into a Date and printing it again.
 */
export async function listActions(db: Conn, limit: number) {
  return selectActions(db).limit(limit).execute();
}

/** What an auditor narrows the trail to; every field is optional and they combine with AND. */
export interface ActionFilter {
  /** Exactly this actor. */
  actor?: string;
  /** Any of these kinds of actor. */
  actorKinds?: readonly ActorKind[];
  /** Any of these kinds. */
  kinds?: readonly ActionKind[];
  status?: ActionStatus;
  /** Rows created at or after this instant (a timestamptz literal, microseconds at most). */
  since?: string;
  /** Rows created at or before this instant (a timestamptz literal, microseconds at most). */
  until?: string;
}

/**
 * A page of the audit trail in its usual order (newest first: creation time, then id), filtered,
 * and starting after the row `before` when given (keyset paging: rows inserted meanwhile are newer
 * than any cursor, so they never shift a later page). Reads `limit` rows.
 */
export async function listActionsPage(db: Conn, filter: ActionFilter, page: { before?: string; limit: number }) {
  let q = selectActions(db);
  if (filter.actor !== undefined) q = q.where('actor', '=', filter.actor);
  if (filter.kinds?.length) q = q.where('kind', 'in', [...filter.kinds]);
  if (filter.actorKinds?.length) q = q.where('actor_kind', 'in', [...filter.actorKinds]);
  if (filter.status !== undefined) q = q.where('status', '=', filter.status);
  if (filter.since !== undefined) q = q.where('created_at', '>=', sql<Date>`${filter.since}::timestamptz`);
  if (filter.until !== undefined) q = q.where('created_at', '<=', sql<Date>`${filter.until}::timestamptz`);
  if (page.before !== undefined) {
    const before = page.before;
    q = q.where(({ eb, refTuple, selectFrom }) =>
      eb(refTuple('created_at', 'id'), '<', selectFrom('deployment_actions as cursor').select(['cursor.created_at', 'cursor.id']).where('cursor.id', '=', before).$asTuple('created_at', 'id')),
    );
  }
  return q.limit(page.limit).execute();
}

/** Whether an audit row with this id exists (a cursor must name one). */
/** The newest audit row of each kind (the status page's "last action" per kind). */
export async function lastActionOfEachKind(db: Conn) {
  return db
    .selectFrom('deployment_actions')
    .distinctOn('kind')
    .select(['kind', 'status', 'actor', 'created_at', 'exit_code', 'detail'])
    .orderBy('kind')
    .orderBy('created_at', 'desc')
    .orderBy('id', 'desc')
    .execute();
}

export async function actionExists(db: Conn, id: string): Promise<boolean> {
  return (await db.selectFrom('deployment_actions').select('id').where('id', '=', id).executeTakeFirst()) !== undefined;
}

/** An audit row as listActions reads it: the API's shape, times already ISO 8601 UTC strings. */
export type ActionRow = Awaited<ReturnType<typeof listActions>>[number];

/** How long a page of the audit trail is reused by default (the AUDIT_CACHE_MS setting). */
export const AUDIT_CACHE_MS_DEFAULT = 250;

interface Page {
  /** The rendered answer as UTF-8 bytes, or the read still in flight (callers meanwhile share it). */
  body: Promise<Buffer>;
  /** The same bytes, once the read has succeeded. */
  ready?: Buffer;
  /** When the read started (performance.now()), and the notifications heard by then. */
  at: number;
  heard: number;
}

/** LISTEN on a channel: calls `onNotify` for each notification; resolves with the unlisten. */
export type Listen = Database['listen'];

/**
 * Pages of the audit trail, rendered once and reused for `maxAgeMs` (docs/adr/0014-audit-trail-reads.md).
 * The audit list is the API's most polled read and changes a few times per job: callers within the
 * same quarter second share one query and one rendering. A page is served again only while no
 * write of the trail has been heard since its read began (NOTIFY on AUDIT_CHANNEL, whichever
 * process wrote), so a write shows as soon as its notification arrives; a notification lost while
 * the LISTEN reconnects shows within `maxAgeMs`. Nothing is reused until the LISTEN is open. A
 * failed read is not kept: each caller gets the error (503 when the database is down). `maxAgeMs`
 * 0: every call reads.
 */
export class AuditTrailPages {
  private readonly pages = new Map<number, Page>();
  /** For each rendered page: the id of its last row when older rows exist (the `before` of the next page), else null. */
  private readonly cursors = new WeakMap<Buffer, string | null>();
  private static readonly MAX_PAGES = 16;
  /** Notifications of writes heard so far. */
  private heard = 0;
  /** The LISTEN, opened at the first read. */
  private readonly writes: LazyListen;

  constructor(
    private readonly db: Conn,
    private readonly render: (rows: ActionRow[]) => string,
    listen: Listen,
    private readonly maxAgeMs = AUDIT_CACHE_MS_DEFAULT,
  ) {
    this.writes = new LazyListen(listen, AUDIT_CHANNEL, () => {
      this.heard++;
    });
  }

  /** The page of `limit` rows if one is read and still fresh: most polls are answered without a promise. */
  ready(limit: number): Buffer | undefined {
    const hit = this.pages.get(limit);
    return hit?.ready && this.fresh(hit, performance.now()) ? hit.ready : undefined;
  }

  /** A page may be served while no write has been heard since its read began and it is younger than the age. */
  private fresh(page: Page, now: number): boolean {
    return this.writes.open && page.heard === this.heard && now - page.at < this.maxAgeMs;
  }

  /** Opens the LISTEN now rather than at the first read; rejects when it cannot be opened. */
  start(): Promise<void> {
    return this.writes.start();
  }

  /** Notifications of writes heard so far. */
  get writesHeard(): number {
    return this.heard;
  }

  /** Stops listening (the app closes). */
  close(): Promise<void> {
    return this.writes.close();
  }

  /** The page of `limit` rows as JSON, encoded once: every caller is sent the same bytes. */
  json(limit: number): Promise<Buffer> {
    if (this.maxAgeMs <= 0) return this.read(limit);
    // Until the LISTEN is open (or when it cannot be), every call reads.
    if (!this.writes.open) {
      this.writes.start().catch(() => {});
      return this.read(limit);
    }
    const now = performance.now();
    const hit = this.pages.get(limit);
    if (hit && this.fresh(hit, now)) return hit.body;
    if (!hit && this.pages.size >= AuditTrailPages.MAX_PAGES) this.pages.clear();
    const page: Page = { at: now, heard: this.heard, body: this.read(limit) };
    this.pages.set(limit, page);
    page.body.then(
      (body) => {
        page.ready = body;
      },
      () => {
        if (this.pages.get(limit) === page) this.pages.delete(limit);
      },
    );
    return page.body;
  }

  /**
   * The cursor of the page `body` (from ready() or json()): the id to pass as `before` for the next
   * older page, or null when the page holds the oldest row.
   */
  nextBefore(body: Buffer): string | null {
    return this.cursors.get(body) ?? null;
  }

  private async read(limit: number): Promise<Buffer> {
    // One row more than the page: whether an older page exists comes with the same query.
    const rows = await listActions(this.db, limit + 1);
    const page = rows.slice(0, limit);
    const body = Buffer.from(this.render(page), 'utf8');
    this.cursors.set(body, rows.length > limit ? String(page.at(-1)!.id) : null);
    return body;
  }
}

// Outbound notifications (docs/notifications.md): webhook endpoints (admins' settings, the secret
// sealed with the encryption key) and the outbox, one row per event per endpoint. An event is
// queued in the transaction of the change that caused it, so it is never lost nor invented by a
// crash; the notifications reconciler claims due rows with FOR UPDATE SKIP LOCKED and records
// each attempt on the row. An event is queued at most once per endpoint (unique event id), under a
// key derived from the endpoint and the event, and each endpoint's events go out in their order.
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { sql, type Kysely, type Transaction } from 'kysely';
import type { DB } from '../db/schema.ts';
import type { Actor } from '../auth/actor.ts';
import type { DeliveryStatus, NotificationBody, NotificationEvent } from '../contracts/notifications.ts';
import { badRequest, notFound } from '../errors.ts';
import { describeRefusal, literalHost, localNetworks, refusalOf, RULE_TEXT } from '../webhook-targets.ts';
import { recordCompleted } from './actions.ts';
import type { Sealer } from './platform-config.ts';

type Conn = Kysely<DB> | Transaction<DB>;

export const NOTIFICATIONS_CHANNEL = 'notification_outbox';

/** How the error of a delivery refused by the address rule begins (src/adapters/webhook-sender.ts). */
export const REFUSED_PREFIX = 'refused: ';

export interface NotificationInput {
  type: NotificationEvent;
  /** Names the event once: the same cause written twice queues nothing the second time. */
  eventId: string;
  data: Record<string, unknown>;
}

/**
 * The delivery key (`x-installer-delivery`) of an event for one endpoint: derived from both ids, so
 * an event recorded again (observed again after a restore, say) carries the key it had the first
 * time and the receiver's deduplication holds. The first 16 bytes of SHA-256, as a version-8 UUID.
 */
export function deliveryKey(endpointId: string, eventId: string): string {
  const b = createHash('sha256').update(`${endpointId}\n${eventId}`).digest().subarray(0, 16);
  b[6] = (b[6]! & 0x0f) | 0x80;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/**
 * Held from an event's insert to its commit: outbox ids then follow the order in which events are
 * committed, so sending each endpoint's rows in id order sends them in the order they happened
 * (an earlier id can never become visible after a later one was sent).
 */
async function lockOutboxOrder(db: Conn): Promise<void> {
  await sql`select pg_advisory_xact_lock(hashtext('installer.notification-outbox'))`.execute(db);
}

/**
 * Queues the event for every enabled endpoint and wakes the delivery loop (at commit). Call it with
 * the transaction that writes the change the event reports. Returns how many rows were queued.
 */
export async function enqueueNotification(db: Conn, n: NotificationInput): Promise<number> {
  const write = async (tx: Conn) => {
    await lockOutboxOrder(tx);
    const endpoints = await tx.selectFrom('webhook_endpoints').select('id').where('enabled', '=', true).orderBy('id').execute();
    if (!endpoints.length) return 0;
    const body: NotificationBody = { id: n.eventId, type: n.type, occurredAt: new Date().toISOString(), data: n.data };
    const res = await tx
      .insertInto('notification_outbox')
      .values(endpoints.map((e) => ({ endpoint_id: e.id, event_id: n.eventId, idempotency_key: deliveryKey(e.id, n.eventId), event_type: n.type, body: JSON.stringify(body) })))
      .onConflict((oc) => oc.columns(['endpoint_id', 'event_id']).doNothing())
      .returning('id')
      .execute();
    if (res.length) await sql`select pg_notify(${NOTIFICATIONS_CHANNEL}, ${n.eventId})`.execute(tx);
    return res.length;
  };
  return db.isTransaction ? write(db) : db.transaction().execute(write);
}

// ---------------------------------------------------------------------------------------------
// Endpoints

export interface EndpointView {
  id: string;
  url: string;
  enabled: boolean;
  allowPrivateNetwork: boolean;
  createdBy: string;
  createdAt: Date;
  updatedAt: Date;
}

const endpointColumns = ['id', 'url', 'enabled', 'allow_private_network', 'created_by', 'created_at', 'updated_at'] as const;
type EndpointRow = { id: string; url: string; enabled: boolean; allow_private_network: boolean; created_by: string; created_at: Date; updated_at: Date };
const toEndpoint = (r: EndpointRow): EndpointView => ({
  id: r.id, url: r.url, enabled: r.enabled, allowPrivateNetwork: r.allow_private_network, createdBy: r.created_by, createdAt: new Date(r.created_at), updatedAt: new Date(r.updated_at),
});

/**
 * A webhook URL as the audit trail and the logs show it: its origin only. Many receivers put a
 * token in the path or query (chat webhooks do), and viewers read the audit trail.
 */
export function urlForAudit(url: string): string {
  try {
    const u = new URL(url);
    return u.pathname === '/' && !u.search ? u.origin : `${u.origin}/…`;
  } catch {
    return '(invalid URL)';
  }
}

/**
 * Refuses (400, naming the rule) a URL whose host is an IP literal a webhook may not reach, unless
 * the endpoint allows private networks. A host name is judged at delivery, on every connection,
 * after it is resolved: what it resolves to now says nothing of what it will resolve to then.
 */
export function assertReachable(url: string, allowPrivateNetwork: boolean): void {
  if (allowPrivateNetwork) return;
  const literal = literalHost(url);
  const refusal = literal ? refusalOf(literal, localNetworks()) : null;
  if (refusal) throw badRequest(`url ${describeRefusal(refusal)}: ${RULE_TEXT}`);
}

/** A new signing secret: 32 random bytes, hex, with a prefix that says what it is. */
export function newWebhookSecret(): string {
  return `whsec_${randomBytes(32).toString('hex')}`;
}

export async function listEndpoints(db: Conn): Promise<EndpointView[]> {
  const rows = await db.selectFrom('webhook_endpoints').select(endpointColumns).orderBy('created_at').execute();
  return rows.map((r) => toEndpoint(r as EndpointRow));
}

/** Adds an endpoint, enabled, and records it in the audit trail. The secret is returned here only. */
export async function addEndpoint(db: Kysely<DB>, sealer: Sealer, input: { url: string; allowPrivateNetwork?: boolean; actor: Actor }): Promise<{ endpoint: EndpointView; secret: string }> {
  const allow = input.allowPrivateNetwork ?? false;
  assertReachable(input.url, allow);
  const secret = newWebhookSecret();
  const id = randomUUID();
  const row = await db.transaction().execute(async (tx) => {
    const r = await tx
      .insertInto('webhook_endpoints')
      .values({ id, url: input.url, secret_sealed: sealer.seal(secret), allow_private_network: allow, created_by: input.actor.id })
      .returning(endpointColumns)
      .executeTakeFirstOrThrow();
    await recordCompleted(tx, { kind: 'webhook', actor: input.actor, detail: `added webhook ${id} (${urlForAudit(input.url)})${allow ? ', private network allowed' : ''}` });
    return r;
  });
  return { endpoint: toEndpoint(row as EndpointRow), secret };
}

/**
 * Changes an endpoint's URL, enables/disables it, or allows or stops allowing private networks;
 * audited. 404 for an unknown id; 400 when the result would aim at an address it may not reach.
 */
export async function changeEndpoint(db: Kysely<DB>, id: string, change: { url?: string; enabled?: boolean; allowPrivateNetwork?: boolean }, actor: Actor): Promise<EndpointView> {
  return db.transaction().execute(async (tx) => {
    const before = await tx.selectFrom('webhook_endpoints').select(endpointColumns).where('id', '=', id).forUpdate().executeTakeFirst();
    if (!before) throw notFound(`no webhook endpoint ${id}`);
    // Judged when the destination or its allowance changes: an endpoint added before the rule can
    // still be disabled or enabled as it is (its deliveries are refused until it is allowed).
    if (change.url !== undefined || change.allowPrivateNetwork !== undefined) assertReachable(change.url ?? before.url, change.allowPrivateNetwork ?? before.allow_private_network);
    const after = await tx
      .updateTable('webhook_endpoints')
      .set({
        ...(change.url !== undefined ? { url: change.url } : {}),
        ...(change.enabled !== undefined ? { enabled: change.enabled } : {}),
        ...(change.allowPrivateNetwork !== undefined ? { allow_private_network: change.allowPrivateNetwork } : {}),
        updated_at: new Date(),
      })
      .where('id', '=', id)
      .returning(endpointColumns)
      .executeTakeFirstOrThrow();
    const what: string[] = [];
    const urlChanged = change.url !== undefined && change.url !== before.url;
    const allowChanged = change.allowPrivateNetwork !== undefined && change.allowPrivateNetwork !== before.allow_private_network;
    if (urlChanged) what.push(`url ${urlForAudit(before.url)} -> ${urlForAudit(change.url!)}`);
    if (allowChanged) what.push(change.allowPrivateNetwork ? 'private network allowed' : 'private network no longer allowed');
    if (change.enabled !== undefined && change.enabled !== before.enabled) what.push(change.enabled ? 'enabled' : 'disabled');
    if (what.length) await recordCompleted(tx, { kind: 'webhook', actor, detail: `changed webhook ${id}: ${what.join(', ')}` });
    // A new destination, or one now allowed: what it is still owed (deliveries refused meanwhile
    // wait at the longest retry delay) is due now.
    if (urlChanged || allowChanged) {
      await tx.updateTable('notification_outbox').set({ next_attempt_at: sql`now()` }).where('endpoint_id', '=', id).where('delivered_at', 'is', null).where('failed_at', 'is', null).where('last_error', 'like', `${REFUSED_PREFIX}%`).execute();
    }
    // Enabled again (or due now): wake the delivery loop.
    if (change.enabled || urlChanged || allowChanged) await sql`select pg_notify(${NOTIFICATIONS_CHANNEL}, ${id})`.execute(tx);
    return toEndpoint(after as EndpointRow);
  });
}

/** Removes an endpoint and what it was still owed; audited. 404 for an unknown id. */
export async function removeEndpoint(db: Kysely<DB>, id: string, actor: Actor): Promise<void> {
  await db.transaction().execute(async (tx) => {
    const r = await tx.deleteFrom('webhook_endpoints').where('id', '=', id).returning('url').executeTakeFirst();
    if (!r) throw notFound(`no webhook endpoint ${id}`);
    await recordCompleted(tx, { kind: 'webhook', actor, detail: `removed webhook ${id} (${urlForAudit(r.url)})` });
  });
}

/** Queues a `test` event for one endpoint (enabled or not: an admin checks it before enabling). */
export async function enqueueTest(db: Kysely<DB>, id: string, actor: Actor): Promise<{ eventId: string; idempotencyKey: string }> {
  return db.transaction().execute(async (tx) => {
    const ep = await tx.selectFrom('webhook_endpoints').select(['id', 'url']).where('id', '=', id).executeTakeFirst();
    if (!ep) throw notFound(`no webhook endpoint ${id}`);
    const eventId = `test:${randomUUID()}`;
    const idempotencyKey = deliveryKey(id, eventId);
    await lockOutboxOrder(tx);
    const body: NotificationBody = { id: eventId, type: 'test', occurredAt: new Date().toISOString(), data: { endpointId: id, requestedBy: actor.id } };
    await tx
      .insertInto('notification_outbox')
      .values({ endpoint_id: id, event_id: eventId, idempotency_key: idempotencyKey, event_type: 'test', body: JSON.stringify(body) })
      .execute();
    await recordCompleted(tx, { kind: 'webhook', actor, detail: `test event for webhook ${id} (${urlForAudit(ep.url)})` });
    await sql`select pg_notify(${NOTIFICATIONS_CHANNEL}, ${eventId})`.execute(tx);
    return { eventId, idempotencyKey };
  });
}

// ---------------------------------------------------------------------------------------------
// Deliveries

export interface DeliveryView {
  id: string;
  endpointId: string;
  endpointUrl: string;
  eventId: string;
  eventType: string;
  idempotencyKey: string;
  status: DeliveryStatus;
  attempts: number;
  nextAttemptAt: Date | null;
  lastAttemptAt: Date | null;
  lastStatus: number | null;
  lastError: string | null;
  deliveredAt: Date | null;
  failedAt: Date | null;
  createdAt: Date;
}

const date = (d: Date | string | null) => (d === null ? null : new Date(d));

export async function listDeliveries(db: Conn, opts: { limit: number; endpointId?: string; status?: DeliveryStatus }): Promise<DeliveryView[]> {
  let q = db
    .selectFrom('notification_outbox as o')
    .innerJoin('webhook_endpoints as e', 'e.id', 'o.endpoint_id')
    .select([
      'o.id', 'o.endpoint_id', 'e.url', 'o.event_id', 'o.event_type', 'o.idempotency_key', 'o.attempts', 'o.next_attempt_at', 'o.last_attempt_at',
      'o.last_status', 'o.last_error', 'o.delivered_at', 'o.failed_at', 'o.created_at',
    ])
    .orderBy('o.created_at', 'desc')
    .orderBy('o.id', 'desc')
    .limit(opts.limit);
  if (opts.endpointId) q = q.where('o.endpoint_id', '=', opts.endpointId);
  if (opts.status === 'delivered') q = q.where('o.delivered_at', 'is not', null);
  if (opts.status === 'failed') q = q.where('o.failed_at', 'is not', null);
  if (opts.status === 'pending') q = q.where('o.delivered_at', 'is', null).where('o.failed_at', 'is', null);
  return (await q.execute()).map((r) => ({
    id: String(r.id),
    endpointId: r.endpoint_id,
    endpointUrl: r.url,
    eventId: r.event_id,
    eventType: r.event_type,
    idempotencyKey: r.idempotency_key,
    status: r.delivered_at ? 'delivered' : r.failed_at ? 'failed' : 'pending',
    attempts: r.attempts,
    nextAttemptAt: r.delivered_at || r.failed_at ? null : date(r.next_attempt_at),
    lastAttemptAt: date(r.last_attempt_at),
    lastStatus: r.last_status,
    lastError: r.last_error,
    deliveredAt: date(r.delivered_at),
    failedAt: date(r.failed_at),
    createdAt: new Date(r.created_at),
  }));
}

/**
 * The row is the oldest its endpoint is still owed: each endpoint's events go out in their order,
 * a later one only once every earlier one is delivered or has failed for good.
 */
const firstOwed = sql<boolean>`not exists (
  select 1 from notification_outbox p
  where p.endpoint_id = o.endpoint_id and p.id < o.id and p.delivered_at is null and p.failed_at is null)`;

export interface ClaimedDelivery {
  id: string;
  url: string;
  allowPrivateNetwork: boolean;
  secretSealed: string;
  eventType: string;
  idempotencyKey: string;
  body: string;
  attempts: number;
}

/**
 * Claims the next due delivery of an enabled endpoint, the first it is owed: counts the attempt and moves its next
 * attempt `leaseMs` ahead, so no other worker takes it while this one sends. A worker killed
 * mid-send leaves the row due again once the lease has run out (the receiver may then see the
 * same key twice: that is what the key is for).
 */
export async function claimNextDelivery(db: Kysely<DB>, leaseMs: number): Promise<ClaimedDelivery | undefined> {
  return db.transaction().execute(async (tx) => {
    const row = await tx
      .selectFrom('notification_outbox as o')
      .innerJoin('webhook_endpoints as e', 'e.id', 'o.endpoint_id')
      .select(['o.id', 'e.url', 'e.allow_private_network', 'e.secret_sealed', 'o.event_type', 'o.idempotency_key', 'o.body', 'o.attempts'])
      .where('o.delivered_at', 'is', null)
      .where('o.failed_at', 'is', null)
      .where('o.next_attempt_at', '<=', sql<Date>`now()`)
      .where('e.enabled', '=', true)
      .where(firstOwed)
      .orderBy('o.next_attempt_at')
      .orderBy('o.id')
      .limit(1)
      .forUpdate('o')
      .skipLocked()
      .executeTakeFirst();
    if (!row) return undefined;
    await tx
      .updateTable('notification_outbox')
      .set({ attempts: sql`attempts + 1`, last_attempt_at: sql`now()`, next_attempt_at: sql`now() + make_interval(secs => ${leaseMs / 1000})` })
      .where('id', '=', row.id)
      .execute();
    return {
      id: String(row.id), url: row.url, allowPrivateNetwork: row.allow_private_network, secretSealed: row.secret_sealed, eventType: row.event_type, idempotencyKey: row.idempotency_key, body: row.body,
      attempts: row.attempts + 1,
    };
  });
}

/** The receiver answered 2xx: the row is done. */
export async function markDelivered(db: Conn, id: string, status: number): Promise<void> {
  await db.updateTable('notification_outbox').set({ delivered_at: sql`now()`, last_status: status, last_error: null }).where('id', '=', id).execute();
}

/**
 * The attempt failed: try again in `retryInMs`, unless the row is older than `giveUpMs`, in which
 * case it is marked failed (and shown so by the API). True when it gave up.
 */
export async function markAttemptFailed(db: Conn, id: string, f: { status: number | null; error: string; retryInMs: number; giveUpMs: number }): Promise<boolean> {
  const row = await db
    .updateTable('notification_outbox')
    .set({
      last_status: f.status,
      last_error: f.error.slice(0, 500),
      next_attempt_at: sql`now() + make_interval(secs => ${f.retryInMs / 1000})`,
      failed_at: sql`case when created_at + make_interval(secs => ${f.giveUpMs / 1000}) <= now() then now() end`,
    })
    .where('id', '=', id)
    .where('delivered_at', 'is', null)
    .returning('failed_at')
    .executeTakeFirst();
  return !!row?.failed_at;
}

/** Milliseconds until the next claimable delivery (the first an enabled endpoint is owed) is due (0 if one is due), or null when none is owed. */
export async function nextDeliveryInMs(db: Conn): Promise<number | null> {
  const r = await db
    .selectFrom('notification_outbox as o')
    .innerJoin('webhook_endpoints as e', 'e.id', 'o.endpoint_id')
    .select(sql<number | null>`extract(epoch from min(o.next_attempt_at) - now()) * 1000`.as('ms'))
    .where('o.delivered_at', 'is', null)
    .where('o.failed_at', 'is', null)
    .where('e.enabled', '=', true)
    .where(firstOwed)
    .executeTakeFirst();
  return r?.ms === null || r?.ms === undefined ? null : Math.max(0, Number(r.ms));
}

/** How long delivered and failed outbox rows are kept (pruned by the retention passes, src/state/retention.ts). */
export const OUTBOX_RETENTION_DAYS = 30;

// Outbound notifications (docs/notifications.md): the webhook endpoints admins add, and an outbox
// with one row per event per endpoint, written in the same transaction as the change that caused
// the event, so that no event is lost across a restart. The delivery reconciler claims due rows
// (FOR UPDATE SKIP LOCKED) and records every attempt on the row.
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('webhook_endpoints')
    .addColumn('id', 'uuid', (c) => c.primaryKey())
    .addColumn('url', 'text', (c) => c.notNull())
    // Sealed with the installer's encryption key; shown once, when the endpoint is added.
    .addColumn('secret_sealed', 'text', (c) => c.notNull())
    .addColumn('enabled', 'boolean', (c) => c.notNull().defaultTo(true))
    .addColumn('created_by', 'text', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable('notification_outbox')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('endpoint_id', 'uuid', (c) => c.notNull().references('webhook_endpoints.id').onDelete('cascade'))
    // What happened, once: `job.failed:<jobId>`, `update.available:<digest>`, … An event is queued
    // at most once per endpoint, however often its cause is written again.
    .addColumn('event_id', 'text', (c) => c.notNull())
    // Sent as x-installer-delivery; the same on every attempt of this row.
    .addColumn('idempotency_key', 'uuid', (c) => c.notNull().unique())
    .addColumn('event_type', 'text', (c) => c.notNull())
    .addColumn('body', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('next_attempt_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('last_attempt_at', 'timestamptz')
    .addColumn('last_status', 'integer')
    .addColumn('last_error', 'text')
    .addColumn('delivered_at', 'timestamptz')
    .addColumn('failed_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('notification_outbox_event').on('notification_outbox').columns(['endpoint_id', 'event_id']).unique().execute();
  // The delivery loop's claim: rows still owed, by due time.
  await sql`create index notification_outbox_due on notification_outbox (next_attempt_at) where delivered_at is null and failed_at is null`.execute(db);
  await db.schema.createIndex('notification_outbox_recent').on('notification_outbox').columns(['created_at desc']).execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

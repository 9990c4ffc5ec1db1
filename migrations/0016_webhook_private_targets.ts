// Webhooks may not reach loopback, link-local, private or reserved addresses, nor the installer's
// own networks, unless an admin allows it on the endpoint (docs/notifications.md). The flag is
// off for every endpoint, including the ones added before this rule: an endpoint on a private
// network waits (its deliveries are refused, and say why) until an admin allows it. Expand-only:
// an older build ignores the column.
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('webhook_endpoints')
    .addColumn('allow_private_network', 'boolean', (c) => c.notNull().defaultTo(sql`false`))
    .execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

// Sign-in security (docs/adr/0016-user-management.md): sign-in attempts counted in the database,
// so that every API process on it shares the same counters, and the ids of signed-out tokens,
// refused until they expire. Both tables only grow by rows pruned once they no longer matter.
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('sign_in_counters')
    .addColumn('key', 'text', (c) => c.primaryKey())
    .addColumn('window_start', 'timestamptz', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('sign_in_counters_window_start').on('sign_in_counters').column('window_start').execute();

  await db.schema
    .createTable('revoked_tokens')
    .addColumn('jti', 'text', (c) => c.primaryKey())
    .addColumn('user_id', 'integer', (c) => c.notNull().references('users.id').onDelete('cascade'))
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('revoked_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('revoked_tokens_user_id').on('revoked_tokens').column('user_id').execute();
  await db.schema.createIndex('revoked_tokens_expires_at').on('revoked_tokens').column('expires_at').execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

// The declarative self-update policy (docs/update-policy.md): one desired-state row saying whether
// the installer updates itself (`manual`, `notify`, `auto` inside a weekly window in UTC), with the
// policy reconciler's status beside it, and the quarantine of builds whose update did not stick.
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('update_policy')
    // One row: the policy of this installer.
    .addColumn('id', 'smallint', (c) => c.primaryKey().defaultTo(1).check(sql`id = 1`))
    .addColumn('mode', 'text', (c) => c.notNull().defaultTo('manual').check(sql`mode in ('manual', 'notify', 'auto')`))
    // Days of the week the window opens on (0 = Sunday … 6 = Saturday, as getUTCDay), sorted, no repeats.
    .addColumn('window_days', 'jsonb', (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn('window_start_hour', 'smallint', (c) => c.notNull().defaultTo(2).check(sql`window_start_hour between 0 and 23`))
    .addColumn('window_end_hour', 'smallint', (c) => c.notNull().defaultTo(5).check(sql`window_end_hour between 1 and 24`))
    .addColumn('generation', 'integer', (c) => c.notNull().defaultTo(1))
    .addColumn('updated_by', 'text')
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    // Status, written by the policy reconciler only.
    .addColumn('observed_generation', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('decision', 'text')
    .addColumn('decision_detail', 'text')
    .addColumn('decided_at', 'timestamptz')
    .addColumn('available_digest', 'text')
    .addColumn('available_since', 'timestamptz')
    .addColumn('last_attempt_digest', 'text')
    .addColumn('last_attempt_at', 'timestamptz')
    .addColumn('last_attempt_request_id', 'uuid')
    .addCheckConstraint('update_policy_window_not_empty', sql`window_start_hour <> window_end_hour`)
    .execute();
  await sql`insert into update_policy (id) values (1)`.execute(db);

  await db.schema
    .createTable('update_quarantine')
    .addColumn('digest', 'text', (c) => c.primaryKey())
    // The self-update phase that put it here: rolled-back, neither or undecided.
    .addColumn('outcome', 'text', (c) => c.notNull())
    .addColumn('detail', 'text')
    .addColumn('request_id', 'uuid')
    .addColumn('since', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('lifted_at', 'timestamptz')
    .addColumn('lifted_by', 'text')
    .execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

// Initial schema: users, the audit trail, jobs (desired state + observed status), job events,
// desired platform configuration, settings.
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('users')
    .addColumn('id', 'serial', (c) => c.primaryKey())
    .addColumn('username', 'text', (c) => c.notNull().unique())
    .addColumn('password_hash', 'text', (c) => c.notNull())
    .addColumn('role', 'text', (c) => c.notNull().check(sql`role in ('viewer', 'operator', 'admin')`))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable('deployment_actions')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull().check(sql`status in ('started', 'completed', 'failed')`))
    .addColumn('exit_code', 'integer')
    .addColumn('actor', 'text', (c) => c.notNull())
    .addColumn('actor_email', 'text')
    .addColumn('detail', 'text')
    .addColumn('target_digest', 'text')
    .addColumn('schema_migration', 'text')
    .addColumn('job_id', 'uuid')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('finished_at', 'timestamptz')
    .execute();
  await db.schema.createIndex('deployment_actions_newest').on('deployment_actions').columns(['created_at desc', 'id desc']).execute();
  await db.schema.createIndex('deployment_actions_kind').on('deployment_actions').columns(['kind', 'created_at desc']).execute();

  await db.schema
    .createTable('deployment_jobs')
    .addColumn('job_id', 'uuid', (c) => c.primaryKey())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('params', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn('actor', 'text', (c) => c.notNull())
    .addColumn('actor_email', 'text')
    .addColumn('generation', 'integer', (c) => c.notNull().defaultTo(1))
    .addColumn('cancel_requested_by', 'text')
    .addColumn('cancel_requested_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable('deployment_job_status')
    .addColumn('job_id', 'uuid', (c) => c.primaryKey().references('deployment_jobs.job_id').onDelete('cascade'))
    .addColumn('phase', 'text', (c) => c.notNull().check(sql`phase in ('queued', 'running', 'completed', 'failed')`))
    .addColumn('conditions', 'jsonb', (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn('snapshot', 'jsonb')
    .addColumn('chart_version', 'text')
    .addColumn('claimed_by', 'text')
    .addColumn('started_at', 'timestamptz')
    .addColumn('finished_at', 'timestamptz')
    .addColumn('exit_code', 'integer')
    .addColumn('detail', 'text')
    .addColumn('last_output_at', 'timestamptz')
    .addColumn('hung_deadline', 'timestamptz')
    .addColumn('runner_pid', 'integer')
    .addColumn('next_seq', 'integer', (c) => c.notNull().defaultTo(1))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('deployment_job_status_phase').on('deployment_job_status').column('phase').execute();

  await db.schema
    .createTable('deployment_job_events')
    .addColumn('job_id', 'uuid', (c) => c.notNull())
    .addColumn('seq', 'integer', (c) => c.notNull())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('payload', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn('at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('deployment_job_events_pk', ['job_id', 'seq'])
    .execute();
  await db.schema.createIndex('deployment_job_events_at').on('deployment_job_events').column('at').execute();

  // Desired platform configuration: .env keys to set (value encrypted) or remove, applied to the
  // platform's .env by the next apply-config or deploy.
  await db.schema
    .createTable('platform_config_changes')
    .addColumn('key', 'text', (c) => c.primaryKey())
    .addColumn('value_encrypted', 'text')
    .addColumn('remove', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('updated_by', 'text', (c) => c.notNull())
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable('installer_settings')
    .addColumn('key', 'text', (c) => c.primaryKey())
    .addColumn('value', 'jsonb', (c) => c.notNull())
    .addColumn('updated_by', 'text')
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

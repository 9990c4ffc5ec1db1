// Observed state: what the controllers last saw of the world outside the database (engine,
// registry, the platform's and the installer's containers), one row per observed thing, so that
// the API answers from the database and never reaches the engine on a read
// (docs/adr/0023-observed-state.md). A reader asks for a fresh observation by bumping
// `requested_generation`; the observer copies the generation it served into `observed_generation`.
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('observed_state')
    .addColumn('key', 'text', (c) => c.primaryKey())
    .addColumn('data', 'jsonb', (c) => c.notNull().defaultTo(sql`'{}'::jsonb`))
    .addColumn('conditions', 'jsonb', (c) => c.notNull().defaultTo(sql`'[]'::jsonb`))
    .addColumn('observed_at', 'timestamptz')
    .addColumn('requested_generation', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('observed_generation', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('refresh_requested_at', 'timestamptz')
    .execute();
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

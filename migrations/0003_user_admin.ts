// Users managed from the API: a user can be disabled, must choose a password after an admin set
// one (or at first sign-in of the generated admin), and carries a token generation that every
// sign-in token names, so a change of password, role or status ends the tokens issued before it.
import { sql, type Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('users')
    .addColumn('disabled_at', 'timestamptz')
    .addColumn('must_change_password', 'boolean', (c) => c.notNull().defaultTo(false))
    .addColumn('token_generation', 'integer', (c) => c.notNull().defaultTo(1))
    .execute();
  // Changes to users wake every installer process on this database (channel installer_users).
  await sql`comment on column users.token_generation is 'bumped on password, role or status change; tokens carry it as gen'`.execute(db);
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

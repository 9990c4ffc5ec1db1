// A self-update whose outcome could not be read (the engine or the database did not answer through
// every attempt of the boot reconciliation) is closed as `undecided`, so that it no longer counts
// as in flight (docs/adr/0010-self-update.md). The phase check gains that value.
import { sql, type Kysely } from 'kysely';

const PHASES = ['requested', 'preflight', 'newest', 'unresolved', 'aborted', 'helper-running', 'completed', 'rolled-back', 'neither', 'undecided'];

export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table self_update_status drop constraint if exists self_update_status_phase_check`.execute(db);
  await sql`alter table self_update_status add constraint self_update_status_phase_check check (phase in (${sql.join(PHASES.map((p) => sql.lit(p)))}))`.execute(db);
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

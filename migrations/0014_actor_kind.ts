// Who vouched for an actor: a local user, a person the control plane forwarded, the control plane
// itself, or the installer (docs/adr/0039-actor-kinds-and-config-reveal.md). Expand only: nullable
// columns, so the previous build keeps writing its rows during a self-update (they read as of an
// unknown kind), and rows written before this migration keep theirs unknown rather than guessed.
import type { Kysely } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  for (const table of ['deployment_actions', 'deployment_jobs', 'self_update_requests']) {
    await db.schema.alterTable(table).addColumn('actor_kind', 'text').execute();
  }
}

export async function down(): Promise<void> {
  // No down-migrations: a release that cannot tolerate this schema is not rollbackable (spec).
  throw new Error('down-migrations are not supported');
}

// The backups that unresolved schema alarms name (docs/adr/0045-migrations-checked-for-the-old-build.md):
// an update that rolled back onto a changed schema names the backup taken before it as the way back.
// The alarm stays unresolved until a later self-update completes: the installer then runs a build
// that knows the schema, or the operator restored and updated again. Until then count-based
// retention never removes that backup.
import { sql, type Kysely, type Transaction } from 'kysely';
import type { DB } from '../db/schema.ts';

/** The backup files of rolled-back updates whose detail starts with `alarm` and after which no update completed. */
export async function alarmedBackups(db: Kysely<DB> | Transaction<DB>, alarm: string): Promise<string[]> {
  const rows = await db
    .selectFrom('self_update_status as s')
    .select('s.backup_file')
    .where('s.phase', '=', 'rolled-back')
    .where('s.backup_file', 'is not', null)
    .where(sql<boolean>`starts_with(s.detail, ${alarm})`)
    .where(({ not, exists, selectFrom }) =>
      not(exists(selectFrom('self_update_status as later').select(sql`1`.as('one')).where('later.phase', '=', 'completed').whereRef('later.created_at', '>', 's.created_at'))),
    )
    .orderBy('s.created_at')
    .execute();
  return rows.map((r) => r.backup_file!);
}

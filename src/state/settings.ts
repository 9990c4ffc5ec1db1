// Small key/value settings the installer keeps in its database (e.g. the host migration's vmUser).
import type { Kysely } from 'kysely';
import type { DB } from '../db/schema.ts';

export async function getSetting<T>(db: Kysely<DB>, key: string): Promise<T | undefined> {
  const row = await db.selectFrom('installer_settings').select('value').where('key', '=', key).executeTakeFirst();
  return row?.value as T | undefined;
}

export async function putSetting(db: Kysely<DB>, key: string, value: unknown, updatedBy: string | null): Promise<void> {
  const json = JSON.stringify(value);
  await db
    .insertInto('installer_settings')
    .values({ key, value: json, updated_by: updatedBy })
    .onConflict((oc) => oc.column('key').doUpdateSet({ value: json, updated_by: updatedBy, updated_at: new Date() }))
    .execute();
}

import { sql, type Kysely } from 'kysely';
import type { DB } from '../db/schema.ts';

/** True when the database answers a trivial query within the timeout. */
export async function databaseUp(db: Kysely<DB>, timeoutMs = 2_000): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  try {
    return await Promise.race([sql`select 1`.execute(db).then(() => true, () => false), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

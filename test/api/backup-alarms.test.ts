// Retention never removes a backup that an unresolved schema alarm names
// (docs/adr/0045-migrations-checked-for-the-old-build.md): preflight hands the backups of updates that
// rolled back onto a changed schema, with no completed update after them, to the backup as ones to
// keep; a later completed update resolves them. The removal itself is tested on the real engine
// (test/e2e/database-backup-edges.test.ts) and for the embedded database (test/unit/database-backup.test.ts).
import { afterEach, describe, expect, it } from 'vitest';
import { sql, type Kysely } from 'kysely';
import { randomUUID } from 'node:crypto';
import { startSelfUpdateApp, type SelfUpdateApp } from '../helpers/api/self-update.ts';
import { TEST_SECRETS } from '../helpers/api/app.ts';
import { alarmedBackups } from '../../src/state/backup-alarms.ts';
import { CHANGED_SCHEMA, changedSchemaDetail } from '../../machines/self-update-outcome.machine.ts';
import type { DB } from '../../src/db/schema.ts';

const service = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'amy' };

/** A finished update as the outcome reconciliation leaves it, `minutesAgo` old. */
async function finished(db: Kysely<DB>, phase: 'completed' | 'rolled-back', detail: string, backup: string | null, minutesAgo: number): Promise<void> {
  const id = randomUUID();
  const at = sql`now() - make_interval(mins => ${minutesAgo})`;
  await sql`insert into self_update_requests (request_id, actor, created_at) values (${id}, 'amy', ${at})`.execute(db);
  await sql`insert into self_update_status (request_id, phase, detail, backup_file, created_at, finished_at) values (${id}, ${phase}, ${detail}, ${backup}, ${at}, ${at})`.execute(db);
}

describe('backups named by an unresolved schema alarm', () => {
  let t: SelfUpdateApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  it('are handed to the backup as ones to keep, until a later update completes', async () => {
    t = await startSelfUpdateApp();
    const db = t.db.database.db;
    const oldAlarm = 'installer-20260101T000000000Z-sha256-aaaaaaaaaaaa.dump';
    const alarm = 'installer-20260201T000000000Z-sha256-bbbbbbbbbbbb.dump';
    await finished(db, 'rolled-back', changedSchemaDetail(oldAlarm), oldAlarm, 300);
    await finished(db, 'completed', 'updated to dev-latest', 'installer-20260115T000000000Z-sha256-cccccccccccc.dump', 200);
    await finished(db, 'rolled-back', changedSchemaDetail(alarm), alarm, 100);
    // A plain rollback names its backup too, but raised no alarm.
    await finished(db, 'rolled-back', 'rolled back: the switch to dev-latest failed', 'installer-20260301T000000000Z-sha256-dddddddddddd.dump', 50);

    expect(await alarmedBackups(db, CHANGED_SCHEMA)).toEqual([alarm]);
    const res = await t.app.inject({ method: 'POST', url: '/api/system/self-update', headers: service });
    expect(res.statusCode, res.body).toBe(200);
    expect(t.engine.backups).toMatchObject([{ keep: 5, alarmed: [alarm] }]);

    // A later update that completed resolves it.
    await finished(db, 'completed', 'updated to dev-latest', null, 10);
    expect(await alarmedBackups(db, CHANGED_SCHEMA)).toEqual([]);
  });
});

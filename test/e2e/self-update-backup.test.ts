// The database backup before the switch, on the real engine, registry and installer-postgres: a
// backups volume that cannot be written aborts preflight with nothing changed; a build that migrates
// and then fails rolls back onto a changed schema, the alarm names the backup and the restore
// command, older backups beyond SELF_UPDATE_BACKUPS_KEEP are gone, and the restore command, run as
// the alarm words it, brings the old schema back, with the old build healthy on it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { run } from '../helpers/e2e/rig.ts';
import { helperExit, helperState, Images, inPostgres, psql, STAGED_FILE, startInstaller, type InstallerUnderTest } from '../helpers/e2e/self-update-rig.ts';
import { LATEST_MIGRATION, type SelfUpdateCheck as Check } from '../helpers/api/self-update.ts';

const images = new Images();
let i: InstallerUnderTest;
const BASE = 'dev-backup-base';
const CHANGED = 'ROLLED BACK ONTO A CHANGED SCHEMA';

beforeAll(async () => {
  await images.buildBase(BASE);
  await images.publish(BASE);
  await images.buildVariant('migrates-then-unhealthy', BASE, 'migrates');
  i = await startInstaller(images, BASE, { OBSERVED_CHANNEL_MAX_AGE_SECONDS: '0', SELF_UPDATE_BACKUPS_KEEP: '2' });
});

afterAll(async () => {
  await i?.down();
  await images.cleanup();
});

const backups = async () => (await inPostgres(['ls', '-1', '/backups'])).split('\n').filter(Boolean).sort();
const migrations = async () => (await psql('select name from kysely_migration order by name')).split('\n');
const imageId = async (ref: string) => {
  const r = await run('docker', ['image', 'inspect', '-f', '{{.Id}}', ref]);
  return r.code === 0 ? r.stdout.trim() : null;
};
const check = async () => {
  const r = await i.get('/api/system/self-update-check');
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as Check;
};
const version = async () => (await i.get('/api/version')).body as { digest: string | null; image: string | null };
const backendLogs = async () => {
  const r = await run('docker', ['logs', 'installer-backend']);
  return r.stdout + r.stderr;
};
const observed = async () => ({
  rollback: await imageId(images.ref('rollback')),
  channel: await imageId(images.ref('dev-latest')),
  staged: existsSync(STAGED_FILE) ? readFileSync(STAGED_FILE, 'utf8') : null,
  helper: (await helperState())?.id ?? null,
  actions: JSON.stringify((await i.get('/api/deployment/actions?limit=50')).body),
});

describe('a database backup before the switch', () => {
  it('a backups volume that cannot be written: 503 naming the backup, nothing changed, no file left', async () => {
    await images.publish('migrates');
    // The dump runs as the postgres user: a directory it cannot write is a full or broken volume.
    await inPostgres(['mkdir', '-p', '/backups']);
    await inPostgres(['chmod', '0500', '/backups']);
    try {
      const before = await observed();
      const r = await i.post('/api/system/self-update');
      expect(r.status, JSON.stringify(r.body)).toBe(503);
      expect((r.body as { message: string }).message).toMatch(
        /^self-update aborted in preflight: backingUp: the database backup failed: pg_dump into \/backups of the postgres container failed: pg_dump exited 1: .*could not open output file.*Permission denied.*; nothing was changed$/,
      );
      expect(await observed()).toEqual(before);
      expect(before.helper).toBeNull();
      expect(await backups()).toEqual([]);
      expect((await check()).lastUpdate.status).toBeNull();
      expect(await psql(`select count(*) from self_update_status where phase in ('requested', 'preflight', 'helper-running')`)).toBe('0');
    } finally {
      await inPostgres(['chmod', '0700', '/backups']);
    }
  });

  it('a migrating build that fails: the alarm names the backup; the documented restore brings the old schema back and the old build runs healthy', async () => {
    // Older backups (one beyond SELF_UPDATE_BACKUPS_KEEP=2 once this update's is added) and a file of the operator's.
    const oldest = 'installer-20200101T000000000Z-unknown.dump';
    const older = 'installer-20200102T000000000Z-unknown.dump';
    for (const f of [oldest, older, 'operator-copy.dump']) await inPostgres(['touch', `/backups/${f}`], 'postgres');
    const previous = (await version()).digest!;
    const target = images.digests.get('dev-latest')!;
    expect(await migrations()).not.toContain('0099_self_update_test_marker');

    const r = await i.post('/api/system/self-update');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ started: true, targetDigest: target });
    expect(await helperExit()).toBe(0);
    const c = await i.until('the rolled-back backend with a reconciled update', async () => {
      if ((await version()).digest !== previous) return null;
      const x = await check();
      return x.lastUpdate.status !== 'started' ? x : null;
    });

    // The backup: named after the time and the build it was taken from; the last two kept.
    const files = await backups();
    const taken = files.find((f) => f.startsWith('installer-2') && f !== older && f !== oldest)!;
    expect(taken).toMatch(new RegExp(`^installer-\\d{8}T\\d{9}Z-sha256-${previous.slice('sha256:'.length, 'sha256:'.length + 12)}\\.dump$`));
    expect(files).toEqual([older, taken, 'operator-copy.dump'].sort());

    // The alarm: the spec's words, then the backup and the documented restore command.
    const restore = `docker stop installer-backend && docker exec installer-postgres pg_restore --clean --create --if-exists -U installer -d postgres /backups/${taken} && docker start installer-backend`;
    expect(c.lastUpdate).toMatchObject({
      status: 'rolled-back',
      targetDigest: target,
      detail: `${CHANGED}; the database was backed up before the update as ${taken}; to bring the old schema back: ${restore} (docs/self-update.md)`,
    });
    const alarms = (await backendLogs()).split('\n').filter((l) => l.includes('"level":"error"') && l.includes(CHANGED));
    expect(alarms).toHaveLength(1);
    expect(alarms[0]).toContain(`"backup":"${taken}"`);
    expect(alarms[0]).toContain(restore);
    // The schema the failed build left.
    expect((await migrations()).at(-1)).toBe('0099_self_update_test_marker');
    expect(await psql(`select to_regclass('self_update_test_marker') is not null`)).toBe('t');

    // The restore, exactly as the alarm words it.
    const restored = await run('sh', ['-c', restore]);
    expect(restored.code, restored.stderr).toBe(0);

    // The old schema is back (no trace of the failed build's migration) and the old build runs healthy on it.
    const names = await migrations();
    expect(names.at(-1)).toBe(LATEST_MIGRATION);
    expect(names).not.toContain('0099_self_update_test_marker');
    expect(await psql(`select to_regclass('self_update_test_marker') is null`)).toBe('t');
    await i.until('the old build healthy on the restored database', async () => {
      const h = await run('docker', ['inspect', '-f', '{{.State.Health.Status}}', 'installer-backend']);
      if (h.stdout.trim() !== 'healthy') return null;
      const health = await i.get('/api/health');
      return health.status === 200 && (health.body as { db: string }).db === 'up';
    });
    expect(await version()).toMatchObject({ digest: previous, image: images.ref('rollback') });
    // The update, as the backup held it, has its outcome read again from its helper on that boot
    // (docs/adr/0044-restore-and-decided-digest.md): rolled back, on the schema before it, no second alarm.
    const again = await i.until('the outcome read again', async () => {
      const l = (await check()).lastUpdate;
      return l.status && l.status !== 'started' ? l : null;
    });
    expect(again).toMatchObject({ status: 'rolled-back', targetDigest: target });
    expect(again.detail).toMatch(/; recorded again from installer-self-updater after the database was restored from the backup taken in this update's preflight$/);
    expect(await psql(`select count(*) from self_update_status where phase in ('requested', 'preflight', 'helper-running')`)).toBe('0');
    expect((await backendLogs()).split('\n').filter((l) => l.includes('"level":"error"') && l.includes(CHANGED))).toHaveLength(1);
  });
});

// The Postgres backup at its edges, on the real engine and a real Postgres container labelled as the
// installer's (docs/adr/0045-migrations-checked-for-the-old-build.md): a dump past its time limit is
// killed, not left running, and leaves no file; retention keeps a backup an unresolved schema alarm
// names; a backups volume too small for the next backup fails it before the dump, saying how much is
// needed and how much is free.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Docker from 'dockerode';
import pg from 'pg';
import { docker, freePort, run, uniqueName } from '../helpers/e2e/rig.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { PG_IMAGE } from '../helpers/e2e/dedicated-postgres.ts';
import { BACKUP_SPACE, PostgresContainerBackup } from '../../src/adapters/database-backup.ts';

const engine = new Docker();
const project = uniqueName('installer-backup-edges');
const name = `${project}-postgres`;
let port = 0;
const DIGEST = 'sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef';

async function inContainer(args: string[], user = 'root'): Promise<string> {
  const r = await run('docker', ['exec', '-u', user, name, ...args]);
  if (r.code !== 0) throw new Error(`docker exec ${name} ${args.join(' ')} failed (${r.code}): ${r.stderr}`);
  return r.stdout;
}
const backups = async () => (await inContainer(['ls', '-1', '/backups'])).split('\n').filter(Boolean).sort();
/** Command lines of the container's pg_dump processes, read from /proc (the image has no ps). */
const dumps = async () =>
  (await inContainer(['sh', '-c', 'for p in /proc/[0-9]*; do tr "\\0" " " <"$p/cmdline" 2>/dev/null; echo; done'])).split('\n').filter((l) => /^pg_dump /.test(l));
const client = async () => {
  const c = new pg.Client({ connectionString: `postgres://postgres:pw@127.0.0.1:${port}/installer`, connectionTimeoutMillis: 5_000 });
  c.on('error', () => {});
  await c.connect();
  return c;
};
const backupOf = (timeoutMs?: number) => new PostgresContainerBackup(engine, { project, user: 'postgres', database: 'installer', ...(timeoutMs ? { timeoutMs } : {}) });

beforeAll(async () => {
  port = await freePort();
  // The rig's engine runs with --bridge=none: a published port needs a user-defined network.
  await docker(['network', 'create', name], { timeoutMs: 60_000 });
  await docker(
    [
      'run', '-d', '--name', name, '--network', name, '-p', `127.0.0.1:${port}:5432`, '-e', 'POSTGRES_PASSWORD=pw', '-e', 'POSTGRES_DB=installer',
      '--label', `com.docker.compose.project=${project}`, '--label', 'com.docker.compose.service=postgres',
      // A small volume: the space check has something to refuse.
      '--mount', 'type=tmpfs,destination=/backups,tmpfs-size=67108864', PG_IMAGE,
    ],
    { timeoutMs: 60_000 },
  );
  await eventually(async () => {
    const c = await client().catch(() => null);
    if (!c) return null;
    await c.query('create table if not exists things (id serial primary key, body text)');
    await c.query(`insert into things (body) select repeat('x', 1000) from generate_series(1, 2000)`);
    await c.end();
    return true;
  }, 'the Postgres container answers', 60_000);
});

afterAll(async () => {
  await run('docker', ['rm', '-f', '-v', name], { timeoutMs: 60_000 });
  await run('docker', ['network', 'rm', name], { timeoutMs: 60_000 });
});

describe('the Postgres backup at its edges', () => {
  it('a dump past its time limit is killed: no pg_dump left running, no file left', async () => {
    // A lock pg_dump must wait for: the dump cannot finish while it is held.
    const holder = await client();
    try {
      await holder.query('begin');
      await holder.query('lock table things in access exclusive mode');
      const err = await backupOf(2_000).backup(DIGEST, 5).then(() => null, (e: unknown) => e as Error);
      expect(err?.message).toMatch(/^pg_dump into \/backups of the postgres container failed: pg_dump did not finish within 2 s; it was stopped$/);
      // Read while the lock is still held: a dump left running would still be waiting for it.
      expect(await dumps()).toEqual([]);
      expect(await backups()).toEqual([]);
    } finally {
      await holder.query('rollback').catch(() => {});
      await holder.end();
    }
  });

  it('keeps a backup an unresolved alarm names, beyond the count it keeps', async () => {
    const first = (await backupOf().backup(DIGEST, 1)).file;
    const second = await backupOf().backup(DIGEST, 1, [first]);
    expect(second.removed).toEqual([]);
    expect(await backups()).toEqual([first, second.file]);
    // Without the alarm the count rules: the oldest two go.
    const third = await backupOf().backup(DIGEST, 1);
    expect(third.removed).toEqual([first, second.file]);
    expect(await backups()).toEqual([third.file]);
  });

  it('a volume too small for the next backup fails it before the dump, saying how much is needed and free', async () => {
    const last = (await backups())[0]!;
    const size = Number((await inContainer(['stat', '-c', '%s', `/backups/${last}`])).trim());
    // Fill the volume to less than the estimate (the last backup's size times 1.5).
    const free = Number((await inContainer(['df', '-P', '-B1', '/backups'])).trim().split('\n').at(-1)!.split(/\s+/)[3]);
    await inContainer(['sh', '-c', `head -c ${free - size} /dev/zero >/backups/filler`]);
    try {
      const err = (await backupOf().backup(DIGEST, 5).then(() => null, (e: unknown) => e)) as (Error & { code?: string }) | null;
      expect(err?.code).toBe(BACKUP_SPACE);
      expect(err?.message).toMatch(
        /^not enough free space for the backup in \/backups of the postgres container: it needs about [\d.]+ KiB \(the last backup's [\d.]+ KiB times 1\.5\), [\d.]+ KiB is free; free space there or lower SELF_UPDATE_BACKUPS_KEEP \(docs\/deploy\.md, "A full backups volume"\)$/,
      );
      expect(await backups()).toEqual(['filler', last].sort());
    } finally {
      await inContainer(['rm', '-f', '/backups/filler']);
    }
    // With the room back, the next backup is taken.
    expect((await backupOf().backup(DIGEST, 5)).file).toMatch(/\.dump$/);
  });
});

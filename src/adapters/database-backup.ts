// The database backup a self-update takes in preflight, before anything is changed
// (docs/adr/0032-backup-before-the-switch.md). With Postgres, `pg_dump -Fc` runs inside the
// installer's own Postgres container (compose service `postgres` of INSTALLER_PROJECT) over its
// local socket, so no password is on any command line or in any environment, and writes into the
// backups volume mounted there at /backups. With the embedded database the backend writes a copy of
// its data directory into the same volume, mounted in the backend. Either way the last N are kept,
// and the backups an unresolved schema alarm names besides; a volume without room for the next
// backup fails it before it starts (docs/adr/0045-migrations-checked-for-the-old-build.md).
import type { BackupRoom } from '../contracts/preflight-report.ts';
import type Docker from 'dockerode';
import { mkdir, readdir, rename, rm, stat, statfs, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Writable, type Readable } from 'node:stream';
import { engineMessage } from './engine-errors.ts';

/** The named volume backups go to (deploy/docker-compose.yml). */
export const BACKUPS_VOLUME = 'installer-backups';
/** Where the backups volume is mounted in the installer's Postgres container. */
export const POSTGRES_BACKUPS_DIR = '/backups';
/** The compose service of the installer's Postgres. */
export const POSTGRES_SERVICE = 'postgres';
/** The operating-system user of the Postgres image that runs pg_dump and owns the backups. */
export const DUMP_USER = 'postgres';
/** How long one dump may take before it is stopped (the chart's hung guard is longer). */
export const BACKUP_TIMEOUT_MS = 10 * 60_000;
/** Where a command's process id is kept inside the Postgres container (per user: /tmp is sticky), so that one past its time can be stopped. */
export const pidFileOf = (user: string) => `/tmp/installer-backup-${user}.pid`;
/** How long a stopped dump may take to be gone. */
const STOP_WAIT_MS = 10_000;
/** The next backup is estimated at the last one's size times this (a database grows between updates). */
export const BACKUP_SIZE_MARGIN = 1.5;
/** `code` of the error a backups volume too small for the next backup throws. */
export const BACKUP_SPACE = 'backup-space';

/** `installer-<UTC time to the millisecond>-<from digest, sha256- and the first 12 hex digits>.<ext>`. */
const NAME = /^installer-\d{8}T\d{9}Z-[a-z0-9-]+\.(dump|tar\.gz)$/;

export interface BackupResult {
  /** The backup's file name in the backups volume. */
  file: string;
  /** Older backups removed to keep the last N. */
  removed: string[];
  /** Why removing older backups failed (the backup itself is good); null when it did not. */
  pruneProblem: string | null;
}

export interface DatabaseBackup {
  /** Where the backups are, as the restore command names them (`/backups` inside installer-postgres). */
  readonly location: string;
  /**
   * Dumps the database into a new file named after the time and `fromDigest`, then keeps the last
   * `keep` and every file named in `alarmed` (the backups unresolved schema alarms name).
   */
  backup(fromDigest: string | null, keep: number, alarmed?: readonly string[]): Promise<BackupResult>;
  /** Free bytes where the next backup goes, and its estimated size (null before there is anything to estimate from). */
  room(): Promise<BackupRoom>;
}


/** How long a reading of the backup's room serves the preflight report: each is a few execs in the database's container (the backup checks its room live). */
export const BACKUP_ROOM_TTL_MS = 60_000;

/** `read`, answered from its last reading for `ttlMs`; a failed reading is not kept. */
export function recentReading<T>(read: () => Promise<T>, ttlMs: number): () => Promise<T> {
  let last: { at: number; value: Promise<T> } | null = null;
  return () => {
    if (!last || Date.now() - last.at > ttlMs) {
      const value = read();
      const reading = { at: Date.now(), value };
      last = reading;
      value.catch(() => {
        if (last === reading) last = null;
      });
    }
    return last.value;
  };
}

/** Binary units to one decimal, as the space check words them. */
export function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(1)} ${units[u]}`;
}

/**
 * The next backup's estimated size: the newest backup's times BACKUP_SIZE_MARGIN, or, before the
 * first one, the database's own size (a dump is smaller than the database it is taken from).
 */
export function estimateNextBackup(newestBackupBytes: number | null, databaseBytes: number): { bytes: number; basis: string } {
  if (newestBackupBytes !== null) return { bytes: Math.ceil(newestBackupBytes * BACKUP_SIZE_MARGIN), basis: `the last backup's ${bytes(newestBackupBytes)} times ${BACKUP_SIZE_MARGIN}` };
  return { bytes: databaseBytes, basis: "the database's size, there being no backup yet" };
}

/** Throws BACKUP_SPACE when `free` is less than the estimate, saying how much is needed and how much is free. */
export function checkSpace(location: string, free: number, estimate: { bytes: number; basis: string }): void {
  if (free >= estimate.bytes) return;
  throw Object.assign(
    new Error(
      `not enough free space for the backup in ${location}: it needs about ${bytes(estimate.bytes)} (${estimate.basis}), ${bytes(free)} is free; ` +
        'free space there or lower SELF_UPDATE_BACKUPS_KEEP (docs/deploy.md, "A full backups volume")',
    ),
    { code: BACKUP_SPACE },
  );
}

/** The backup's file name: sortable by time, naming the build it was taken from. */
export function backupFileName(at: Date, fromDigest: string | null, ext: 'dump' | 'tar.gz'): string {
  const time = at.toISOString().replace(/[-:]/g, '').replace('.', '');
  const from = fromDigest ? fromDigest.replace(/^([a-z0-9]+):([0-9a-f]{12}).*$/, '$1-$2') : 'unknown';
  return `installer-${time}-${/^[a-z0-9-]+$/.test(from) ? from : 'unknown'}.${ext}`;
}

/**
 * The backups (by name) that go so that the newest `keep` stay besides the `alarmed` ones (never
 * removed, never counted), and the unfinished copies a backup
 * interrupted by a restart left (`.partial`: only one update, so one backup, runs at a time, and
 * this runs after it finished). Other files are never touched.
 */
export function backupsToRemove(names: readonly string[], keep: number, alarmed: readonly string[] = []): string[] {
  // A backup an unresolved schema alarm names is the way back to the schema before that update.
  const ours = names.filter((n) => NAME.test(n) && !alarmed.includes(n)).sort();
  const unfinished = names.filter((n) => n.endsWith('.partial') && NAME.test(n.slice(0, -'.partial'.length))).sort();
  return [...ours.slice(0, Math.max(0, ours.length - keep)), ...unfinished];
}

/** A writable that keeps what is written to it in `into`. */
function collect(into: Buffer[]): Writable {
  return new Writable({
    write(chunk: Buffer, _enc, done) {
      into.push(chunk);
      done();
    },
  });
}

/** pg_dump in the installer's Postgres container, into its /backups (the backups volume). */
export class PostgresContainerBackup implements DatabaseBackup {
  readonly location = `${POSTGRES_BACKUPS_DIR} in the installer's Postgres container`;

  constructor(
    private readonly docker: Docker,
    private readonly s: { project: string; user: string; database: string; timeoutMs?: number },
  ) {}

  private async container(): Promise<Docker.Container> {
    const list = await this.docker
      .listContainers({ filters: { label: [`com.docker.compose.project=${this.s.project}`, `com.docker.compose.service=${POSTGRES_SERVICE}`], status: ['running'] } })
      .catch((err: unknown) => {
        throw new Error(`cannot list the containers of compose project ${this.s.project}: ${engineMessage(err)}`);
      });
    const c = list[0];
    if (!c) throw new Error(`no running ${POSTGRES_SERVICE} container in compose project ${this.s.project} to run pg_dump in`);
    return this.docker.getContainer(c.Id);
  }

  /**
   * Runs `cmd` in the container; resolves with its output, rejects with its exit code and stderr.
   * Past the time limit the command is killed (the engine has no call to end an exec, and a closed
   * stream leaves it running): it runs under a shell that writes its pid to a file first.
   */
  private async exec(c: Docker.Container, cmd: string[], user = DUMP_USER): Promise<string> {
    const limit = this.s.timeoutMs ?? BACKUP_TIMEOUT_MS;
    let timer: NodeJS.Timeout | undefined;
    let exec: Docker.Exec | undefined;
    try {
      exec = await c.exec({
        Cmd: ['sh', '-c', 'echo $$ >"$0" && exec "$@"', pidFileOf(user), ...cmd],
        User: user, AttachStdout: true, AttachStderr: true, AttachStdin: false, Tty: false,
      });
      const stream = (await exec.start({ hijack: true, stdin: false })) as unknown as Readable;
      // The engine multiplexes stdout and stderr into one stream: dockerode's demuxer parts them.
      const out: Buffer[] = [];
      const errs: Buffer[] = [];
      this.docker.modem.demuxStream(stream, collect(out), collect(errs));
      const ended = new Promise<void>((resolve, reject) => {
        stream.on('end', resolve);
        stream.on('close', resolve);
        stream.on('error', reject);
      });
      const timedOut = new Promise<'timed-out'>((resolve) => {
        timer = setTimeout(() => resolve('timed-out'), limit);
      });
      if ((await Promise.race([ended, timedOut])) === 'timed-out') {
        stream.destroy();
        const stopped = await this.stop(c, exec, user);
        throw new Error(`${cmd[0]} did not finish within ${Math.round(limit / 1000)} s; ${stopped}`);
      }
      const stdout = Buffer.concat(out).toString('utf8');
      const stderr = Buffer.concat(errs).toString('utf8');
      // The stream can end a moment before the engine records the exit code.
      let info = await exec.inspect();
      for (let n = 0; info.Running && n < 50; n++) {
        await new Promise((r) => setTimeout(r, 100));
        info = await exec.inspect();
      }
      const ExitCode = info.Running ? null : info.ExitCode;
      if (ExitCode !== 0) throw new Error(`${cmd[0]} exited ${ExitCode ?? 'unknown'}: ${stderr.trim().split('\n').slice(-3).join(' ') || 'no output'}`);
      return stdout;
    } catch (err) {
      throw new Error(engineMessage(err));
    } finally {
      clearTimeout(timer);
    }
  }

  /** Kills the command an exec runs (by the pid its shell wrote) and waits until it is gone; says what became of it. */
  private async stop(c: Docker.Container, exec: Docker.Exec, user: string): Promise<string> {
    const killer = async () => {
      const k = await c.exec({ Cmd: ['sh', '-c', 'kill -KILL "$(cat "$0")"', pidFileOf(user)], User: user, AttachStdout: true, AttachStderr: true });
      const s = (await k.start({ hijack: true, stdin: false })) as unknown as Readable;
      s.resume();
      await new Promise<void>((resolve) => {
        s.on('end', resolve);
        s.on('close', resolve);
        s.on('error', () => resolve());
      });
    };
    try {
      await Promise.race([killer(), new Promise((_, reject) => setTimeout(() => reject(new Error('the kill did not answer')), STOP_WAIT_MS).unref())]);
      const until = Date.now() + STOP_WAIT_MS;
      while (Date.now() < until) {
        if (!(await exec.inspect()).Running) return 'it was stopped';
        await new Promise((r) => setTimeout(r, 100));
      }
      return 'it was killed but had not ended 10 s later';
    } catch (err) {
      return `stopping it failed: ${engineMessage(err)}`;
    }
  }

  /** Free bytes where the backups go, and the sizes the estimate of the next backup reads. */
  private async space(c: Docker.Container): Promise<{ free: number; newest: number | null; database: number }> {
    const free = Number.parseInt((await this.exec(c, ['df', '-P', '-B1', POSTGRES_BACKUPS_DIR])).trim().split('\n').at(-1)?.split(/\s+/)[3] ?? '', 10);
    const listing = await this.exec(c, ['sh', '-c', 'cd "$0" && for f in installer-*.dump; do [ -f "$f" ] && stat -c "%s %n" "$f"; done; true', POSTGRES_BACKUPS_DIR]);
    const sizes = listing.split('\n').map((l) => /^(\d+) (installer-\S+\.dump)$/.exec(l.trim())).filter((m) => m !== null && NAME.test(m[2]!)).sort((a, b) => a![2]!.localeCompare(b![2]!));
    const newest = sizes.length ? Number(sizes.at(-1)![1]) : null;
    const database = Number.parseInt((await this.exec(c, ['psql', '--no-password', '-U', this.s.user, '-d', this.s.database, '-tAc', 'select pg_database_size(current_database())'])).trim(), 10);
    if (!Number.isFinite(free) || !Number.isFinite(database)) throw new Error(`cannot read the free space of ${POSTGRES_BACKUPS_DIR} or the size of the database`);
    return { free, newest, database };
  }

  async room(): Promise<BackupRoom> {
    const room = await this.space(await this.container());
    return { free: room.free, estimate: estimateNextBackup(room.newest, room.database) };
  }

  async backup(fromDigest: string | null, keep: number, alarmed: readonly string[] = []): Promise<BackupResult> {
    const c = await this.container();
    const file = backupFileName(new Date(), fromDigest, 'dump');
    const final = path.posix.join(POSTGRES_BACKUPS_DIR, file);
    const partial = `${final}.partial`;
    // A new volume's root belongs to root: the dump runs as the container's postgres user, not root.
    await this.exec(c, ['chown', `${DUMP_USER}:${DUMP_USER}`, POSTGRES_BACKUPS_DIR], 'root').catch((err: unknown) => {
      throw new Error(`pg_dump into ${POSTGRES_BACKUPS_DIR} of the ${POSTGRES_SERVICE} container failed: ${(err as Error).message}`);
    });
    const room = await this.space(c).catch((err: unknown) => {
      throw new Error(`cannot check the free space for the backup: ${(err as Error).message}`);
    });
    checkSpace(`${POSTGRES_BACKUPS_DIR} of the ${POSTGRES_SERVICE} container`, room.free, estimateNextBackup(room.newest, room.database));
    try {
      // The local socket: no password on the command line or in the environment.
      await this.exec(c, ['pg_dump', '--format=custom', '--no-password', '--username', this.s.user, '--dbname', this.s.database, '--file', partial]);
      await this.exec(c, ['mv', partial, final]);
    } catch (err) {
      await this.exec(c, ['rm', '-f', partial]).catch(() => {});
      throw new Error(`pg_dump into ${POSTGRES_BACKUPS_DIR} of the ${POSTGRES_SERVICE} container failed: ${(err as Error).message}`);
    }
    let removed: string[] = [];
    let pruneProblem: string | null = null;
    try {
      const names = (await this.exec(c, ['ls', '-1', POSTGRES_BACKUPS_DIR])).split('\n').map((n) => n.trim()).filter(Boolean);
      removed = backupsToRemove(names, keep, alarmed);
      if (removed.length) await this.exec(c, ['rm', '-f', '--', ...removed.map((n) => path.posix.join(POSTGRES_BACKUPS_DIR, n))]);
    } catch (err) {
      pruneProblem = (err as Error).message;
      removed = [];
    }
    return { file, removed, pruneProblem };
  }
}

/** The embedded database: a copy of its data directory, written by the backend into `dir`. */
export class EmbeddedBackup implements DatabaseBackup {
  constructor(
    private readonly dump: () => Promise<Uint8Array>,
    private readonly dir: string,
  ) {}

  get location(): string {
    return this.dir;
  }

  /** The copy's size is known only once taken: the newest backup's times the margin stands in for it. */
  async room(): Promise<BackupRoom> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const fs = await statfs(this.dir);
    const ours = await Promise.all((await readdir(this.dir)).filter((n) => NAME.test(n)).sort().slice(-1).map((n) => stat(path.join(this.dir, n))));
    const newest = ours[0]?.size ?? null;
    return { free: fs.bavail * fs.bsize, estimate: newest === null ? null : estimateNextBackup(newest, 0) };
  }

  async backup(fromDigest: string | null, keep: number, alarmed: readonly string[] = []): Promise<BackupResult> {
    const file = backupFileName(new Date(), fromDigest, 'tar.gz');
    const final = path.join(this.dir, file);
    const partial = `${final}.partial`;
    let copy: Uint8Array;
    try {
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      copy = await this.dump();
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      throw new Error(`copying the embedded database into ${this.dir} failed: ${e.code ?? e.message}`);
    }
    // The copy is in memory: its size is what the volume needs, exactly.
    const fs = await statfs(this.dir);
    checkSpace(this.dir, fs.bavail * fs.bsize, { bytes: copy.byteLength, basis: 'the copy just taken' });
    try {
      await writeFile(partial, copy, { mode: 0o600 });
      await rename(partial, final);
    } catch (err) {
      await rm(partial, { force: true }).catch(() => {});
      const e = err as NodeJS.ErrnoException;
      throw new Error(`copying the embedded database into ${this.dir} failed: ${e.code ?? e.message}`);
    }
    let removed: string[] = [];
    let pruneProblem: string | null = null;
    try {
      removed = backupsToRemove(await readdir(this.dir), keep, alarmed);
      for (const n of removed) await rm(path.join(this.dir, n), { force: true });
    } catch (err) {
      pruneProblem = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    }
    return { file, removed, pruneProblem };
  }
}

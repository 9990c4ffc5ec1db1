// A directory only root can write, for files the self-update helper installs and runs as root
// (docs/adr/0041-trusted-sources-and-staging.md). The self-update helper checks the same rules in
// scripts/self-update.sh. Every component is read with lstat, so a symbolic link is never followed
// into a place another user controls.
import { lstat, mkdir, open, realpath, type FileHandle } from 'node:fs/promises';
import { constants, type Stats } from 'node:fs';
import path from 'node:path';

/** `code` of the error thrown for a staging directory another user could write. */
export const UNSAFE_STAGING = 'unsafe-staging';

const unsafe = (setting: string, message: string) =>
  Object.assign(
    new Error(`${setting}: ${message}; another user could replace the compose file a self-update installs and runs as root. Remove it, or set ${setting} to a directory only root can write`),
    { code: UNSAFE_STAGING },
  );

const ownerUid = () => process.getuid?.() ?? 0;

const errno = (err: unknown) => (err as NodeJS.ErrnoException).code;

/** Why a directory we create or use is unsafe (null when it is not): a link, another owner, group/others may write. */
export function ownDirectoryProblem(p: string, st: Stats, uid = ownerUid()): string | null {
  if (st.isSymbolicLink()) return `${p} is a symbolic link`;
  if (!st.isDirectory()) return `${p} is not a directory`;
  if (st.uid !== uid) return `${p} is owned by uid ${st.uid}, not by uid ${uid}`;
  if (st.mode & 0o022) return `${p} is writable by ${st.mode & 0o020 ? 'its group' : 'others'} (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')})`;
  return null;
}

/**
 * Why a component above the staging root is unsafe: owned by another user than root (or us), or
 * writable by others without the sticky bit. A symbolic link there is judged by its own owner (its
 * target is checked as well, on the resolved path).
 */
export function ancestorProblem(p: string, st: Stats, uid = ownerUid()): string | null {
  if (st.uid !== 0 && st.uid !== uid) return `${p}, above it, is owned by uid ${st.uid}`;
  if (st.isSymbolicLink()) return null;
  if (!st.isDirectory()) return `${p}, above it, is not a directory`;
  // A sticky directory (/tmp, /var/tmp) lets nobody but the owner rename what is in it.
  if (st.mode & 0o022 && !(st.mode & 0o1000)) return `${p}, above it, is writable by group or others without the sticky bit`;
  return null;
}

/** `/`, `/a`, `/a/b` for `/a/b`. */
const prefixes = (p: string) => {
  const parts = p.split(path.sep).filter(Boolean);
  return [path.sep, ...parts.map((_, i) => path.sep + parts.slice(0, i + 1).join(path.sep))];
};

/**
 * Checks `root` and `root/<sub...>` (made with mode 0700 where missing when `create` is set) and
 * every component above `root`, as written and as resolved. Returns false when a directory is
 * missing and `create` is not set; throws an error with code UNSAFE_STAGING, naming `setting`,
 * when one is unsafe.
 */
export async function ensureSafeDir(root: string, sub: readonly string[], opts: { create: boolean; setting: string }): Promise<boolean> {
  const given = path.resolve(root);
  const parent = path.dirname(given);
  if (opts.create) await mkdir(parent, { recursive: true, mode: 0o755 });
  let real: string;
  try {
    real = await realpath(parent);
  } catch (err) {
    if (errno(err) === 'ENOENT' && !opts.create) return false;
    throw err;
  }
  const seen = new Set<string>();
  for (const p of [...prefixes(parent), ...prefixes(real)]) {
    if (seen.has(p)) continue;
    seen.add(p);
    const problem = ancestorProblem(p, await lstat(p));
    if (problem) throw unsafe(opts.setting, `${given} is not safe: ${problem}`);
  }
  let dir = path.join(real, path.basename(given));
  for (const name of ['', ...sub]) {
    if (name) dir = path.join(dir, name);
    let st: Stats;
    try {
      st = await lstat(dir);
    } catch (err) {
      if (errno(err) !== 'ENOENT') throw err;
      if (!opts.create) return false;
      await mkdir(dir, { mode: 0o700 }).catch((e: unknown) => {
        if (errno(e) !== 'EEXIST') throw e;
      });
      st = await lstat(dir);
    }
    const problem = ownDirectoryProblem(dir, st);
    if (problem) throw unsafe(opts.setting, problem);
  }
  return true;
}

/**
 * Reads a file of the staging directory, or null when there is none. It is opened without
 * following a link and then checked as opened: a link, anything but a regular file, another
 * user's file or one group or others may write is refused.
 */
export async function readSafeFile(file: string, setting = 'STAGING_ROOT'): Promise<string | null> {
  let fh: FileHandle;
  try {
    fh = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (err) {
    if (errno(err) === 'ENOENT') return null;
    if (errno(err) === 'ELOOP') throw unsafe(setting, `${file} is a symbolic link`);
    throw err;
  }
  try {
    const st = await fh.stat();
    const uid = ownerUid();
    if (!st.isFile()) throw unsafe(setting, `${file} is not a regular file`);
    if (st.uid !== uid) throw unsafe(setting, `${file} is owned by uid ${st.uid}, not by uid ${uid}`);
    if (st.mode & 0o022) throw unsafe(setting, `${file} is writable by group or others`);
    return await fh.readFile('utf8');
  } finally {
    await fh.close();
  }
}

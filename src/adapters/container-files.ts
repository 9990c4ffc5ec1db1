// Files the backend cannot open itself, handed over by the engine as a tar archive from a created,
// never started container: the compose files images ship (one container per read, removed after),
// and the installer's own compose file in the work dir, which is not mounted into the backend. The
// update check reads that one at every call (docs/adr/0049-live-update-check.md), so its reader is
// kept: created at the first read, reused by every read after (a bind mount shows the file as it
// is now), removed when the process stops; one that a killed process of another build left is
// removed by the next process's first read.
import type Docker from 'dockerode';
import { createHash, randomBytes } from 'node:crypto';
import type { Readable } from 'node:stream';
import { filesOfTar, firstFileOfTar } from './compose-source.ts';
import { engineMessage, statusOf } from './engine-errors.ts';

/** The label every reader carries, `io.installer.role`: a one-off reader of an image's file. */
export const READER_ROLE = 'compose-reader';
/** The label value of a one-off reader of a directory of an image (a build's migrations). */
export const BUILD_READER_ROLE = 'build-reader';
/** The label value of the kept reader of the work dir. */
export const KEPT_READER_ROLE = 'work-dir-reader';

const readerSpec = (name: string, image: string, role: string, binds: string[]): Docker.ContainerCreateOptions => ({
  name,
  Image: image,
  Cmd: ['true'],
  NetworkDisabled: true,
  Healthcheck: { Test: ['NONE'] },
  Labels: { 'io.installer.role': role },
  HostConfig: { Binds: binds, AutoRemove: false },
});

async function readArchive(reader: Docker.Container, file: string): Promise<string> {
  const stream = (await reader.getArchive({ path: file })) as unknown as Readable;
  return (await firstFileOfTar(stream)).toString('utf8');
}

/** One file through a created, never started container of `image` (with `binds`), removed afterwards. */
export async function readThroughContainer(docker: Docker, image: string, file: string, binds: string[]): Promise<string> {
  let reader: Docker.Container;
  try {
    reader = await docker.createContainer(readerSpec(`installer-compose-reader-${randomBytes(4).toString('hex')}`, image, READER_ROLE, binds));
  } catch (err) {
    throw new Error(`cannot read ${file}: ${engineMessage(err)}`);
  }
  try {
    return await readArchive(reader, file);
  } catch (err) {
    throw new Error(`cannot read ${file}: ${engineMessage(err)}`);
  } finally {
    await reader.remove({ force: true }).catch(() => {});
  }
}

/** The files of a directory of `image` (at most `maxBytes` in all), through a created, never started container removed afterwards. */
export async function readDirThroughContainer(docker: Docker, image: string, dir: string, maxBytes: number): Promise<{ name: string; content: Buffer }[]> {
  let reader: Docker.Container;
  try {
    reader = await docker.createContainer(readerSpec(`installer-build-reader-${randomBytes(4).toString('hex')}`, image, BUILD_READER_ROLE, []));
  } catch (err) {
    throw new Error(`cannot read ${dir}: ${engineMessage(err)}`);
  }
  try {
    return await filesOfTar((await reader.getArchive({ path: dir })) as unknown as Readable, maxBytes);
  } catch (err) {
    // `absent`: the image has no such directory, and never will (an image does not change).
    throw Object.assign(new Error(`cannot read ${dir}: ${engineMessage(err)}`), { absent: statusOf(err) === 404 });
  } finally {
    await reader.remove({ force: true }).catch(() => {});
  }
}

/**
 * The kept reader of one directory of the host, for one image. Its name is fixed by the directory
 * and the image, so a process that did not stop cleanly leaves one that the next process of the
 * same build finds and uses; a process of another build names another and removes the earlier
 * one (a reader holds its image, which the image prune would otherwise remove). Each removes its
 * own when it stops.
 */
export class KeptReader {
  private reader: Docker.Container | null = null;
  private creating: Promise<Docker.Container> | null = null;

  constructor(
    private readonly docker: Docker,
    private readonly dir: string,
  ) {}

  private nameFor(image: string): string {
    const id = createHash('sha256').update(`${this.dir}\n${image}`).digest('hex').slice(0, 16);
    return `installer-work-dir-reader-${id}`;
  }

  /** `file` (under the directory) as it is now, read through the reader of `image`. */
  async read(image: string, file: string): Promise<string> {
    try {
      return await readArchive(await this.readerOf(image), file);
    } catch (err) {
      // Removed behind our back (a `docker container prune` removes created containers): once more.
      if (statusOf(err) === 404 && /no such container/i.test(engineMessage(err))) {
        this.reader = null;
        try {
          return await readArchive(await this.readerOf(image), file);
        } catch (again) {
          throw new Error(`cannot read ${file}: ${engineMessage(again)}`);
        }
      }
      throw new Error(`cannot read ${file}: ${engineMessage(err)}`);
    }
  }

  private async readerOf(image: string): Promise<Docker.Container> {
    if (this.reader) return this.reader;
    this.creating ??= this.create(image)
      .then(async (reader) => {
        await this.removeOthers(reader);
        return reader;
      })
      .finally(() => {
        this.creating = null;
      });
    return (this.reader = await this.creating);
  }

  /**
   * Removes the readers of this directory other than `ours`: a process of an earlier build that was
   * killed (a switch, a crash) left its own, which holds that build's image.
   */
  private async removeOthers(ours: Docker.Container): Promise<void> {
    const found = await this.docker.listContainers({ all: true, filters: { label: [`io.installer.role=${KEPT_READER_ROLE}`] } }).catch(() => []);
    for (const c of found) {
      if (c.Id === ours.id || !c.Mounts.some((m) => m.Type === 'bind' && m.Source === this.dir)) continue;
      await this.docker.getContainer(c.Id).remove({ force: true }).catch(() => {});
    }
  }

  private async create(image: string): Promise<Docker.Container> {
    const name = this.nameFor(image);
    const binds = [`${this.dir}:${this.dir}:ro`];
    try {
      return await this.docker.createContainer(readerSpec(name, image, KEPT_READER_ROLE, binds));
    } catch (err) {
      if (statusOf(err) !== 409) throw err;
    }
    // The name is taken: a reader left by a process of this build, with this directory bound.
    const existing = this.docker.getContainer(name);
    const seen = await existing.inspect();
    if (seen.Image === image && (seen.HostConfig.Binds ?? []).join('\n') === binds.join('\n')) return existing;
    await existing.remove({ force: true });
    return this.docker.createContainer(readerSpec(name, image, KEPT_READER_ROLE, binds));
  }

  /** Removes the reader, if this process made or found one. */
  async close(): Promise<void> {
    const reader = this.reader ?? (await this.creating?.catch(() => null)) ?? null;
    this.reader = null;
    await reader?.remove({ force: true }).catch(() => {});
  }
}

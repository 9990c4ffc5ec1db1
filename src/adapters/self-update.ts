// What a self-update needs from outside the process: registry digests through the engine's
// distribution endpoint, pulling by digest and tagging, the installer's own compose file on the
// host (read through the engine: the work dir is not mounted into the backend), the published
// compose file (PUBLISHED_COMPOSE_URL, else the one the channel's newest image ships), the staged
// file in a directory only root can write, and the helper container
// (docs/adr/0041-trusted-sources-and-staging.md).
import type Docker from 'dockerode';
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import type { RuntimePort, SelfUpdatePort } from '../contracts/ports.ts';
import type { BackupRoom, BuildDeclaration } from '../contracts/preflight-report.ts';
import { BuildFactsReader } from './build-facts.ts';
import { BACKUP_ROOM_TTL_MS, recentReading, type BackupResult, type DatabaseBackup } from './database-backup.ts';
import { ensureSafeDir, readSafeFile, UNSAFE_STAGING } from './staging-dir.ts';
import { engineMessage, isNotFound, registryMessage, statusOf } from './engine-errors.ts';
import { checkComposeText, checkPin, fetchComposeFile, imageComposePath } from './compose-source.ts';
import { KeptReader, readThroughContainer } from './container-files.ts';
import { HelperContainers, stagedComposePath, type HelperExit, type HelperSettings, type HelperSpec } from './self-update-helper.ts';

/** How long resolving a registry digest through the engine may take (docs/adr/0012-dependency-faults.md). */
export const REGISTRY_TIMEOUT_MS = 10_000;
/** A failed background pull of the channel's newest image is not tried again for this long. */
export const PREFETCH_RETRY_MS = 10 * 60_000;
/** Compose files read out of images, kept per image id (content-addressed, so never stale). */
const IMAGE_FILE_CACHE_SIZE = 8;

/** The local tag a background pull of the channel's newest image gets, so that the dangling-image prune keeps it. */
export const prefetchTag = (channel: string) => `${channel}-prefetched`;

/** `code` of the error thrown when the registry answers that a repository or tag does not exist. */
export const REGISTRY_NOT_FOUND = 'registry-not-found';
/** `code` of the error thrown while the channel's newest image is still being pulled in the background. */
export const COMPOSE_PENDING = 'compose-pending';
const coded = (message: string, code: string) => Object.assign(new Error(message), { code });

export interface SelfUpdateSettings extends HelperSettings {
  /** Where the channel's published compose file is fetched; unset: the file the target image ships. */
  publishedComposeUrl?: string | undefined;
  /** PUBLISHED_COMPOSE_SHA256: the sha256 (lower-case hex) the published compose file must have, wherever it comes from. */
  publishedComposeSha256?: string | undefined;
  /** Certificate authorities (PEM) trusted for PUBLISHED_COMPOSE_URL besides the system's. */
  sourcesCa?: string | undefined;
  /** How many database backups preflight keeps (SELF_UPDATE_BACKUPS_KEEP, default 5). */
  backupsKeep?: number | undefined;
}


/** Everything the self-update controller does outside the database, as the real engine does it. */
export interface SelfUpdateEngine extends SelfUpdatePort {
  /** The compose file to install for a channel: PUBLISHED_COMPOSE_URL when set, else the one the image ships. */
  publishedComposeOf(channel: string, imageId: string): Promise<string>;
  /** The compose project and service labels of the backend's own container; null outside a container. */
  ownCompose(): Promise<{ project: string | null; service: string | null } | null>;
  /**
   * Dumps the installer's database into the backups volume and keeps the last `keep` and the
   * `alarmed` ones (docs/adr/0032-backup-before-the-switch.md).
   */
  backupDatabase(fromDigest: string | null, keep: number, alarmed?: readonly string[]): Promise<BackupResult>;
  /** Removes what the process keeps on the engine; called once nothing observes any more. */
  close?(): Promise<void>;
  /** Pulls `<repository>@<digest>` and returns the local image id. */
  pullByDigest(repository: string, digest: string): Promise<string>;
  /** The local image id a reference names, or null when there is none. */
  imageIdOf(reference: string): Promise<string | null>;
  tag(imageId: string, repository: string, tag: string): Promise<void>;
  untag(reference: string): Promise<void>;
  readStaged(): Promise<string | null>;
  writeStaged(content: string): Promise<void>;
  removeStaged(): Promise<void>;
  /** Force-removes a leftover helper; false when there was none. */
  removeHelper(): Promise<boolean>;
  /** Kills a helper still running past its deadline and waits (bounded) until it has exited; its output stays readable. */
  stopHelper(id: string | null, signal: AbortSignal): Promise<void>;
  /** Creates and starts the helper; returns its container id. */
  spawnHelper(spec: HelperSpec): Promise<string>;
  /** The helper container labelled with a request, if it exists; `created`: never started. */
  helperOf(requestId: string): Promise<{ id: string; running: boolean; created?: boolean } | null>;
  /** Waits until the helper has exited (or the deadline passed) and reads what it printed. */
  waitHelper(id: string | null, opts: { deadline: Date | null; signal: AbortSignal }): Promise<HelperExit>;
  /** Everything the helper printed (stdout and stderr, in order), as lines; at most the last HELPER_OUTPUT_MAX_LINES. */
  helperOutput(id: string | null, signal: AbortSignal): Promise<string[]>;
}

export class DockerSelfUpdateEngine implements SelfUpdateEngine {
  constructor(
    private readonly docker: Docker,
    private readonly s: SelfUpdateSettings,
    private readonly runtime: RuntimePort,
    private readonly databaseBackup: DatabaseBackup | null = null,
  ) {
    this.helpers = new HelperContainers(docker);
    this.workDirReader = new KeptReader(docker, s.workDir);
    this.builds = new BuildFactsReader(docker);
    this.room = databaseBackup ? recentReading(() => databaseBackup.room(), BACKUP_ROOM_TTL_MS) : null;
  }

  private readonly helpers: HelperContainers;
  private readonly workDirReader: KeptReader;

  async backupDatabase(fromDigest: string | null, keep: number, alarmed: readonly string[] = []): Promise<BackupResult> {
    if (!this.databaseBackup) throw new Error('no database backup is set up for this installer');
    return this.databaseBackup.backup(fromDigest, keep, alarmed);
  }

  private readonly room: (() => Promise<BackupRoom>) | null;

  async backupRoom(): Promise<BackupRoom> {
    if (!this.room) throw new Error('no database backup is set up for this installer');
    return this.room();
  }

  private readonly builds: BuildFactsReader;

  buildDeclaration(reference: string): Promise<BuildDeclaration | null> {
    return this.builds.of(reference);
  }

  /** Files read out of images, by image id and path; the oldest goes first once the cache is full. */
  private readonly imageFiles = new Map<string, string>();
  /** The one background pull of a channel's newest image, if any, and pulls that failed recently. */
  private prefetching: { digest: string; done: Promise<void> } | null = null;
  private readonly prefetchFailed = new Map<string, { at: number; reason: string }>();

  async remoteDigest(reference: string, knownDigest?: string | null): Promise<string> {
    try {
      return await this.distribution(reference);
    } catch (err) {
      if (!isNotFound(err)) throw new Error(`cannot resolve ${reference} in the registry: ${registryMessage(engineMessage(err))}`);
      throw coded(await this.whatIsMissing(reference, knownDigest ?? null, engineMessage(err)), REGISTRY_NOT_FOUND);
    }
  }

  /**
   * The registry said "not found": a registry (distribution 2.x) answers so for a missing tag and a
   * missing repository alike. The digest this install runs tells them apart: a repository that
   * holds it exists, so the tag is what is missing.
   */
  private async whatIsMissing(reference: string, knownDigest: string | null, said: string): Promise<string> {
    const colon = reference.lastIndexOf(':');
    const repo = colon > reference.lastIndexOf('/') ? reference.slice(0, colon) : reference;
    const tag = colon > reference.lastIndexOf('/') ? reference.slice(colon + 1) : 'latest';
    const answer = registryMessage(said);
    if (!knownDigest) return `${reference} does not exist in the registry: no such repository or tag (${answer})`;
    try {
      await this.distribution(`${repo}@${knownDigest}`);
      return `tag ${tag} does not exist in repository ${repo} (the repository exists and holds the running image; the registry says: ${answer})`;
    } catch (err) {
      if (isNotFound(err)) return `repository ${repo} does not exist in the registry (it has neither the tag ${tag} nor the running image; the registry says: ${answer})`;
      return `${reference} does not exist in the registry: no such repository or tag (${answer})`;
    }
  }

  /** The engine's distribution endpoint, bounded by REGISTRY_TIMEOUT_MS; throws the engine's error. */
  private async distribution(reference: string): Promise<string> {
    // The engine's own registry timeouts are minutes long; the check and preflight must answer
    // sooner (docs/adr/0012-dependency-faults.md). Image.distribution() of this dockerode does
    // not pass an abort signal on, so the endpoint is dialled directly.
    const limit = REGISTRY_TIMEOUT_MS;
    const abort = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        abort.abort();
        reject(new Error(`the registry did not answer within ${limit / 1000} s`));
      }, limit);
    });
    const dialled = new Promise<unknown>((resolve, reject) => {
      this.docker.modem.dial(
        {
          path: `/distribution/${reference}/json`,
          method: 'GET',
          abortSignal: abort.signal,
          statusCodes: { 200: true, 401: 'no such image or not authorised', 403: 'forbidden', 404: 'no such image', 500: 'server error' },
        } as unknown as Parameters<Docker['modem']['dial']>[0],
        (err: unknown, data: unknown) => (err ? reject(err as Error) : resolve(data)),
      );
    });
    dialled.catch(() => {}); // rejected by the abort after the timeout has already answered
    try {
      const d = (await Promise.race([dialled, timedOut])) as { Descriptor?: { digest?: string } } | null;
      const digest = d?.Descriptor?.digest;
      if (!digest || !/^sha256:[0-9a-f]{64}$/.test(digest)) throw new Error('the engine answered no digest');
      return digest;
    } finally {
      clearTimeout(timer);
      abort.abort();
    }
  }

  async localComposeFile(): Promise<string> {
    const file = path.posix.join(this.s.workDir, this.s.composeFile);
    const v = await this.runtime.version();
    if (!v.inContainer || !v.imageId) return readFile(file, 'utf8');
    // The work dir is not mounted into the backend: a created (never started) container of our own
    // image with the work dir mounted read-only lets the engine hand the file over as an archive.
    return this.workDirReader.read(v.imageId, file);
  }

  /** Removes what the process keeps on the engine (the work dir's reader). */
  async close(): Promise<void> {
    await this.workDirReader.close();
  }

  /** The channel's compose file as an image ships it, read once per image id. */
  async composeFileOfImage(imageId: string, channel: string): Promise<string> {
    const file = imageComposePath(channel);
    const key = `${imageId} ${file}`;
    const cached = this.imageFiles.get(key);
    if (cached !== undefined) return cached;
    let text: string;
    try {
      text = checkComposeText(await readThroughContainer(this.docker, imageId, file, []), `the compose file ${file} of image ${imageId}`);
    } catch (err) {
      throw new Error(`the image ${imageId} ships no compose file for channel ${channel}: ${(err as Error).message}`);
    }
    this.imageFiles.set(key, text);
    while (this.imageFiles.size > IMAGE_FILE_CACHE_SIZE) this.imageFiles.delete(this.imageFiles.keys().next().value!);
    return text;
  }

  private fetchPublished(url: string): Promise<string> {
    return fetchComposeFile(url, { sha256: this.s.publishedComposeSha256, ca: this.s.sourcesCa });
  }

  /** The file an image ships, held to PUBLISHED_COMPOSE_SHA256 when that is set. */
  private async pinnedFileOfImage(imageId: string, channel: string): Promise<string> {
    const text = await this.composeFileOfImage(imageId, channel);
    return checkPin(text, this.s.publishedComposeSha256, `the compose file ${imageComposePath(channel)} of image ${imageId}`);
  }

  async publishedComposeOf(channel: string, imageId: string): Promise<string> {
    if (this.s.publishedComposeUrl) return this.fetchPublished(this.s.publishedComposeUrl);
    return this.pinnedFileOfImage(imageId, channel);
  }

  async publishedComposeFile(channel: string | null, newestDigest: string | null): Promise<string> {
    if (this.s.publishedComposeUrl) return this.fetchPublished(this.s.publishedComposeUrl);
    if (!channel) throw new Error('the channel is unknown, so is the compose file it publishes');
    if (!newestDigest) throw new Error(`the newest build of channel ${channel} is unknown, so is the compose file it ships`);
    const imageId = await this.imageIdOf(`${this.s.repository}@${newestDigest}`);
    if (imageId) return this.pinnedFileOfImage(imageId, channel);
    throw coded(this.prefetch(channel, newestDigest), COMPOSE_PENDING);
  }

  /**
   * Pulls the channel's newest image in the background (one pull at a time; a failed digest is
   * not tried again for PREFETCH_RETRY_MS) and says where that stands. The pull is tagged
   * `<channel>-prefetched`, so that the dangling-image prune keeps it until the update needs it.
   */
  private prefetch(channel: string, digest: string): string {
    const what = `the newest build of channel ${channel} (${digest}) is not local yet`;
    if (this.prefetching) {
      return this.prefetching.digest === digest
        ? `${what}: it is being pulled to read the compose file it ships`
        : `${what}: another pull is running (${this.prefetching.digest}); a check after it has ended starts this one`;
    }
    const failed = this.prefetchFailed.get(digest);
    if (failed && Date.now() - failed.at < PREFETCH_RETRY_MS) {
      return `${what}: pulling it failed (${failed.reason}); it is tried again ${Math.ceil((failed.at + PREFETCH_RETRY_MS - Date.now()) / 60_000)} min after that failure`;
    }
    const done = (async () => {
      try {
        const imageId = await this.pullByDigest(this.s.repository, digest);
        await this.tag(imageId, this.s.repository, prefetchTag(channel));
        this.prefetchFailed.delete(digest);
      } catch (err) {
        this.prefetchFailed.set(digest, { at: Date.now(), reason: (err as Error).message });
      } finally {
        this.prefetching = null;
      }
    })();
    this.prefetching = { digest, done };
    return `${what}: it is being pulled to read the compose file it ships`;
  }

  /** Resolves once a background pull has ended (tests, shutdown); immediately when none runs. */
  async prefetchSettled(): Promise<void> {
    await this.prefetching?.done;
  }

  async ownCompose(): Promise<{ project: string | null; service: string | null } | null> {
    const v = await this.runtime.version();
    if (!v.inContainer || !v.containerId) return null;
    const c = await this.docker.getContainer(v.containerId).inspect();
    const labels = c.Config.Labels ?? {};
    return { project: labels['com.docker.compose.project'] ?? null, service: labels['com.docker.compose.service'] ?? null };
  }

  async pullByDigest(repository: string, digest: string): Promise<string> {
    try {
      const stream = (await this.docker.createImage({ fromImage: repository, tag: digest })) as Readable;
      await new Promise<void>((resolve, reject) => {
        this.docker.modem.followProgress(stream, (err: Error | null, out: { error?: string; errorDetail?: { message?: string } }[]) => {
          const failed = out?.find((o) => o.error || o.errorDetail);
          if (err) reject(err);
          else if (failed) reject(new Error(failed.errorDetail?.message ?? failed.error));
          else resolve();
        });
      });
    } catch (err) {
      throw new Error(`pulling ${repository}@${digest} failed: ${engineMessage(err)}`);
    }
    const id = await this.imageIdOf(`${repository}@${digest}`);
    if (!id) throw new Error(`${repository}@${digest} is not present after the pull`);
    return id;
  }

  async imageIdOf(reference: string): Promise<string | null> {
    try {
      return (await this.docker.getImage(reference).inspect()).Id;
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw new Error(`cannot inspect ${reference}: ${engineMessage(err)}`);
    }
  }

  async tag(imageId: string, repository: string, tag: string): Promise<void> {
    try {
      await this.docker.getImage(imageId).tag({ repo: repository, tag });
    } catch (err) {
      throw new Error(`cannot tag ${imageId} as ${repository}:${tag}: ${engineMessage(err)}`);
    }
  }

  async untag(reference: string): Promise<void> {
    try {
      // A tag of an image in use is only a reference: force drops the name, noprune keeps the image.
      await this.docker.getImage(reference).remove({ force: true, noprune: true });
    } catch (err) {
      if (statusOf(err) === 404) return;
      throw new Error(`cannot remove the tag ${reference}: ${engineMessage(err)}`);
    }
  }

  private get staged(): string {
    return stagedComposePath(this.s.stagingRoot);
  }

  /**
   * The staged file's directory (`<staging-root>/self-update`), made with mode 0700 where missing;
   * throws when it or the staging root is a symbolic link, owned by another user or writable by
   * group or others, or when a directory above them could be changed by another user.
   */
  private async stagingDir(create: boolean): Promise<string | null> {
    const dir = path.dirname(this.staged);
    return ensureSafeDir(this.s.stagingRoot, ['self-update'], { create, setting: 'STAGING_ROOT' }).then((ok) => (ok ? dir : null));
  }

  async readStaged(): Promise<string | null> {
    if ((await this.stagingDir(false)) === null) return null;
    return readSafeFile(this.staged).catch((err: NodeJS.ErrnoException) => {
      if (err.code === UNSAFE_STAGING) throw err;
      throw new Error(`cannot read ${this.staged}: ${err.code ?? err.message}`);
    });
  }

  async writeStaged(content: string): Promise<void> {
    await this.stagingDir(true);
    const tmp = `${this.staged}.tmp-${process.pid}`;
    try {
      await rm(tmp, { force: true });
      // wx: never through a link or a file someone else left under that name.
      await writeFile(tmp, content, { mode: 0o600, flag: 'wx' });
      await rename(tmp, this.staged);
    } catch (err) {
      await rm(tmp, { force: true }).catch(() => {});
      throw new Error(`cannot write ${this.staged}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }

  async removeStaged(): Promise<void> {
    if ((await this.stagingDir(false)) === null) return;
    await rm(this.staged, { force: true });
  }

  removeHelper(): Promise<boolean> {
    return this.helpers.remove();
  }

  stopHelper(id: string | null, signal: AbortSignal): Promise<void> {
    return this.helpers.stop(id, signal);
  }

  spawnHelper(spec: HelperSpec): Promise<string> {
    return this.helpers.spawn(spec);
  }

  helperOf(requestId: string): Promise<{ id: string; running: boolean; created?: boolean } | null> {
    return this.helpers.of(requestId);
  }

  waitHelper(id: string | null, opts: { deadline: Date | null; signal: AbortSignal }): Promise<HelperExit> {
    return this.helpers.wait(id, opts);
  }

  helperOutput(id: string | null, signal: AbortSignal): Promise<string[]> {
    return this.helpers.output(id, signal);
  }
}

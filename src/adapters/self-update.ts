// What a self-update needs from outside the process: registry digests through the engine's
// distribution endpoint, pulling by digest and tagging, the installer's own compose file on the
// host (read through the engine: the work dir is not mounted into the backend), the published
// compose file (PUBLISHED_COMPOSE_URL, else the one the channel's newest image ships), the staged
// file in a directory only root can write, and the helper container
// (docs/adr/0041-trusted-sources-and-staging.md).
import type Docker from 'dockerode';
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import { createHash, randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import type { RuntimePort, SelfUpdatePort } from '../contracts/ports.ts';
import type { BackupResult, DatabaseBackup } from './database-backup.ts';
import { fetchTrusted } from './trusted-fetch.ts';
import { ensureSafeDir, readSafeFile, UNSAFE_STAGING } from './staging-dir.ts';
import { pinMismatch, printableUrl } from '../contracts/trusted-source.ts';

export const HELPER_NAME = 'installer-self-updater';
export const HELPER_SCRIPT = '/usr/src/app/scripts/self-update.sh';
/** The backend's compose service: the helper's `--wait` judges only it and its dependencies. */
export const BACKEND_SERVICE = 'backend';
const MAX_COMPOSE_BYTES = 1024 * 1024;
/** How long resolving a registry digest through the engine may take (docs/adr/0012-dependency-faults.md). */
export const REGISTRY_TIMEOUT_MS = 10_000;
/** How long one engine request about the helper (inspect, logs) may take. */
export const ENGINE_REQUEST_TIMEOUT_MS = 10_000;
/** Where an installer image ships the compose files it publishes (scripts/build-image.sh). */
export const IMAGE_COMPOSE_DIR = '/usr/src/app/deploy';
/** A failed background pull of the channel's newest image is not tried again for this long. */
export const PREFETCH_RETRY_MS = 10 * 60_000;
/** Compose files read out of images, kept per image id (content-addressed, so never stale). */
const IMAGE_FILE_CACHE_SIZE = 8;

/** The compose file a build publishes for a channel: `docker-compose.yml` for prod, `docker-compose.<channel>.yml` otherwise. */
export const composeFileOfChannel = (channel: string) => (channel === 'prod' ? 'docker-compose.yml' : `docker-compose.${channel}.yml`);
/** Where the channel's compose file sits inside an installer image. */
export const imageComposePath = (channel: string) => path.posix.join(IMAGE_COMPOSE_DIR, composeFileOfChannel(channel));
/** The local tag a background pull of the channel's newest image gets, so that the dangling-image prune keeps it. */
export const prefetchTag = (channel: string) => `${channel}-prefetched`;

/** `code` of the error thrown when the registry answers that a repository or tag does not exist. */
export const REGISTRY_NOT_FOUND = 'registry-not-found';
/** `code` of the error thrown while the channel's newest image is still being pulled in the background. */
export const COMPOSE_PENDING = 'compose-pending';
const coded = (message: string, code: string) => Object.assign(new Error(message), { code });

export interface SelfUpdateSettings {
  /** `<registry>/<image name>`, e.g. `registry.example.com/installer`. */
  repository: string;
  project: string;
  workDir: string;
  composeFile: string;
  stagingRoot: string;
  rollbackTag: string;
  dockerSocket: string;
  /** Where the channel's published compose file is fetched; unset: the file the target image ships. */
  publishedComposeUrl?: string | undefined;
  /** PUBLISHED_COMPOSE_SHA256: the sha256 (lower-case hex) the published compose file must have, wherever it comes from. */
  publishedComposeSha256?: string | undefined;
  /** Certificate authorities (PEM) trusted for PUBLISHED_COMPOSE_URL besides the system's. */
  sourcesCa?: string | undefined;
  /** Test-only override of the helper's 300 s wait (SELF_UPDATE_WAIT_TIMEOUT in the helper). */
  waitTimeoutSeconds?: number | undefined;
  /** How long the helper waits for the migrations of the new image (SELF_UPDATE_INIT_TIMEOUT in the helper); unset: HELPER_INIT_TIMEOUT_SECONDS. */
  initTimeoutSeconds?: number | undefined;
  /** How many database backups preflight keeps (SELF_UPDATE_BACKUPS_KEEP, default 5). */
  backupsKeep?: number | undefined;
}

/** The helper's wait for the new image's one-shot init (the migrations) unless SELF_UPDATE_INIT_TIMEOUT_SECONDS says otherwise. */
export const HELPER_INIT_TIMEOUT_SECONDS = 900;
/**
 * What the helper's other bounded steps may take beyond its two waits and the init's: asking
 * compose for the services (60 s), starting the init (120 s), finding it (60 s), reading its output
 * (60 s), removing it when it overran (60 s), and the create before each of the two `--wait`s
 * (120 s each) (scripts/self-update.sh).
 */
export const HELPER_STEPS_SECONDS = 600;

/** The longest the helper can run: its init's wait, two switch waits and every other bounded step. */
export function helperBudgetMs(s: Pick<SelfUpdateSettings, 'waitTimeoutSeconds' | 'initTimeoutSeconds'>): number {
  return ((s.initTimeoutSeconds ?? HELPER_INIT_TIMEOUT_SECONDS) + 2 * (s.waitTimeoutSeconds ?? 300) + HELPER_STEPS_SECONDS) * 1000;
}

/** `<staging-root>/self-update/docker-compose.yml`: `/var/lib/installer/staging/self-update/docker-compose.yml` by default. */
export const stagedComposePath = (stagingRoot: string) => path.posix.join(stagingRoot, 'self-update', 'docker-compose.yml');

export interface HelperSpec {
  name: string;
  image: string;
  cmd: string[];
  binds: string[];
  env: string[];
  labels: Record<string, string>;
}

/** The sha256 (lower-case hex) of a staged file's content, as the helper's sha256sum prints it. */
export const sha256Of = (content: string | Buffer) => createHash('sha256').update(content).digest('hex');

/**
 * The helper container of the spec: the new tag's image, three identical-path mounts, the fixed
 * command; `stagedSha256` (recorded with the request when the file was staged) is the digest the
 * helper checks the staged file against before it installs it.
 */
export function helperSpec(s: SelfUpdateSettings, target: { tag: string; digest: string }, requestId: string, stagedSha256: string | null = null): HelperSpec {
  const env: string[] = [];
  if (stagedSha256) env.push(`SELF_UPDATE_STAGED_SHA256=${stagedSha256}`);
  if (s.waitTimeoutSeconds) env.push(`SELF_UPDATE_WAIT_TIMEOUT=${s.waitTimeoutSeconds}`);
  // Always handed over: the backend's deadline for the helper counts this very wait.
  env.push(`SELF_UPDATE_INIT_TIMEOUT=${s.initTimeoutSeconds ?? HELPER_INIT_TIMEOUT_SECONDS}`);
  return {
    name: HELPER_NAME,
    image: `${s.repository}:${target.tag}`,
    cmd: ['sh', HELPER_SCRIPT, s.project, s.workDir, s.composeFile, stagedComposePath(s.stagingRoot), s.rollbackTag, target.tag, BACKEND_SERVICE],
    binds: [`${s.dockerSocket}:${s.dockerSocket}`, `${s.workDir}:${s.workDir}`, `${s.stagingRoot}:${s.stagingRoot}`],
    env,
    labels: { 'io.installer.self-update.request': requestId, 'io.installer.self-update.target': target.digest },
  };
}

export interface HelperExit {
  state: 'exited' | 'missing' | 'timed-out';
  exitCode: number | null;
  status: 'ok' | 'rolled-back' | 'failed' | null;
  switchFailure: string | null;
  rollbackFailure: string | null;
}

/** Reads the helper's own summary lines (`self-update: status …`, `… switch failed: …`, `… rollback failed: …`). */
export function parseHelperLog(text: string): Pick<HelperExit, 'status' | 'switchFailure' | 'rollbackFailure'> {
  let status: HelperExit['status'] = null;
  let switchFailure: string | null = null;
  let rollbackFailure: string | null = null;
  for (const line of text.split(/\r?\n/)) {
    let m = /^self-update: status (ok|rolled-back|failed)\b/.exec(line);
    if (m) status = m[1] as HelperExit['status'];
    m = /^self-update: switch failed: (.*)$/.exec(line);
    if (m) switchFailure = m[1]!.trim();
    m = /^self-update: rollback failed: (.*)$/.exec(line);
    if (m) rollbackFailure = m[1]!.trim();
  }
  return { status, switchFailure, rollbackFailure };
}

/** Splits the engine's multiplexed log stream (8-byte frame headers) into text. */
export function demultiplex(buf: Buffer): string {
  let out = '';
  let i = 0;
  while (i + 8 <= buf.length && (buf[i] === 0 || buf[i] === 1 || buf[i] === 2) && buf[i + 1] === 0) {
    const size = buf.readUInt32BE(i + 4);
    out += buf.subarray(i + 8, i + 8 + size).toString('utf8');
    i += 8 + size;
  }
  return i === 0 ? buf.toString('utf8') : out;
}

/** The content of the first regular file in a tar archive (what the engine's archive endpoint returns). */
export async function firstFileOfTar(archive: Buffer | Readable): Promise<Buffer> {
  const extract = tar.extract();
  let found: Buffer | null = null;
  extract.on('entry', (header, stream, next) => {
    if (found === null && (header.type === 'file' || header.type === 'contiguous-file')) {
      collect(stream).then((b) => {
        found = b;
        next();
      }, next);
    } else {
      stream.on('end', () => next()).resume(); // directories, links, pax headers: drained, skipped
    }
  });
  const source = Buffer.isBuffer(archive) ? Readable.from([archive]) : archive;
  await pipeline(source, extract);
  if (found === null) throw new Error('the archive holds no regular file');
  return found;
}

const engineMessage = (err: unknown): string => {
  const e = err as { json?: { message?: string }; reason?: string; message?: string; statusCode?: number };
  return e.json?.message ?? e.message ?? String(err);
};

const statusOf = (err: unknown) => (err as { statusCode?: number }).statusCode;

/** The registry's "no such repository or tag", as the engine passes it on (404, or 401 "repository does not exist"). */
const isNotFound = (err: unknown): boolean =>
  statusOf(err) === 404 || /manifest unknown|name unknown|repository does not exist|not found: manifest/i.test(engineMessage(err));

/**
 * The engine quotes what a broken registry sent ("malformed HTTP response \"<bytes>\""): the bytes
 * are dropped, anything unprintable is replaced and the message is capped, so it stays readable.
 */
export function registryMessage(message: string): string {
  const text = message
    .replace(/(malformed (?:HTTP [a-z ]+|MIME header line)) ".*"/s, '$1 (the answer is not HTTP)')
    .replace(/[^\x20-\x7e]/g, '?');
  return text.length > 300 ? `${text.slice(0, 300)}...` : text;
}

async function collect(stream: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of stream) parts.push(Buffer.isBuffer(c) ? c : Buffer.from(c as string));
  return Buffer.concat(parts);
}

export interface ComposeSourceOptions {
  /** The sha256 (lower-case hex) the file must have (PUBLISHED_COMPOSE_SHA256). */
  sha256?: string | undefined;
  /** Certificate authorities (PEM) trusted besides the system's. */
  ca?: string | undefined;
  timeoutMs?: number;
}

/**
 * Fetches a compose file from an https:// URL (plain http:// to loopback only; redirects within
 * the same origin only) or a file:// URL; it must look like a compose file and match its pin.
 * Errors name the URL without credentials or query string.
 */
export async function fetchComposeFile(url: string, opts: ComposeSourceOptions = {}): Promise<string> {
  let text: string;
  const u = new URL(url);
  const shown = printableUrl(u);
  if (u.protocol === 'file:') {
    text = await readFile(fileURLToPath(u), 'utf8').catch((err: NodeJS.ErrnoException) => {
      throw new Error(`cannot read the published compose file ${shown} (${err.code ?? err.message})`);
    });
    checkPin(text, opts.sha256, `the published compose file ${shown}`);
  } else if (u.protocol === 'http:' || u.protocol === 'https:') {
    const got = await fetchTrusted(u, {
      what: 'the published compose file', maxBytes: MAX_COMPOSE_BYTES + 1, sha256: opts.sha256 ?? null, timeoutMs: opts.timeoutMs ?? 60_000, ...(opts.ca ? { ca: opts.ca } : {}),
    });
    text = got.body.toString('utf8');
  } else {
    throw new Error(`PUBLISHED_COMPOSE_URL must be an https:// or file:// URL, not ${u.protocol}`);
  }
  return checkComposeText(text, `the published compose file ${shown}`);
}

/** Throws when a pin is set and the text's sha256 differs, naming both digests. */
export function checkPin(text: string, sha256: string | undefined | null, what: string): string {
  if (!sha256) return text;
  const actual = sha256Of(text);
  if (actual !== sha256) throw new Error(pinMismatch(what, sha256, actual));
  return text;
}

/** The published file must look like a compose file: at most 1 MB, a top-level `services:`. */
export function checkComposeText(text: string, what: string): string {
  if (Buffer.byteLength(text) > MAX_COMPOSE_BYTES) throw new Error(`${what} is larger than 1 MB`);
  if (!/^services:\s*$/m.test(text)) throw new Error(`${what} has no top-level "services:": not a compose file`);
  return text;
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

/** The most lines of the helper's output an update's transcript keeps (its last ones). */
export const HELPER_OUTPUT_MAX_LINES = 20_000;

/** The helper's output as transcript lines: split, trailing blank line dropped, the last HELPER_OUTPUT_MAX_LINES. */
export function helperLines(text: string): string[] {
  const lines = text.split(/\r?\n/);
  if (lines.at(-1) === '') lines.pop();
  return lines.length > HELPER_OUTPUT_MAX_LINES ? lines.slice(-HELPER_OUTPUT_MAX_LINES) : lines;
}

export class DockerSelfUpdateEngine implements SelfUpdateEngine {
  constructor(
    private readonly docker: Docker,
    private readonly s: SelfUpdateSettings,
    private readonly runtime: RuntimePort,
    private readonly databaseBackup: DatabaseBackup | null = null,
  ) {}

  async backupDatabase(fromDigest: string | null, keep: number, alarmed: readonly string[] = []): Promise<BackupResult> {
    if (!this.databaseBackup) throw new Error('no database backup is set up for this installer');
    return this.databaseBackup.backup(fromDigest, keep, alarmed);
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
    return this.readThroughContainer(v.imageId, file, [`${this.s.workDir}:${this.s.workDir}:ro`]);
  }

  /** One file through a created, never started container of `image` (with `binds`), removed afterwards. */
  private async readThroughContainer(image: string, file: string, binds: string[]): Promise<string> {
    let reader: Docker.Container;
    try {
      reader = await this.docker.createContainer({
        name: `installer-compose-reader-${randomBytes(4).toString('hex')}`,
        Image: image,
        Cmd: ['true'],
        NetworkDisabled: true,
        Healthcheck: { Test: ['NONE'] },
        Labels: { 'io.installer.role': 'compose-reader' },
        HostConfig: { Binds: binds, AutoRemove: false },
      });
    } catch (err) {
      throw new Error(`cannot read ${file}: ${engineMessage(err)}`);
    }
    try {
      const stream = (await reader.getArchive({ path: file })) as unknown as Readable;
      return (await firstFileOfTar(stream)).toString('utf8');
    } catch (err) {
      throw new Error(`cannot read ${file}: ${engineMessage(err)}`);
    } finally {
      await reader.remove({ force: true }).catch(() => {});
    }
  }

  /** The channel's compose file as an image ships it, read once per image id. */
  async composeFileOfImage(imageId: string, channel: string): Promise<string> {
    const file = imageComposePath(channel);
    const key = `${imageId} ${file}`;
    const cached = this.imageFiles.get(key);
    if (cached !== undefined) return cached;
    let text: string;
    try {
      text = checkComposeText(await this.readThroughContainer(imageId, file, []), `the compose file ${file} of image ${imageId}`);
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

  async removeHelper(): Promise<boolean> {
    try {
      await this.docker.getContainer(HELPER_NAME).remove({ force: true });
      return true;
    } catch (err) {
      if (statusOf(err) === 404) return false;
      throw new Error(`cannot remove the leftover ${HELPER_NAME}: ${engineMessage(err)}`);
    }
  }

  async stopHelper(id: string | null, signal: AbortSignal): Promise<void> {
    const c = this.docker.getContainer(id ?? HELPER_NAME);
    const bounded = () => ({ abortSignal: AbortSignal.any([signal, AbortSignal.timeout(ENGINE_REQUEST_TIMEOUT_MS)]) }) as object;
    try {
      await c.kill(bounded());
    } catch (err) {
      // Gone, or exited in the meantime: nothing runs any more.
      if (statusOf(err) === 404 || statusOf(err) === 409) return;
      throw new Error(`cannot stop ${HELPER_NAME}: ${engineMessage(err)}`);
    }
    await c.wait(bounded()).catch((err: unknown) => {
      if (statusOf(err) !== 404) throw new Error(`${HELPER_NAME} was killed but did not exit: ${engineMessage(err)}`);
    });
  }

  async spawnHelper(spec: HelperSpec): Promise<string> {
    let id: string | undefined;
    try {
      const c = await this.docker.createContainer({
        name: spec.name,
        Image: spec.image,
        Cmd: spec.cmd,
        Env: spec.env,
        Labels: spec.labels,
        // The helper would inherit the image's HEALTHCHECK of the backend (rig.md).
        Healthcheck: { Test: ['NONE'] },
        HostConfig: { Binds: spec.binds, AutoRemove: false, RestartPolicy: { Name: 'no' } },
      });
      id = c.id;
      await c.start();
      return c.id;
    } catch (err) {
      if (id) await this.docker.getContainer(id).remove({ force: true }).catch(() => {});
      throw new Error(`cannot start ${spec.name} from ${spec.image}: ${engineMessage(err)}`);
    }
  }

  async helperOf(requestId: string): Promise<{ id: string; running: boolean; created?: boolean } | null> {
    const list = await this.docker.listContainers({ all: true, filters: { label: [`io.installer.self-update.request=${requestId}`] } });
    const c = list[0];
    return c ? { id: c.Id, running: c.State === 'running', created: c.State === 'created' } : null;
  }

  async waitHelper(id: string | null, opts: { deadline: Date | null; signal: AbortSignal }): Promise<HelperExit> {
    const c = this.docker.getContainer(id ?? HELPER_NAME);
    const missing: HelperExit = { state: 'missing', exitCode: null, status: null, switchFailure: null, rollbackFailure: null };
    // Every request but the wait itself is bounded: an engine that takes a request and never
    // answers must fail this attempt (which is retried), not hold the boot reconciliation.
    const bounded = () => ({ abortSignal: AbortSignal.any([opts.signal, AbortSignal.timeout(ENGINE_REQUEST_TIMEOUT_MS)]) }) as object;
    let info: Docker.ContainerInspectInfo;
    try {
      info = await c.inspect(bounded());
    } catch (err) {
      if (statusOf(err) === 404) return missing;
      throw err;
    }
    let timedOut = false;
    if (info.State.Running) {
      const ms = opts.deadline ? opts.deadline.getTime() - Date.now() : Number.POSITIVE_INFINITY;
      if (ms <= 0) timedOut = true;
      else {
        let timer: NodeJS.Timeout | undefined;
        const stop = new AbortController();
        const onAbort = () => stop.abort();
        opts.signal.addEventListener('abort', onAbort, { once: true });
        try {
          const waited = c.wait({ abortSignal: stop.signal }).then(() => 'exited' as const);
          const deadline = Number.isFinite(ms) ? new Promise<'timed-out'>((r) => (timer = setTimeout(() => r('timed-out'), ms))) : new Promise<never>(() => {});
          timedOut = (await Promise.race([waited, deadline])) === 'timed-out';
        } catch (err) {
          if (statusOf(err) === 404) return missing;
          throw err;
        } finally {
          clearTimeout(timer);
          opts.signal.removeEventListener('abort', onAbort);
          stop.abort();
        }
      }
      if (opts.signal.aborted) throw new Error('stopped waiting for the helper');
      try {
        info = await c.inspect(bounded());
      } catch (err) {
        if (statusOf(err) === 404) return missing;
        throw err;
      }
    }
    const raw = (await c.logs({ stdout: true, stderr: true, follow: false, tail: 400, ...bounded() })) as unknown as Buffer;
    const parsed = parseHelperLog(demultiplex(Buffer.isBuffer(raw) ? raw : Buffer.from(String(raw))));
    return {
      state: timedOut ? 'timed-out' : 'exited',
      exitCode: timedOut ? null : info.State.ExitCode,
      ...parsed,
    };
  }

  async helperOutput(id: string | null, signal: AbortSignal): Promise<string[]> {
    const c = this.docker.getContainer(id ?? HELPER_NAME);
    const abortSignal = AbortSignal.any([signal, AbortSignal.timeout(ENGINE_REQUEST_TIMEOUT_MS)]);
    const raw = (await c.logs({ stdout: true, stderr: true, follow: false, abortSignal } as object as { follow: false; stdout: true; stderr: true })) as unknown as Buffer;
    return helperLines(demultiplex(Buffer.isBuffer(raw) ? raw : Buffer.from(String(raw))));
  }
}

// Where a self-update's compose file comes from and what it must be (docs/adr/0041-trusted-sources-and-staging.md):
// the channel's file name and its path in an installer image, a file read out of an image's archive,
// PUBLISHED_COMPOSE_URL fetched from a trusted source, its pin and its shape.
import { readFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import tar from 'tar-stream';
import { fetchTrusted } from './trusted-fetch.ts';
import { pinMismatch, printableUrl } from '../contracts/trusted-source.ts';

const MAX_COMPOSE_BYTES = 1024 * 1024;

/** Where an installer image ships the compose files it publishes (scripts/build-image.sh). */
export const IMAGE_COMPOSE_DIR = '/usr/src/app/deploy';

/** The compose file a build publishes for a channel: `docker-compose.yml` for prod, `docker-compose.<channel>.yml` otherwise. */
export const composeFileOfChannel = (channel: string) => (channel === 'prod' ? 'docker-compose.yml' : `docker-compose.${channel}.yml`);
/** Where the channel's compose file sits inside an installer image. */
export const imageComposePath = (channel: string) => path.posix.join(IMAGE_COMPOSE_DIR, composeFileOfChannel(channel));

/** The sha256 (lower-case hex) of a staged file's content, as the helper's sha256sum prints it. */
export const sha256Of = (content: string | Buffer) => createHash('sha256').update(content).digest('hex');

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

/** Every regular file of a tar archive: its path in the archive and its content, up to `maxBytes` in all. */
export async function filesOfTar(archive: Readable, maxBytes: number): Promise<{ name: string; content: Buffer }[]> {
  const extract = tar.extract();
  const files: { name: string; content: Buffer }[] = [];
  let total = 0;
  extract.on('entry', (header, stream, next) => {
    if (header.type !== 'file' && header.type !== 'contiguous-file') return void stream.on('end', () => next()).resume();
    total += header.size ?? 0;
    if (total > maxBytes) return next(new Error(`the archive holds more than ${maxBytes} bytes of files`));
    collect(stream).then((content) => {
      files.push({ name: header.name, content });
      next();
    }, next);
  });
  await pipeline(archive, extract);
  return files;
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

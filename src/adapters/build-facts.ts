// What a build (an installer image) declares about itself, read from the engine for the preflight
// report (docs/adr/0054-preflight-report.md): its labels, and the schema migrations it ships with
// whether each is a contract step (the mark the migrations check reads, src/db/migration-rules.ts).
// An image never changes, so each is read once per image id.
import type Docker from 'dockerode';
import type { BuildDeclaration } from '../contracts/preflight-report.ts';
import { readDirThroughContainer } from './container-files.ts';
import { engineMessage, statusOf } from './engine-errors.ts';

/** Where an image keeps its compiled migrations (deploy/Dockerfile copies dist/ to /usr/src/app/dist). */
export const IMAGE_MIGRATIONS_DIR = '/usr/src/app/dist/migrations';
/** The migrations of an image are a few KiB each; more than this in all is not read. */
const MAX_MIGRATIONS_BYTES = 4 * 1024 * 1024;
/** Entries by reference and by image id: a few builds each. */
const CACHE_SIZE = 16;


/** Whether a compiled migration marks itself a contract step (`export const step = 'contract'`). */
export function isContractStep(source: string): boolean {
  return /export\s+const\s+step\s*=\s*['"]contract['"]/.test(source);
}

export class BuildFactsReader {
  /** By image id and by the references read: what it declares, or that it ships no migrations directory (an image never changes). */
  private readonly cache = new Map<string, BuildDeclaration | Error>();

  constructor(private readonly docker: Docker) {}

  /**
   * The facts of the local image `reference` names for good (an image id, or `<repository>@<digest>`):
   * read once, then answered without asking the engine; null while the engine does not hold it.
   */
  async of(reference: string): Promise<BuildDeclaration | null> {
    const known = this.cache.get(reference);
    if (known instanceof Error) throw known;
    if (known) return known;
    let image: Docker.ImageInspectInfo;
    try {
      image = await this.docker.getImage(reference).inspect();
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw new Error(`cannot inspect ${reference}: ${engineMessage(err)}`);
    }
    const cached = this.cache.get(image.Id);
    if (cached instanceof Error) throw cached;
    if (cached) return (this.remember([reference], cached), cached);
    let files: { name: string; content: Buffer }[];
    try {
      files = await readDirThroughContainer(this.docker, image.Id, IMAGE_MIGRATIONS_DIR, MAX_MIGRATIONS_BYTES);
    } catch (err) {
      // A failure of the engine is tried again at the next read; a directory the image lacks is not.
      if ((err as { absent?: boolean }).absent) this.remember([reference, image.Id], err as Error);
      throw err;
    }
    const migrations = files
      .map((f) => ({ file: f.name.split('/').pop() ?? '', content: f.content }))
      .filter((f) => /^\d{4}_[a-z0-9_]+\.js$/.test(f.file))
      .map((f) => ({ name: f.file.replace(/\.js$/, ''), contract: isContractStep(f.content.toString('utf8')) }))
      .sort((a, b) => a.name.localeCompare(b.name));
    const facts: BuildDeclaration = { imageId: image.Id, labels: image.Config?.Labels ?? {}, migrations };
    this.remember([reference, image.Id], facts);
    return facts;
  }

  private remember(keys: string[], what: BuildDeclaration | Error): void {
    for (const key of keys) this.cache.set(key, what);
    while (this.cache.size > CACHE_SIZE) this.cache.delete(this.cache.keys().next().value!);
  }
}

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
const CACHE_SIZE = 8;


/** Whether a compiled migration marks itself a contract step (`export const step = 'contract'`). */
export function isContractStep(source: string): boolean {
  return /export\s+const\s+step\s*=\s*['"]contract['"]/.test(source);
}

export class BuildFactsReader {
  /** By image id: what it declares, or that it ships no migrations directory (an image never changes). */
  private readonly cache = new Map<string, BuildDeclaration | Error>();

  constructor(private readonly docker: Docker) {}

  /** The facts of the local image `reference` names; null when the engine does not hold it. */
  async of(reference: string): Promise<BuildDeclaration | null> {
    let image: Docker.ImageInspectInfo;
    try {
      image = await this.docker.getImage(reference).inspect();
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw new Error(`cannot inspect ${reference}: ${engineMessage(err)}`);
    }
    const cached = this.cache.get(image.Id);
    if (cached instanceof Error) throw cached;
    if (cached) return cached;
    let files: { name: string; content: Buffer }[];
    try {
      files = await readDirThroughContainer(this.docker, image.Id, IMAGE_MIGRATIONS_DIR, MAX_MIGRATIONS_BYTES);
    } catch (err) {
      // A failure of the engine is tried again at the next read; a directory the image lacks is not.
      if ((err as { absent?: boolean }).absent) this.remember(image.Id, err as Error);
      throw err;
    }
    const migrations = files
      .map((f) => ({ file: f.name.split('/').pop() ?? '', content: f.content }))
      .filter((f) => /^\d{4}_[a-z0-9_]+\.js$/.test(f.file))
      .map((f) => ({ name: f.file.replace(/\.js$/, ''), contract: isContractStep(f.content.toString('utf8')) }))
      .sort((a, b) => a.name.localeCompare(b.name));
    const facts: BuildDeclaration = { imageId: image.Id, labels: image.Config?.Labels ?? {}, migrations };
    this.remember(image.Id, facts);
    return facts;
  }

  private remember(imageId: string, what: BuildDeclaration | Error): void {
    this.cache.set(imageId, what);
    while (this.cache.size > CACHE_SIZE) this.cache.delete(this.cache.keys().next().value!);
  }
}

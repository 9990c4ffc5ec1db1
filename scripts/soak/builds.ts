// The installer built from this checkout, and newer builds to publish one by one (host engine, local
// registry).
import type { Images } from '../../test/helpers/e2e/self-update-rig.ts';

export class Builds {
  /** The newer builds' tags, oldest first. */
  readonly tags: string[] = [];
  /** How many of them have been published. */
  published = 0;

  constructor(private readonly images: Images) {}

  /** The installer from this checkout as `soak-base` (published), and four builds after it. */
  async start(): Promise<void> {
    await this.images.buildBase('soak-base');
    await this.images.publish('soak-base', 'prod');
    for (let i = 0; i < 4; i++) await this.next();
  }

  /** Builds one more. */
  async next(): Promise<string> {
    const tag = `soak-${this.tags.length + 1}`;
    await this.images.buildVariant('good', 'soak-base', tag);
    this.tags.push(tag);
    return tag;
  }

  /** Publishes the next build not yet published (building one more first when `spare` would not be left); returns its tag and digest. */
  async publishNext(spare: number): Promise<{ tag: string; digest: string }> {
    if (this.published >= this.tags.length - spare) await this.next();
    const tag = this.tags[this.published++]!;
    return { tag, digest: await this.images.publish(tag, 'prod') };
  }
}

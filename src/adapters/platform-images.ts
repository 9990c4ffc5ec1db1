// The platform's images checked against the platform's signing keys before a job runs them
// (docs/adr/0053-signed-builds.md, "The platform's images"): each service's image as compose
// resolves it, its registry digest as the engine holds it, and that digest's cosign signature.
import type Docker from 'dockerode';
import type { SignatureCheck, SignaturePolicy, SignaturePort } from '../contracts/signatures.ts';
import { pickDigest } from './docker-engine.ts';
import type { PlatformFiles } from './platform-files.ts';

/** One service's image and what its signature check found. */
export interface ImageCheck {
  service: string;
  image: string;
  /** The registry digest the engine holds for it; null when it holds none (built here, or not pulled). */
  digest: string | null;
  check: SignatureCheck;
}

export class PlatformImageSignatures {
  constructor(
    private readonly docker: Docker,
    private readonly platform: Pick<PlatformFiles, 'serviceImages'>,
    private readonly signatures: SignaturePort,
  ) {}

  get policy(): SignaturePolicy {
    return this.signatures.policy;
  }

  /**
   * Checks the images of `services` (and what they depend on; every service when none are named)
   * as they are on this engine now. A digest is checked once per call, whichever services share it.
   */
  async check(services: readonly string[]): Promise<ImageCheck[]> {
    if (this.signatures.policy === 'off') return [];
    const images = await this.platform.serviceImages(services);
    const byDigest = new Map<string, Promise<SignatureCheck>>();
    return Promise.all(
      images.map(async ({ service, image, built }): Promise<ImageCheck> => {
        const held = await this.docker.getImage(image).inspect().catch(() => null);
        const digest = held ? pickDigest(held.RepoDigests ?? [], image) : null;
        if (!digest) {
          const why = built ? 'is built on this host' : held ? 'was never pulled from a registry' : 'is not on this host';
          const detail = `the image ${image} ${why}: it has no registry digest, so there is no signature to read`;
          return { service, image, digest, check: { policy: this.policy as 'warn' | 'require', verdict: { result: 'no-signature', detail } } };
        }
        const key = `${image.split('@')[0]}@${digest}`;
        if (!byDigest.has(key)) byDigest.set(key, this.signatures.check(image, digest));
        return { service, image, digest, check: await byDigest.get(key)! };
      }),
    );
  }
}

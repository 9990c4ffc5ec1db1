// What the API needs from outside the database, as interfaces. main.ts wires the adapters in,
// so routes never import dockerode or the file system directly.
export interface VersionInfo {
  /** False when the installer does not run in a container (development): then no image is reported. */
  inContainer: boolean;
  /** The image reference the container was started from, e.g. `registry/installer:prod-latest`. */
  image: string | null;
  /** The tag part of `image`. Tags move; the digest is the exact identity of the build. */
  tag: string | null;
  /** Registry digest (`sha256:…`) of the running image; null when the image was never pushed or pulled. */
  digest: string | null;
  imageId: string | null;
  containerId: string | null;
  note?: string;
}

export interface RuntimePort {
  version(): Promise<VersionInfo>;
}

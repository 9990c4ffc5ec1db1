// Cosign signatures of an image, read from its registry and checked against the operator's public
// keys (docs/adr/0053-signed-builds.md). The format is cosign 2.x key-based signing as stored in the
// registry: the manifest tagged `sha256-<hex>.sig` in the image's repository, one layer per
// signature, each a simple-signing payload blob naming the signed manifest digest, with the
// ECDSA/RSA/Ed25519 signature over that payload in the layer's `dev.cosignproject.cosign/signature`
// annotation. No transparency log is consulted.
//
// The registry is read over HTTP(S) directly (the engine serves no manifest bodies): https, or plain
// http to a loopback registry as the engine itself allows. Anonymous, with the registry's bearer
// token flow when it asks for one. Every answer is bounded in time and size, and every blob is
// checked against the digest its manifest names.
import { createHash, verify } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { SignatureCheck, SignaturePolicy, SignaturePort, SignatureResult, SignatureVerdict } from '../contracts/signatures.ts';
import { parseTrustedKeys, type TrustedKey } from '../signature-keys.ts';

export const SIGNATURE_ANNOTATION = 'dev.cosignproject.cosign/signature';
export const SIMPLE_SIGNING_TYPE = 'application/vnd.dev.cosign.simplesigning.v1+json';
const MANIFEST_TYPES = ['application/vnd.oci.image.manifest.v1+json', 'application/vnd.docker.distribution.manifest.v2+json'];
/** A signature manifest is a few hundred bytes per signature; more is refused. */
const MAX_MANIFEST_BYTES = 1024 * 1024;
/** A simple-signing payload is a few hundred bytes; more is refused. */
const MAX_PAYLOAD_BYTES = 64 * 1024;
/** Signatures read per image: more layers than this are not looked at. */
const MAX_SIGNATURES = 32;
export const SIGNATURE_TIMEOUT_MS = 10_000;

/** An image's registry host and repository, from a reference such as `registry.example.com/installer:stable-latest`. */
export function registryRepository(reference: string): { registry: string; repository: string } {
  const withoutDigest = reference.split('@')[0]!;
  const slash = withoutDigest.indexOf('/');
  const first = slash < 0 ? '' : withoutDigest.slice(0, slash);
  const hasRegistry = first.includes('.') || first.includes(':') || first === 'localhost';
  const registry = hasRegistry ? first : 'registry-1.docker.io';
  let repository = hasRegistry ? withoutDigest.slice(slash + 1) : withoutDigest;
  const colon = repository.lastIndexOf(':');
  if (colon > repository.lastIndexOf('/')) repository = repository.slice(0, colon);
  if (!hasRegistry && !repository.includes('/')) repository = `library/${repository}`;
  return { registry, repository };
}

/** Loopback registries are read over plain http, as the engine reads them; every other over https. */
export function registryBaseUrl(registry: string): string {
  const host = registry.replace(/:\d+$/, '').replace(/^\[|\]$/g, '');
  const loopback = host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
  return `${loopback ? 'http' : 'https'}://${registry}`;
}

class Unreachable extends Error {}

/** Reads a registry over its v2 API: GETs with the bearer token flow, bounded in time and size. */
class RegistryReader {
  private token: string | null = null;

  constructor(
    private readonly base: string,
    private readonly repository: string,
    private readonly signal: AbortSignal,
  ) {}

  /** The body of `path` under /v2/<repository>/, or null on 404; anything else unreachable. */
  async get(path: string, accept: string[], maxBytes: number): Promise<Buffer | null> {
    let res = await this.fetch(path, accept);
    if (res.status === 401 && !this.token) {
      await res.body?.cancel();
      this.token = await this.bearer(res.headers.get('www-authenticate'));
      res = await this.fetch(path, accept);
    }
    if (res.status === 404) {
      await res.body?.cancel();
      return null;
    }
    if (res.status !== 200) {
      await res.body?.cancel();
      throw new Unreachable(`the registry answered ${res.status} for ${this.repository}/${path}`);
    }
    return readBounded(res, maxBytes, `${this.repository}/${path}`);
  }

  private async fetch(path: string, accept: string[]): Promise<Response> {
    try {
      return await fetch(`${this.base}/v2/${this.repository}/${path}`, {
        headers: { accept: accept.join(', '), ...(this.token ? { authorization: `Bearer ${this.token}` } : {}) },
        redirect: 'follow',
        signal: this.signal,
      });
    } catch (err) {
      throw new Unreachable(this.signal.aborted ? `the registry did not answer within ${SIGNATURE_TIMEOUT_MS / 1000} s` : `the registry cannot be reached: ${causeOf(err)}`);
    }
  }

  /** An anonymous pull token from the realm a 401 names (the registry token flow). */
  private async bearer(challenge: string | null): Promise<string> {
    const params = Object.fromEntries([...(challenge ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!.toLowerCase(), m[2]!]));
    if (!/^bearer /i.test(challenge ?? '') || !params.realm) throw new Unreachable('the registry asks for credentials the installer does not have for signatures');
    const url = new URL(params.realm);
    if (params.service) url.searchParams.set('service', params.service);
    url.searchParams.set('scope', params.scope ?? `repository:${this.repository}:pull`);
    let res: Response;
    try {
      res = await fetch(url, { signal: this.signal });
    } catch (err) {
      throw new Unreachable(`the registry's token service cannot be reached: ${causeOf(err)}`);
    }
    if (res.status !== 200) {
      await res.body?.cancel();
      throw new Unreachable(`the registry's token service answered ${res.status}`);
    }
    const body = JSON.parse((await readBounded(res, 64 * 1024, 'the token')).toString('utf8')) as { token?: string; access_token?: string };
    const token = body.token ?? body.access_token;
    if (!token) throw new Unreachable("the registry's token service gave no token");
    return token;
  }
}

const causeOf = (err: unknown): string => {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (err as Error).message;
};

async function readBounded(res: Response, maxBytes: number, what: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res.body ?? []) {
    size += (chunk as Uint8Array).length;
    if (size > maxBytes) throw new Unreachable(`${what} is over ${maxBytes} bytes`);
    chunks.push(Buffer.from(chunk as Uint8Array));
  }
  return Buffer.concat(chunks);
}

interface Layer {
  mediaType?: string;
  digest?: string;
  size?: number;
  annotations?: Record<string, string>;
}

interface Payload {
  critical?: { image?: { 'docker-manifest-digest'?: string }; type?: string };
}

/** Which trusted key, if any, made `signature` over `payload`. */
function signedBy(payload: Buffer, signature: Buffer, keys: readonly TrustedKey[]): TrustedKey | undefined {
  return keys.find((k) => {
    try {
      // ECDSA and RSA keys sign the payload's sha256; Ed25519 signs the payload itself.
      return verify(k.key.asymmetricKeyType === 'ed25519' ? null : 'sha256', payload, k.key, signature);
    } catch {
      return false;
    }
  });
}

export interface VerifyOptions {
  timeoutMs?: number;
  /** Where to read a registry instead of at its own host (SIGNATURE_REGISTRY_ENDPOINTS), by registry host. */
  endpoints?: Readonly<Record<string, string>>;
}

/**
 * Whether `digest` (the image manifest's, `sha256:<hex>`) of `reference`'s repository is signed by
 * one of `keys`. When no signature verifies, the most telling cause among its signatures is named:
 * a payload that is not what its manifest names (changed), then a trusted signature of another
 * digest, then a signature no trusted key made.
 */
export async function verifyImageSignature(reference: string, digest: string, keys: readonly TrustedKey[], opts: VerifyOptions = {}): Promise<SignatureVerdict> {
  if (!/^sha256:[0-9a-f]{64}$/.test(digest)) throw new Error(`not a sha256 digest: ${digest}`);
  if (!keys.length) throw new Error('no trusted key to verify with');
  const { registry, repository } = registryRepository(reference);
  const short = `${digest.slice(0, 19)}…`;
  const reader = new RegistryReader(opts.endpoints?.[registry] ?? registryBaseUrl(registry), repository, AbortSignal.timeout(opts.timeoutMs ?? SIGNATURE_TIMEOUT_MS));
  const tag = `${digest.replace(':', '-')}.sig`;
  try {
    const manifestBody = await reader.get(`manifests/${tag}`, MANIFEST_TYPES, MAX_MANIFEST_BYTES);
    if (!manifestBody) return { result: 'no-signature', detail: `the build ${short} has no signature in ${registry}/${repository} (no ${tag})` };
    let layers: Layer[];
    try {
      layers = ((JSON.parse(manifestBody.toString('utf8')) as { layers?: Layer[] }).layers ?? []).filter((l) => l.mediaType === SIMPLE_SIGNING_TYPE);
    } catch {
      return { result: 'changed-payload', detail: `the signature manifest ${tag} of ${short} is not JSON` };
    }
    if (!layers.length) return { result: 'no-signature', detail: `the signature manifest ${tag} of ${short} holds no cosign signature` };
    const causes: SignatureVerdict[] = [];
    for (const layer of layers.slice(0, MAX_SIGNATURES)) {
      const verdict = await checkLayer(reader, layer, digest, short, keys);
      if (verdict.result === 'verified') return verdict;
      causes.push(verdict);
    }
    const order: SignatureResult[] = ['changed-payload', 'other-digest', 'unknown-key'];
    return causes.sort((a, b) => order.indexOf(a.result) - order.indexOf(b.result))[0]!;
  } catch (err) {
    if (err instanceof Unreachable) return { result: 'unreachable', detail: `the signature of ${short} could not be read: ${err.message}` };
    throw err;
  }
}

async function checkLayer(reader: RegistryReader, layer: Layer, digest: string, short: string, keys: readonly TrustedKey[]): Promise<SignatureVerdict> {
  const signature = layer.annotations?.[SIGNATURE_ANNOTATION];
  if (!layer.digest || !/^sha256:[0-9a-f]{64}$/.test(layer.digest) || !signature) {
    return { result: 'changed-payload', detail: `a signature layer of ${short} names no payload digest or carries no signature` };
  }
  const payload = await reader.get(`blobs/${layer.digest}`, ['*/*'], MAX_PAYLOAD_BYTES);
  if (!payload) return { result: 'changed-payload', detail: `the signed payload ${layer.digest.slice(0, 19)}… of ${short} is missing from the registry` };
  const actual = `sha256:${createHash('sha256').update(payload).digest('hex')}`;
  if (actual !== layer.digest) {
    return { result: 'changed-payload', detail: `the signed payload of ${short} was changed: the registry served ${actual.slice(0, 19)}… for ${layer.digest.slice(0, 19)}…` };
  }
  let named: string | undefined;
  try {
    named = (JSON.parse(payload.toString('utf8')) as Payload).critical?.image?.['docker-manifest-digest'];
  } catch {
    return { result: 'changed-payload', detail: `the signed payload of ${short} is not a cosign simple-signing document` };
  }
  const key = signedBy(payload, Buffer.from(signature, 'base64'), keys);
  if (!key) return { result: 'unknown-key', detail: `the build ${short} is signed, but by no trusted key (${keys.map((k) => k.id).join(', ')})` };
  if (named !== digest) {
    return { result: 'other-digest', detail: `the signature found for ${short} was made by ${key.id} for another build (${named ?? 'none named'})` };
  }
  return { result: 'verified', keyId: key.id, detail: `the build ${short} is signed by ${key.id}` };
}

/**
 * The installer's check of a build (or of a platform image): its policy, and the trusted keys read
 * from their file at each check, so that a replaced file (a rotation) applies to the next check
 * without a restart. `keysSetting` names the file's setting in what an operator reads.
 */
export class ImageSignatures implements SignaturePort {
  constructor(
    readonly policy: SignaturePolicy,
    private readonly keysFile: string | undefined,
    private readonly opts: VerifyOptions & { readFile?: (file: string) => string; keysSetting?: string } = {},
  ) {}

  async check(reference: string, digest: string): Promise<SignatureCheck> {
    if (this.policy === 'off' || !this.keysFile) return { policy: 'off' };
    let keys: TrustedKey[];
    try {
      keys = parseTrustedKeys((this.opts.readFile ?? ((f) => readFileSync(f, 'utf8')))(this.keysFile), path.basename(this.keysFile));
    } catch (err) {
      return { policy: this.policy, verdict: { result: 'unknown-key', detail: `no trusted key can be read: ${this.opts.keysSetting ?? 'SIGNATURE_PUBLIC_KEYS_FILE'}: ${(err as Error).message}` } };
    }
    const { timeoutMs, endpoints } = this.opts;
    return { policy: this.policy, verdict: await verifyImageSignature(reference, digest, keys, { ...(timeoutMs === undefined ? {} : { timeoutMs }), ...(endpoints ? { endpoints } : {}) }) };
  }
}

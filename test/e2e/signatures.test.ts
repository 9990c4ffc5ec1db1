// Cosign signatures read from the rig's real registry and checked against trusted keys
// (src/adapters/signatures.ts). Builds are pushed to a repository of this run's own and signed by
// the real signer (trixie's cosign, installed by scripts/rig/setup.sh) with keys made here, with no
// transparency log. Nothing stubs the registry or the signer: a copied signature is copied through
// the registry's API, and a changed payload is changed in the registry's own storage.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createServer, type Server } from 'node:net';
import { docker, freePort, REGISTRY, uniqueName } from '../helpers/e2e/rig.ts';
import { makeKeyPair, pushBuild, signBuild } from '../helpers/e2e/signing.ts';
import { verifyImageSignature } from '../../src/adapters/signatures.ts';
import { parseTrustedKeys, type TrustedKey } from '../../src/signature-keys.ts';

/** The registry's storage on the rig (scripts/rig/common.sh RIG_STATE). */
const REGISTRY_BLOBS = '/var/lib/installer-rig/registry/docker/registry/v2/blobs/sha256';
const repo = `${REGISTRY}/${uniqueName('sig-t')}/installer`;
const dir = mkdtempSync(path.join(tmpdir(), 'signatures-'));
const keys: Record<'old' | 'new' | 'stranger', { file: string; trusted: TrustedKey[] }> = {} as never;
const builds: Record<string, string> = {};

const push = (tag: string) => pushBuild(dir, repo, tag);
const sign = (digest: string, key: keyof typeof keys) => signBuild(dir, repo, digest, key);

const registryUrl = (p: string) => `http://${REGISTRY}/v2/${repo.slice(REGISTRY.length + 1)}/${p}`;
const sigTag = (digest: string) => `${digest.replace(':', '-')}.sig`;

beforeAll(async () => {
  for (const name of ['old', 'new', 'stranger'] as const) {
    const file = await makeKeyPair(dir, name);
    keys[name] = { file, trusted: parseTrustedKeys(readFileSync(file, 'utf8'), `${name}.pub`) };
  }
  for (const tag of ['good', 'unsigned', 'stranger', 'source', 'target', 'tampered', 'rotated']) builds[tag] = await push(tag);
  await sign(builds.good!, 'old');
  await sign(builds.stranger!, 'stranger');
  await sign(builds.source!, 'old');
  await sign(builds.tampered!, 'old');
  await sign(builds.rotated!, 'new');
}, 600_000);

afterAll(async () => {
  for (const tag of Object.keys(builds)) await docker(['rmi', '-f', `${repo}:${tag}`]).catch(() => {});
  rmSync(dir, { recursive: true, force: true });
});

describe('cosign signatures, verified against the registry', () => {
  it('a build signed by a trusted key is verified, and the key that verified it is named', async () => {
    const v = await verifyImageSignature(`${repo}:good`, builds.good!, keys.old.trusted);
    expect(v).toMatchObject({ result: 'verified', keyId: keys.old.trusted[0]!.id });
    expect(v.detail).toContain('is signed by old.pub');
  });

  it('an unsigned build: no signature', async () => {
    const v = await verifyImageSignature(repo, builds.unsigned!, keys.old.trusted);
    expect(v.result).toBe('no-signature');
    expect(v.detail).toContain(`no ${sigTag(builds.unsigned!)}`);
  });

  it('a build signed by another key: unknown key', async () => {
    const v = await verifyImageSignature(repo, builds.stranger!, keys.old.trusted);
    expect(v.result).toBe('unknown-key');
    expect(v.detail).toMatch(/signed, but by no trusted key \(old\.pub/);
  });

  it("a trusted signature copied onto another build's tag: a signature for another digest", async () => {
    // The source's signature manifest, put in the registry as the target's (its blobs are in the same repository).
    const manifest = await fetch(registryUrl(`manifests/${sigTag(builds.source!)}`), { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } });
    expect(manifest.status).toBe(200);
    const put = await fetch(registryUrl(`manifests/${sigTag(builds.target!)}`), {
      method: 'PUT',
      headers: { 'content-type': 'application/vnd.oci.image.manifest.v1+json' },
      body: Buffer.from(await manifest.arrayBuffer()),
    });
    expect(put.status).toBe(201);
    const v = await verifyImageSignature(repo, builds.target!, keys.old.trusted);
    expect(v.result).toBe('other-digest');
    expect(v.detail).toContain(`for another build (${builds.source})`);
    // The source itself stays verified.
    expect((await verifyImageSignature(repo, builds.source!, keys.old.trusted)).result).toBe('verified');
  });

  it('a payload changed in the registry after signing: changed payload', async () => {
    const manifest = (await (await fetch(registryUrl(`manifests/${sigTag(builds.tampered!)}`), { headers: { accept: 'application/vnd.oci.image.manifest.v1+json' } })).json()) as { layers: { digest: string }[] };
    const blob = manifest.layers[0]!.digest.slice('sha256:'.length);
    const file = path.join(REGISTRY_BLOBS, blob.slice(0, 2), blob, 'data');
    const payload = readFileSync(file, 'utf8');
    expect(payload).toContain(builds.tampered!);
    // Same length, another build named: as an attacker with the registry's storage would change it.
    writeFileSync(file, payload.replace(builds.tampered!, builds.good!));
    const v = await verifyImageSignature(repo, builds.tampered!, keys.old.trusted);
    expect(v.result).toBe('changed-payload');
    expect(v.detail).toContain('was changed');
  });

  it('a key rotation: both keys trusted verify both builds; with the old key dropped, its builds are no longer trusted', async () => {
    const both = [...keys.old.trusted, ...keys.new.trusted];
    expect(await verifyImageSignature(repo, builds.good!, both)).toMatchObject({ result: 'verified', keyId: keys.old.trusted[0]!.id });
    expect(await verifyImageSignature(repo, builds.rotated!, both)).toMatchObject({ result: 'verified', keyId: keys.new.trusted[0]!.id });
    expect((await verifyImageSignature(repo, builds.good!, keys.new.trusted)).result).toBe('unknown-key');
    // One file holding both keys, as an operator rotating would give it.
    const pair = parseTrustedKeys(readFileSync(keys.old.file, 'utf8') + readFileSync(keys.new.file, 'utf8'), 'keys.pem');
    expect(pair.map((k) => k.id)).toEqual([expect.stringMatching(/^keys\.pem#1 /), expect.stringMatching(/^keys\.pem#2 /)]);
    expect((await verifyImageSignature(repo, builds.rotated!, pair)).keyId).toBe(pair[1]!.id);
  });

  it('a registry that does not answer: unreachable, within the bound', async () => {
    // A port that takes connections and never answers.
    const silent: Server = createServer(() => {});
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    try {
      const port = (silent.address() as { port: number }).port;
      const started = Date.now();
      const v = await verifyImageSignature(`127.0.0.1:${port}/x/installer:1`, builds.good!, keys.old.trusted, { timeoutMs: 1_000 });
      expect(v.result).toBe('unreachable');
      expect(v.detail).toContain('did not answer within');
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      silent.close();
    }
    // A port nothing listens on.
    const closed = await verifyImageSignature(`127.0.0.1:${await freePort()}/x/installer:1`, builds.good!, keys.old.trusted);
    expect(closed).toMatchObject({ result: 'unreachable' });
    expect(closed.detail).toContain('ECONNREFUSED');
  });

  it('refuses a key file that holds a private key, or no key', () => {
    expect(() => parseTrustedKeys(readFileSync(path.join(dir, 'old.key'), 'utf8'), 'old.key')).toThrow(/private key|no PEM public key/);
    expect(() => parseTrustedKeys('not a key', 'x.pub')).toThrow('x.pub holds no PEM public key');
  });
});

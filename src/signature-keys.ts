// The public keys an operator trusts for signed builds (docs/adr/0053-signed-builds.md), parsed from
// PEM: the settings check the key file with this at boot, and the verifier reads it with this at
// each check.
import { createHash, createPublicKey, type KeyObject } from 'node:crypto';

/** A public key the operator trusts, with the id it is named by (its file name, or its fingerprint). */
export interface TrustedKey {
  id: string;
  key: KeyObject;
}

/** The first 16 hex digits of the sha256 of the key's SubjectPublicKeyInfo: how an unnamed key is named. */
export function keyFingerprint(key: KeyObject): string {
  return createHash('sha256').update(key.export({ type: 'spki', format: 'der' })).digest('hex').slice(0, 16);
}

/**
 * The public keys in a PEM text (one file may hold several, for a rotation). Refuses a text with
 * no key, a private key, or a block that does not parse, naming `source`.
 */
export function parseTrustedKeys(pem: string, source: string): TrustedKey[] {
  if (/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(pem)) throw new Error(`${source} holds a private key: give the public key (cosign.pub) only`);
  const blocks = pem.match(/-----BEGIN PUBLIC KEY-----[\s\S]+?-----END PUBLIC KEY-----/g) ?? [];
  if (!blocks.length) throw new Error(`${source} holds no PEM public key (-----BEGIN PUBLIC KEY-----)`);
  return blocks.map((block, i) => {
    let key: KeyObject;
    try {
      key = createPublicKey(block);
    } catch (err) {
      throw new Error(`${source}: public key ${i + 1} does not parse: ${(err as Error).message}`);
    }
    return { id: `${source}${blocks.length > 1 ? `#${i + 1}` : ''} (${keyFingerprint(key)})`, key };
  });
}

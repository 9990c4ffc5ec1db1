// The certificate of the HTTPS listener: the operator's (TLS_CERT_FILE, TLS_KEY_FILE), or one
// generated once into the secrets directory and reused, so that its fingerprint stays what the
// operator compared (docs/adr/0020-https-listeners.md).
import { createHash, createPrivateKey, X509Certificate } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ConfigError, type Settings } from '../config.ts';

/** The generated certificate's files, in the secrets directory (key mode 0600). */
export const GENERATED_CERT_FILE = 'tls/cert.pem';
export const GENERATED_KEY_FILE = 'tls/key.pem';

/** Validity of a generated certificate: the longest that every mainstream client accepts. */
const GENERATED_VALID_DAYS = 825;
/** A generated certificate this close to its end is replaced at boot (with a new fingerprint). */
const RENEW_BEFORE_DAYS = 30;
const DAY_MS = 24 * 3600 * 1000;

export interface TlsMaterial {
  /** PEM: the leaf certificate, then any chain the operator gave. */
  cert: string;
  key: string;
  source: 'operator' | 'generated';
  /** SHA-256 of the leaf certificate (DER), upper-case hex pairs joined by `:`, as browsers show it. */
  fingerprint256: string;
  /** Base64 SHA-256 of the leaf's SubjectPublicKeyInfo: what HPKP-style pins (curl --pinnedpubkey, Chromium) take. */
  spkiSha256: string;
  subject: string;
  /** End of validity, ISO 8601 UTC. */
  notAfter: string;
  /** Where the certificate was read from. */
  certFile: string;
  /** Set when the generated certificate was made (or remade) at this boot. */
  generated?: boolean;
  /** Set when the operator's certificate is past its end of validity. */
  expired?: boolean;
  /**
   * With the operator's certificate: the generated one, which the HTTPS listener presents to a
   * client that asks for the installer's name on the `platform` network (TLS SNI), so that the
   * control plane's fingerprint does not change at each renewal of the operator's (ADR 0020).
   */
  platform?: Pick<TlsMaterial, 'cert' | 'key' | 'fingerprint256' | 'certFile'> & { generated?: boolean };
}

/** The certificate the control plane is shown, and whose fingerprint goes into the platform's .env. */
export function platformCertificate(tls: TlsMaterial): Pick<TlsMaterial, 'cert' | 'key' | 'fingerprint256'> {
  return tls.platform ?? tls;
}

export interface TlsOptions {
  now?: () => Date;
}

/** The leaf's identity as clients see it. */
export function describeCertificate(certPem: string): Pick<TlsMaterial, 'fingerprint256' | 'spkiSha256' | 'subject' | 'notAfter'> {
  const leaf = new X509Certificate(certPem);
  const spki = leaf.publicKey.export({ type: 'spki', format: 'der' });
  return {
    fingerprint256: leaf.fingerprint256,
    spkiSha256: createHash('sha256').update(spki).digest('base64'),
    subject: leaf.subject.replace(/\n/g, ', '),
    notAfter: new Date(leaf.validTo).toISOString(),
  };
}

function readOrFail(variable: string, file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(variable, `cannot read the file (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

/** The operator's certificate and key, checked to be PEM and to belong together; throws ConfigError naming the file's variable. */
export function loadOperatorCertificate(certFile: string, keyFile: string): TlsMaterial {
  const cert = readOrFail('TLS_CERT_FILE', certFile);
  const key = readOrFail('TLS_KEY_FILE', keyFile);
  let leaf: X509Certificate;
  try {
    if (!cert.includes('-----BEGIN CERTIFICATE-----')) throw new Error('no PEM block');
    leaf = new X509Certificate(cert);
  } catch {
    throw new ConfigError('TLS_CERT_FILE', 'is not a PEM certificate (-----BEGIN CERTIFICATE-----)');
  }
  let privateKey;
  try {
    privateKey = createPrivateKey(key);
  } catch {
    throw new ConfigError('TLS_KEY_FILE', 'is not a PEM private key without a passphrase');
  }
  if (!leaf.checkPrivateKey(privateKey)) {
    throw new ConfigError('TLS_KEY_FILE', 'does not belong to the certificate in TLS_CERT_FILE (its first certificate)');
  }
  return { cert, key, source: 'operator', certFile: path.resolve(certFile), ...describeCertificate(cert) };
}

function usableGenerated(certFile: string, keyFile: string, now: Date): { cert: string; key: string } | null {
  if (!existsSync(certFile) || !existsSync(keyFile)) return null;
  try {
    const cert = readFileSync(certFile, 'utf8');
    const key = readFileSync(keyFile, 'utf8');
    const leaf = new X509Certificate(cert);
    if (!leaf.checkPrivateKey(createPrivateKey(key))) return null;
    if (new Date(leaf.validTo).getTime() - now.getTime() < RENEW_BEFORE_DAYS * DAY_MS) return null;
    return { cert, key };
  } catch {
    return null;
  }
}

function writePrivate(file: string, content: string): void {
  // Written beside, then renamed: a crash never leaves half a key that a later boot would read.
  const tmp = `${file}.tmp`;
  writeFileSync(tmp, content, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
}

/** The generated certificate of `<SECRETS_DIR>/tls/`: read when present and valid for 30 more days, else made now. */
export async function generatedCertificate(secretsDir: string, opts: TlsOptions = {}): Promise<TlsMaterial> {
  const now = (opts.now ?? (() => new Date()))();
  const certFile = path.join(secretsDir, GENERATED_CERT_FILE);
  const keyFile = path.join(secretsDir, GENERATED_KEY_FILE);
  const existing = usableGenerated(certFile, keyFile, now);
  if (existing) return { ...existing, source: 'generated', certFile, ...describeCertificate(existing.cert) };

  mkdirSync(path.dirname(certFile), { recursive: true, mode: 0o700 });
  // Loaded only here, once per install: its X.509 and ASN.1 libraries cost every start a third of a second.
  const { generate } = await import('selfsigned');
  const made = await generate([{ name: 'commonName', value: 'installer' }, { name: 'organizationName', value: 'installer (self-signed)' }], {
    keyType: 'rsa',
    keySize: 2048,
    algorithm: 'sha256',
    notBeforeDate: new Date(now.getTime() - 60_000),
    notAfterDate: new Date(now.getTime() + GENERATED_VALID_DAYS * DAY_MS),
    extensions: [
      { name: 'basicConstraints', cA: false, critical: true },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      {
        name: 'subjectAltName',
        altNames: [
          { type: 2, value: 'localhost' },
          { type: 2, value: 'installer-backend' },
          { type: 7, ip: '127.0.0.1' },
          { type: 7, ip: '::1' },
        ],
      },
    ],
  });
  // The key first: a certificate file without its key is never left behind as "usable".
  writePrivate(keyFile, made.private);
  writePrivate(certFile, made.cert);
  return { cert: made.cert, key: made.private, source: 'generated', certFile, generated: true, ...describeCertificate(made.cert) };
}

/** The HTTPS listener's certificate for these settings; null when HTTPS_PORT is unset. Throws ConfigError for a bad operator file. */
export async function loadTls(settings: Pick<Settings, 'HTTPS_PORT' | 'TLS_CERT_FILE' | 'TLS_KEY_FILE' | 'SECRETS_DIR'>, opts: TlsOptions = {}): Promise<TlsMaterial | null> {
  if (settings.HTTPS_PORT === undefined) return null;
  if (settings.TLS_CERT_FILE && settings.TLS_KEY_FILE) {
    const operator = loadOperatorCertificate(settings.TLS_CERT_FILE, settings.TLS_KEY_FILE);
    const now = (opts.now ?? (() => new Date()))();
    const own = await generatedCertificate(settings.SECRETS_DIR, opts);
    const platform = { cert: own.cert, key: own.key, fingerprint256: own.fingerprint256, certFile: own.certFile, ...(own.generated ? { generated: true } : {}) };
    return { ...operator, ...(Date.parse(operator.notAfter) < now.getTime() ? { expired: true } : {}), platform };
  }
  return generatedCertificate(settings.SECRETS_DIR, opts);
}

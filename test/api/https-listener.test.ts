// The real server process with HTTPS_PORT: a generated certificate made once and logged, the
// operator's certificate with HSTS, plain HTTP refused or redirected on the HTTPS port, plain HTTP
// kept on PORT, and a bad certificate file stopping the process with one line.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { generate } from 'selfsigned';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry, type Running } from '../helpers/shared/process.ts';
import { defaultHttps, pinnedHttps, plainHttp } from '../helpers/shared/https.ts';
import { createUser } from '../../src/state/users.ts';

const SECRETS = {
  JWT_SECRET: 'JWTSECRETVALUE-6c2d1f90-5e3b-4d2f-8b8c-4a7e9f3d2b01',
  ENCRYPTION_KEY: 'ENCKEYVALUE-8d3e2a01-6f4c-4e3a-9c9d-5b8f0a4e3c12',
  SERVICE_TOKEN: 'SVCTOKENVALUE-9e4f3b12-7a5d-4f4b-8d0e-6c9a1b5f4d23',
};

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await createUser(db.database.db, { username: 'ops', password: 'ops-password-1', role: 'operator' });
});
afterAll(async () => db?.drop());

async function httpsUrl(proc: Running): Promise<string> {
  await proc.url;
  const m = /"httpsAddress":"(https:\/\/[^"]+)"/.exec(proc.output());
  if (!m) throw new Error(`no HTTPS address in the output:\n${proc.output()}`);
  return m[1]!;
}

/** The JSON log lines of a process that carry a `tls` object. */
function tlsLines(out: string): { level: number; msg: string; tls: Record<string, string> }[] {
  return out.split('\n').filter((l) => l.startsWith('{') && l.includes('"tls"')).map((l) => JSON.parse(l));
}

async function signIn(base: string, ca: string): Promise<string> {
  const login = await pinnedHttps(`${base}/api/auth/login`, ca, { method: 'POST', json: { username: 'ops', password: 'ops-password-1' } });
  expect(login.status, login.body).toBe(200);
  return (JSON.parse(login.body) as { token: string }).token;
}

describe('HTTPS with a generated certificate', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'installer-https-'));
  const env = () => ({ DATABASE_URL: db.url, DATA_DIR: dataDir, HOST: '127.0.0.1', PORT: '0', HTTPS_PORT: '0', ...SECRETS });

  it('generates it once into the secrets directory, logs its fingerprint and signs in over it with the certificate pinned', async () => {
    const proc = runEntry('src/main.ts', env());
    let fingerprint: string;
    try {
      const base = await httpsUrl(proc);
      const http = await proc.url;
      const certFile = path.join(dataDir, 'secrets/tls/cert.pem');
      const keyFile = path.join(dataDir, 'secrets/tls/key.pem');
      expect(statSync(keyFile).mode & 0o777).toBe(0o600);
      const cert = readFileSync(certFile, 'utf8');
      fingerprint = new X509Certificate(cert).fingerprint256;

      // The boot log names the fingerprint of the file, once, as a new certificate.
      const logged = tlsLines(proc.output());
      expect(logged).toHaveLength(1);
      expect(logged[0]!.tls).toMatchObject({ source: 'generated', fingerprint256: fingerprint, certFile });
      expect(logged[0]!.msg).toContain('generated a self-signed HTTPS certificate');
      expect(proc.output()).not.toContain(readFileSync(keyFile, 'utf8').split('\n')[1]!);

      // A client that trusts only this certificate signs in; the certificate it was shown is that one.
      const token = await signIn(base, cert);
      const me = await pinnedHttps(`${base}/api/auth/me`, cert, { headers: { authorization: `Bearer ${token}` } });
      expect(me.status).toBe(200);
      expect(JSON.parse(me.body)).toMatchObject({ username: 'ops', role: 'operator' });
      expect(me.peerFingerprint256).toBe(fingerprint);
      // No HSTS for a certificate no browser trusts: it would forbid clicking through the warning.
      expect(me.headers['strict-transport-security']).toBeUndefined();
      const tls = await pinnedHttps(`${base}/api/tls`, cert);
      expect(JSON.parse(tls.body)).toMatchObject({ https: true, certificate: { source: 'generated', fingerprint256: fingerprint, hsts: false } });

      // A client with the ordinary trust store refuses it: the connection really is TLS with this certificate.
      await expect(defaultHttps(`${base}/api/health`)).rejects.toThrow(/self[- ]signed/i);

      // Plain HTTP on PORT still answers (loopback, healthcheck, the platform network).
      const health = await plainHttp(`${http}/api/health`);
      expect(health.status).toBe(200);
      expect(JSON.parse(health.body)).toEqual({ status: 'ok', db: 'up' });
    } finally {
      expect(await proc.stop()).toBe(0);
    }

    // A restart serves the same certificate: the operator compared its fingerprint once.
    const again = runEntry('src/main.ts', env());
    try {
      const base = await httpsUrl(again);
      const health = await pinnedHttps(`${base}/api/health`, readFileSync(path.join(dataDir, 'secrets/tls/cert.pem'), 'utf8'));
      expect(health.peerFingerprint256).toBe(fingerprint);
      const logged = tlsLines(again.output());
      expect(logged.map((l) => [l.msg, l.tls.fingerprint256])).toEqual([['HTTPS certificate', fingerprint]]);
    } finally {
      expect(await again.stop()).toBe(0);
    }
  });

  it('answers plain HTTP on the HTTPS port without routing it: a page load is redirected, an API call refused', async () => {
    const proc = runEntry('src/main.ts', env());
    try {
      const base = await httpsUrl(proc);
      const plainBase = base.replace('https://', 'http://');
      const page = await plainHttp(`${plainBase}/jobs/42?x=1`);
      expect(page.status).toBe(301);
      expect(page.headers.location).toBe(`${base}/jobs/42?x=1`);
      const login = await plainHttp(`${plainBase}/api/auth/login`, { method: 'POST', json: { username: 'ops', password: 'ops-password-1' } });
      expect(login.status).toBe(400);
      expect(JSON.parse(login.body)).toEqual({ statusCode: 400, error: 'Bad Request', code: 'https_required', message: `this port speaks HTTPS, not plain HTTP: use ${base}` });
      const read = await plainHttp(`${plainBase}/api/health`);
      expect(read.status).toBe(400);
      // The refused sign-in never reached the app: no sign-in line was written for it.
      expect(proc.output()).not.toContain('signed in');
      // And the port still speaks TLS afterwards.
      const cert = readFileSync(path.join(dataDir, 'secrets/tls/cert.pem'), 'utf8');
      expect((await pinnedHttps(`${base}/api/health`, cert)).status).toBe(200);
    } finally {
      expect(await proc.stop()).toBe(0);
    }
  });
});

describe('HTTPS with the operator\'s certificate', () => {
  let certFile: string;
  let keyFile: string;
  let cert: string;
  let fingerprint: string;
  const dir = mkdtempSync(path.join(tmpdir(), 'installer-operator-tls-'));

  beforeAll(async () => {
    const made = await generate([{ name: 'commonName', value: 'installer.example.test' }], {
      keySize: 2048,
      algorithm: 'sha256',
      extensions: [{ name: 'subjectAltName', altNames: [{ type: 2, value: 'installer.example.test' }, { type: 7, ip: '127.0.0.1' }] }],
    });
    cert = made.cert;
    fingerprint = new X509Certificate(cert).fingerprint256;
    certFile = path.join(dir, 'fullchain.pem');
    keyFile = path.join(dir, 'privkey.pem');
    writeFileSync(certFile, cert);
    writeFileSync(keyFile, made.private, { mode: 0o600 });
  });

  it('serves it with Strict-Transport-Security on HTTPS only; the generated one only to the control plane\'s name', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'installer-https-'));
    const proc = runEntry('src/main.ts', { DATABASE_URL: db.url, DATA_DIR: dataDir, HOST: '127.0.0.1', PORT: '0', HTTPS_PORT: '0', TLS_CERT_FILE: certFile, TLS_KEY_FILE: keyFile, ...SECRETS });
    try {
      const base = await httpsUrl(proc);
      const token = await signIn(base, cert);
      const me = await pinnedHttps(`${base}/api/auth/me`, cert, { headers: { authorization: `Bearer ${token}` } });
      expect(me.status).toBe(200);
      expect(me.peerFingerprint256).toBe(fingerprint);
      expect(me.headers['strict-transport-security']).toBe('max-age=31536000');
      expect(JSON.parse((await pinnedHttps(`${base}/api/tls`, cert)).body)).toMatchObject({ https: true, certificate: { source: 'operator', fingerprint256: fingerprint, hsts: true } });
      // HSTS over plain HTTP means nothing to a browser and is never sent there.
      const plain = await plainHttp(`${await proc.url}/api/health`);
      expect(plain.status).toBe(200);
      expect(plain.headers['strict-transport-security']).toBeUndefined();
      expect(tlsLines(proc.output()).map((l) => [l.msg, l.tls.source, l.tls.fingerprint256])).toEqual([['HTTPS certificate', 'operator', fingerprint]]);
      // The control plane's certificate (docs/adr/0020-https-listeners.md): generated beside the
      // operator's, logged, and shown only to a client asking for installer-backend.
      const own = new X509Certificate(readFileSync(path.join(dataDir, 'secrets/tls/cert.pem'))).fingerprint256;
      expect(own).not.toBe(fingerprint);
      expect((tlsLines(proc.output())[0]!.tls as unknown as { platform: { fingerprint256: string } }).platform.fingerprint256).toBe(own);
    } finally {
      expect(await proc.stop()).toBe(0);
    }
  });

  it('stops with one line naming the variable when a file is missing, not PEM, or the key is not the certificate\'s', async () => {
    const other = await generate([{ name: 'commonName', value: 'other' }], { keySize: 2048, algorithm: 'sha256' });
    const otherKey = path.join(dir, 'other-key.pem');
    writeFileSync(otherKey, other.private);
    const notPem = path.join(dir, 'not-pem.txt');
    writeFileSync(notPem, 'hello\n');
    const cases: [Record<string, string>, string][] = [
      [{ TLS_CERT_FILE: certFile, TLS_KEY_FILE: otherKey }, 'TLS_KEY_FILE: does not belong to the certificate in TLS_CERT_FILE (its first certificate)'],
      [{ TLS_CERT_FILE: path.join(dir, 'missing.pem'), TLS_KEY_FILE: keyFile }, 'TLS_CERT_FILE: cannot read the file (ENOENT)'],
      [{ TLS_CERT_FILE: notPem, TLS_KEY_FILE: keyFile }, 'TLS_CERT_FILE: is not a PEM certificate (-----BEGIN CERTIFICATE-----)'],
      [{ TLS_CERT_FILE: certFile, TLS_KEY_FILE: notPem }, 'TLS_KEY_FILE: is not a PEM private key without a passphrase'],
      [{ TLS_CERT_FILE: certFile }, 'TLS_KEY_FILE: must be set too: TLS_CERT_FILE (the certificate) and TLS_KEY_FILE (its private key) go together'],
    ];
    for (const [tlsEnv, line] of cases) {
      const proc = runEntry('src/main.ts', { DATABASE_URL: db.url, DATA_DIR: mkdtempSync(path.join(tmpdir(), 'installer-https-')), HOST: '127.0.0.1', PORT: '0', HTTPS_PORT: '0', ...SECRETS, ...tlsEnv });
      expect(await proc.exited).toBe(78);
      expect(proc.output().trim().split('\n')).toEqual([`installer: configuration error: ${line}`]);
    }
  });
});

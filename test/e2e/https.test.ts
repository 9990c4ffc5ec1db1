// The production compose file on the real engine: the published port speaks HTTPS with a
// certificate generated into the secrets volume (or the operator's), so does installer-backend:8443
// in the platform network, and plain HTTP stays on the host's loopback and the container's own.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes, X509Certificate, createHash } from 'node:crypto';
import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { generate } from 'selfsigned';
import { buildInstallerImage, docker, REGISTRY } from '../helpers/e2e/rig.ts';
import { startStack, type Stack } from '../helpers/e2e/stack.ts';
import { defaultHttps, pinnedHttps, plainHttp } from '../helpers/shared/https.ts';
import { ensureUiBuilt, launchChromium, newPage, shoot } from '../helpers/e2e/ui.ts';
import { chosenPassword } from '../helpers/e2e/first-admin.ts';

const tag = `prod-https-${randomBytes(3).toString('hex')}`;
const ref = `${REGISTRY}/installer:${tag}`;
let stack: Stack | undefined;
let cert: string;
let fingerprint: string;
let adminPassword: string;

/** Base64 SHA-256 of the certificate's public key: the pin Chromium takes. */
const spkiPin = (pem: string) => createHash('sha256').update(new X509Certificate(pem).publicKey.export({ type: 'spki', format: 'der' })).digest('base64');

/** The backend's log lines that carry a `tls` object. */
async function certificateLines(): Promise<{ msg: string; tls: Record<string, string> }[]> {
  const out = await docker(['logs', 'installer-backend']);
  return out.split('\n').filter((l) => l.startsWith('{') && l.includes('"tls"')).map((l) => JSON.parse(l));
}

beforeAll(async () => {
  ensureUiBuilt();
  await buildInstallerImage([ref]);
  stack = await startStack({ version: tag, channel: 'prod' });
  cert = await docker(['exec', 'installer-backend', 'cat', '/var/lib/installer/secrets/tls/cert.pem']);
  fingerprint = new X509Certificate(cert).fingerprint256;
  adminPassword = await stack.adminPassword();
});
afterAll(async () => stack?.down());

describe('HTTPS on the published port (production compose file, real engine)', () => {
  it('uses a certificate generated into the secrets volume, logs its fingerprint, and a pinning client signs in over it', async () => {
    const logged = await certificateLines();
    expect(logged).toHaveLength(1);
    expect(logged[0]!.tls).toMatchObject({ source: 'generated', fingerprint256: fingerprint, certFile: '/var/lib/installer/secrets/tls/cert.pem' });

    const login = await pinnedHttps(`${stack!.httpsUrl}/api/auth/login`, cert, { method: 'POST', json: { username: 'admin', password: adminPassword } });
    expect(login.status, login.body).toBe(200);
    expect(login.peerFingerprint256).toBe(fingerprint);
    const first = JSON.parse(login.body) as { token: string; user: { mustChangePassword: boolean } };
    // The generated admin chooses its password at the first sign-in: over HTTPS too.
    expect(first.user.mustChangePassword).toBe(true);
    const changed = await pinnedHttps(`${stack!.httpsUrl}/api/auth/password`, cert, {
      method: 'PUT',
      headers: { authorization: `Bearer ${first.token}` },
      json: { currentPassword: adminPassword, newPassword: chosenPassword(adminPassword) },
    });
    expect(changed.status, changed.body).toBe(200);
    const token = (JSON.parse(changed.body) as { token: string }).token;
    const me = await pinnedHttps(`${stack!.httpsUrl}/api/auth/me`, cert, { headers: { authorization: `Bearer ${token}` } });
    expect(me.status).toBe(200);
    expect(JSON.parse(me.body)).toMatchObject({ username: 'admin', role: 'admin' });
    expect(me.headers['strict-transport-security']).toBeUndefined();
    expect(JSON.parse((await pinnedHttps(`${stack!.httpsUrl}/api/tls`, cert)).body)).toMatchObject({ https: true, certificate: { source: 'generated', fingerprint256: fingerprint, hsts: false } });
    // An ordinary client refuses the self-signed certificate: the port is TLS, not HTTP.
    await expect(defaultHttps(`${stack!.httpsUrl}/api/health`)).rejects.toThrow(/self[- ]signed/i);
  });

  it('answers plain HTTP on that port with a redirect for a page and a refusal for the API', async () => {
    const plainBase = stack!.httpsUrl.replace('https://', 'http://');
    const page = await plainHttp(`${plainBase}/login`);
    expect(page.status).toBe(301);
    expect(page.headers.location).toBe(`${stack!.httpsUrl}/login`);
    const login = await plainHttp(`${plainBase}/api/auth/login`, { method: 'POST', json: { username: 'admin', password: 'not-the-password' } });
    expect(login.status).toBe(400);
    expect(JSON.parse(login.body)).toMatchObject({ code: 'https_required', message: `this port speaks HTTPS, not plain HTTP: use ${stack!.httpsUrl}` });
  });

  it('keeps plain HTTP on the host loopback and for the healthcheck, refuses it on the platform network, where HTTPS answers', async () => {
    const backend = JSON.parse(await docker(['inspect', 'installer-backend']))[0];
    expect(backend.State.Health.Status).toBe('healthy');
    const bindings = backend.HostConfig.PortBindings as Record<string, { HostIp: string; HostPort: string }[]>;
    expect(bindings['8080/tcp']!.map((b) => b.HostIp)).toEqual(['127.0.0.1']);
    expect(bindings['8443/tcp']!.map((b) => b.HostPort)).toEqual([new URL(stack!.httpsUrl).port]);
    const health = await plainHttp(`${stack!.baseUrl}/api/health`);
    expect(JSON.parse(health.body)).toEqual({ status: 'ok', db: 'up' });

    // A container on the platform network: plain HTTP is refused, HTTPS answers with the certificate.
    const script = [
      "const https = require('node:https');",
      "fetch('http://installer-backend:8080/api/health').then((r) => console.log('plain', r.status), (e) => console.log('plain', e.cause?.code));",
      "https.get('https://installer-backend:8443/api/health', { ca: process.env.CA }, (r) => { let b = ''; r.on('data', (c) => (b += c)); r.on('end', () => console.log('https', r.statusCode, b)); }).on('error', (e) => console.log('https', e.code));",
    ].join(' ');
    const out = await docker(['run', '--rm', '--network', 'platform', '--no-healthcheck', '-e', `CA=${cert}`, '--entrypoint', 'node', ref, '-e', script]);
    expect(out.trim().split('\n').sort()).toEqual(['https 200 {"status":"ok","db":"up"}', 'plain ECONNREFUSED']);
  });

  it('lets headless Chromium pinning the certificate sign in over HTTPS, showing the fingerprint on the sign-in page', async () => {
    const unpinned = await launchChromium();
    try {
      const { page } = await newPage(unpinned);
      await expect(page.goto(`${stack!.httpsUrl}/login`)).rejects.toThrow(/ERR_CERT_AUTHORITY_INVALID/);
    } finally {
      await unpinned.close();
    }

    const browser = await launchChromium([`--ignore-certificate-errors-spki-list=${spkiPin(cert)}`]);
    try {
      const { page } = await newPage(browser);
      await page.goto(`${stack!.httpsUrl}/login`);
      expect(new URL(page.url()).protocol).toBe('https:');
      expect(await page.getByTestId('tls-fingerprint').textContent()).toBe(fingerprint);
      await shoot(page, 'sign-in-https', { doc: true });
      await page.getByLabel('User name').fill('admin');
      await page.getByLabel('Password').fill(chosenPassword(adminPassword));
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByTestId('user').waitFor();
      expect(await page.getByTestId('user').textContent()).toContain('admin');
      // What the browser was shown is the generated certificate.
      const shown = await page.evaluate(async () => (await fetch('/api/tls')).json());
      expect(shown).toMatchObject({ certificate: { fingerprint256: fingerprint } });
    } finally {
      await browser.close();
    }
  });

  it('serves the operator\'s certificate from TLS_CERT_FILE and TLS_KEY_FILE, with HSTS', async () => {
    const dir = path.join(stack!.workDir, 'tls');
    mkdirSync(dir, { recursive: true });
    const made = await generate([{ name: 'commonName', value: 'installer.example.test' }], {
      keySize: 2048,
      algorithm: 'sha256',
      extensions: [{ name: 'subjectAltName', altNames: [{ type: 2, value: 'installer.example.test' }, { type: 7, ip: '127.0.0.1' }] }],
    });
    writeFileSync(path.join(dir, 'fullchain.pem'), made.cert);
    writeFileSync(path.join(dir, 'privkey.pem'), made.private, { mode: 0o600 });
    const operatorFingerprint = new X509Certificate(made.cert).fingerprint256;
    appendFileSync(path.join(stack!.workDir, '.env'), `TLS_CERT_FILE=${dir}/fullchain.pem\nTLS_KEY_FILE=${dir}/privkey.pem\n`);
    await stack!.compose(['up', '-d', '--wait', '--wait-timeout', '120', 'backend']);

    const health = await pinnedHttps(`${stack!.httpsUrl}/api/health`, made.cert);
    expect(health.status).toBe(200);
    expect(health.peerFingerprint256).toBe(operatorFingerprint);
    expect(health.headers['strict-transport-security']).toBe('max-age=31536000');
    expect(JSON.parse((await pinnedHttps(`${stack!.httpsUrl}/api/tls`, made.cert)).body)).toMatchObject({ certificate: { source: 'operator', fingerprint256: operatorFingerprint, hsts: true } });
    expect((await certificateLines()).map((l) => [l.tls.source, l.tls.fingerprint256])).toEqual([['operator', operatorFingerprint]]);
    // The generated certificate is no longer what the port presents.
    await expect(pinnedHttps(`${stack!.httpsUrl}/api/health`, cert)).rejects.toThrow();
    const plain = await plainHttp(`${stack!.baseUrl}/api/health`);
    expect(plain.headers['strict-transport-security']).toBeUndefined();
    // On `platform`, the control plane asking for installer-backend is still shown the generated
    // certificate, whose fingerprint its .env holds: the operator's renewals do not change it.
    const script = "const s = require('node:tls').connect({ host: 'installer-backend', port: 8443, servername: 'installer-backend', rejectUnauthorized: false }, () => { console.log(s.getPeerX509Certificate().fingerprint256); s.destroy(); });";
    const shown = await docker(['run', '--rm', '--network', 'platform', '--no-healthcheck', '--entrypoint', 'node', ref, '-e', script]);
    expect(shown.trim()).toBe(fingerprint);
  });
});

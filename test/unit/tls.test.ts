// The HTTPS settings and the generated certificate's life: made once, reused, remade near its end.
import { describe, expect, it } from 'vitest';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ConfigError, loadSettings } from '../../src/config.ts';
import { generatedCertificate, loadTls } from '../../src/adapters/tls.ts';
import { answerPlainHttp, hstsHeader } from '../../src/listeners.ts';
import type http from 'node:http';

const settings = (env: Record<string, string>) => loadSettings(env, { readFile: () => '' });
const problem = (env: Record<string, string>) => {
  try {
    settings(env);
    return null;
  } catch (err) {
    return err instanceof ConfigError ? err.message : String(err);
  }
};

describe('HTTPS settings', () => {
  it('leave HTTPS off unless HTTPS_PORT is set, and check what goes together', () => {
    expect(settings({}).HTTPS_PORT).toBeUndefined();
    expect(settings({ HTTPS_PORT: '8443' })).toMatchObject({ HTTPS_PORT: 8443, HSTS_MAX_AGE_SECONDS: 31536000 });
    expect(problem({ HTTPS_PORT: '8080' })).toBe('HTTPS_PORT: must differ from PORT: plain HTTP and HTTPS listen on separate ports');
    expect(problem({ HTTPS_PORT: 'https' })).toMatch(/^HTTPS_PORT: /);
    expect(problem({ HTTPS_PORT: '8443', TLS_KEY_FILE: '/k.pem' })).toBe('TLS_CERT_FILE: must be set too: TLS_CERT_FILE (the certificate) and TLS_KEY_FILE (its private key) go together');
    expect(problem({ TLS_CERT_FILE: '/c.pem', TLS_KEY_FILE: '/k.pem' })).toBe('HTTPS_PORT: must be set when TLS_CERT_FILE is: the certificate is served on the HTTPS listener');
    expect(problem({ HTTPS_PORT: '8443', HSTS_MAX_AGE_SECONDS: '-1' })).toBe('HSTS_MAX_AGE_SECONDS: must be at least 0');
  });

  it('send HSTS only with the operator\'s certificate and a max-age above 0', () => {
    expect(hstsHeader({ source: 'operator' }, 31536000)).toBe('max-age=31536000');
    expect(hstsHeader({ source: 'operator' }, 0)).toBeNull();
    expect(hstsHeader({ source: 'generated' }, 31536000)).toBeNull();
  });
});

describe('the generated certificate', () => {
  it('is made once, reused while valid for 30 more days, and remade after that', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'installer-tls-'));
    const at = (iso: string) => ({ now: () => new Date(iso) });
    const first = await generatedCertificate(dir, at('2030-01-01T00:00:00Z'));
    expect(first.generated).toBe(true);
    expect(first.fingerprint256).toBe(new X509Certificate(readFileSync(path.join(dir, 'tls/cert.pem'))).fingerprint256);
    expect(first.notAfter).toBe(new Date(Date.parse('2030-01-01T00:00:00Z') + 825 * 86400_000).toISOString().replace(/\.\d{3}Z$/, '.000Z'));
    const leaf = new X509Certificate(first.cert);
    expect(leaf.subjectAltName).toBe('DNS:localhost, DNS:installer-backend, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1');
    expect(leaf.ca).toBe(false);

    const later = await generatedCertificate(dir, at('2031-06-01T00:00:00Z'));
    expect(later.generated).toBeUndefined();
    expect(later.fingerprint256).toBe(first.fingerprint256);

    const nearEnd = await generatedCertificate(dir, at('2032-03-20T00:00:00Z'));
    expect(nearEnd.generated).toBe(true);
    expect(nearEnd.fingerprint256).not.toBe(first.fingerprint256);
  });

  it('is not made without HTTPS_PORT', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'installer-tls-'));
    expect(await loadTls({ SECRETS_DIR: dir })).toBeNull();
  });
});

describe('plain HTTP on the HTTPS port', () => {
  const answer = (method: string, url: string, host?: string) => {
    const out: { status?: number; headers?: Record<string, string>; body?: string } = {};
    const res = {
      setHeader: () => {},
      writeHead: (status: number, headers: Record<string, string>) => Object.assign(out, { status, headers }),
      end: (body?: string) => Object.assign(out, { body }),
    } as unknown as http.ServerResponse;
    answerPlainHttp({ method, url, headers: host === undefined ? {} : { host } } as http.IncomingMessage, res);
    return out;
  };

  it('redirects page loads to the same host and port, refuses the rest and any odd Host header', () => {
    expect(answer('GET', '/audit', 'installer.example.com:8080')).toMatchObject({ status: 301, headers: { location: 'https://installer.example.com:8080/audit' } });
    expect(answer('GET', '/', '[::1]:8080')).toMatchObject({ status: 301, headers: { location: 'https://[::1]:8080/' } });
    expect(answer('POST', '/login', 'h:1')).toMatchObject({ status: 400 });
    expect(answer('GET', '/api', 'h:1')).toMatchObject({ status: 400 });
    for (const host of [undefined, 'evil.example/path', 'a b', '']) {
      const r = answer('GET', '/', host);
      expect(r.status).toBe(400);
      expect(JSON.parse(r.body!)).toMatchObject({ code: 'https_required', message: 'this port speaks HTTPS, not plain HTTP: use https://' });
    }
  });
});

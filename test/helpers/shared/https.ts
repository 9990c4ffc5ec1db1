// A Node HTTPS client that trusts exactly one certificate (the installer's) and reports the one it
// was shown, and a plain HTTP client that never follows redirects: for the HTTPS listener's tests.
import http from 'node:http';
import https from 'node:https';
import type { TLSSocket } from 'node:tls';

export interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  /** SHA-256 fingerprint of the certificate the server presented (HTTPS only). */
  peerFingerprint256?: string;
}

export interface RequestOptions {
  method?: string;
  headers?: Record<string, string>;
  json?: unknown;
}

function send(mod: typeof http | typeof https, url: string, opts: RequestOptions, tls: https.RequestOptions = {}): Promise<Answer> {
  const body = opts.json === undefined ? undefined : JSON.stringify(opts.json);
  const headers = { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...opts.headers };
  return new Promise((resolve, reject) => {
    const req = mod.request(url, { method: opts.method ?? 'GET', headers, agent: false, timeout: 15_000, ...tls }, (res) => {
      const socket = res.socket as TLSSocket;
      const peer = typeof socket.getPeerCertificate === 'function' ? socket.getPeerCertificate().fingerprint256 : undefined;
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8'), ...(peer ? { peerFingerprint256: peer } : {}) }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer from ${url}`)));
    req.on('error', reject);
    req.end(body);
  });
}

/** HTTPS trusting only `caPem`: the default trust store is not consulted, so a self-signed certificate is accepted only when it is this one. */
export function pinnedHttps(url: string, caPem: string, opts: RequestOptions = {}): Promise<Answer> {
  return send(https, url, opts, { ca: caPem });
}

/** HTTPS with Node's default trust store: refuses a self-signed certificate. */
export function defaultHttps(url: string, opts: RequestOptions = {}): Promise<Answer> {
  return send(https, url, opts);
}

/** Plain HTTP; a redirect is returned as it is, not followed. */
export function plainHttp(url: string, opts: RequestOptions = {}): Promise<Answer> {
  return send(http, url, opts);
}

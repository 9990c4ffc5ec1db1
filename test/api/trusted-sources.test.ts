// Where the installer takes files it runs as root from (docs/adr/0041-trusted-sources-and-staging.md),
// against real servers this test starts: an HTTPS server on loopback (its certificate trusted as an
// operator's private CA would be), a second one as "another origin", a plain HTTP server on
// loopback (the rig's case) and one on a non-loopback address of this machine. The published
// compose file (fetchComposeFile, the self-update engine's preflight fetch) and the platform's
// templates (a deploy's installTemplates, validated by the real `docker compose config`).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import https from 'node:https';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { ownIPv4 } from '../helpers/shared/own-address.ts';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { generate } from 'selfsigned';
import Docker from 'dockerode';
import { DockerSelfUpdateEngine } from '../../src/adapters/self-update.ts';
import { fetchComposeFile } from '../../src/adapters/compose-source.ts';
import { PlatformFiles } from '../../src/adapters/platform-files.ts';
import { fetchTrusted } from '../../src/adapters/trusted-fetch.ts';
import { ConfigError, loadSettings } from '../../src/config.ts';
import { printableUrl } from '../../src/contracts/trusted-source.ts';
import { redactedSettings } from '../../src/api/routes/observability.ts';

const COMPOSE = 'name: installer\nservices:\n  backend:\n    image: x\n';
const TEMPLATE_COMPOSE = 'services:\n  web:\n    image: busybox\n    environment:\n      GREETING: ${GREETING}\n';
const TEMPLATE_ENV = 'GREETING=hello\n';
const sha = (t: string) => createHash('sha256').update(t).digest('hex');
const SECRET_PASSWORD = 's3cret-pa55';
const SECRET_QUERY = 'X-Signature=TOPSECRETSIG';

interface Seen {
  url: string;
  authorization: string | undefined;
}
const seen: Record<'a' | 'b' | 'plain' | 'outside', Seen[]> = { a: [], b: [], plain: [], outside: [] };
let ca: string;
let a: https.Server;
let b: https.Server;
let plain: http.Server;
let outside: http.Server;
let A: string;
let B: string;
let PLAIN: string;
let OUTSIDE: string;

const listen = (s: http.Server | https.Server, host: string) =>
  new Promise<number>((resolve, reject) => {
    s.once('error', reject);
    s.listen(0, host, () => resolve((s.address() as AddressInfo).port));
  });

function routes(name: keyof typeof seen) {
  return (req: http.IncomingMessage, res: http.ServerResponse) => {
    seen[name].push({ url: req.url ?? '', authorization: req.headers.authorization });
    const url = new URL(req.url ?? '/', 'http://x');
    const go = (status: number, location: string) => res.writeHead(status, { location }).end();
    switch (url.pathname) {
      case '/docker-compose.yml':
      case '/published/docker-compose.yml':
        return res.end(COMPOSE);
      case '/templates/docker-compose.yml':
        return res.end(TEMPLATE_COMPOSE);
      case '/templates/.env.template':
        return res.end(TEMPLATE_ENV);
      case '/moved':
        return go(302, '/published/docker-compose.yml');
      case '/moved-twice':
        return go(301, '/moved');
      case '/templates-moved/docker-compose.yml':
        return go(307, '/templates/docker-compose.yml');
      case '/templates-moved/.env.template':
        return go(308, '/templates/.env.template');
      case '/templates-cross/docker-compose.yml':
        return go(302, `${B}/templates/docker-compose.yml`);
      case '/templates-down/docker-compose.yml':
        return go(302, `${PLAIN}/templates/docker-compose.yml`);
      case '/to-other-origin':
        return go(302, `${B}/docker-compose.yml`);
      case '/to-http':
        return go(302, `${PLAIN}/docker-compose.yml`);
      case '/to-http-same-host':
        // The same host and port, over http: still https -> http.
        return go(302, `http://127.0.0.1:${new URL(A).port}/docker-compose.yml`);
      case '/loop':
        return go(302, '/loop');
      case '/big':
        return res.end(`services:\n${'#'.repeat(1024 * 1024 + 10)}\n`);
      default:
        return res.writeHead(404).end('no such file');
    }
  };
}

/** An IPv4 address of this machine that is not loopback: plain http to it must be refused. */
const outsideAddress = () => ownIPv4('the "plain http to another host" cases need one');

beforeAll(async () => {
  const made = await generate([{ name: 'commonName', value: 'sources.test' }], {
    keySize: 2048,
    algorithm: 'sha256',
    extensions: [{ name: 'subjectAltName', altNames: [{ type: 2, value: 'localhost' }, { type: 7, ip: '127.0.0.1' }] }],
  });
  ca = made.cert;
  a = https.createServer({ cert: made.cert, key: made.private }, routes('a'));
  b = https.createServer({ cert: made.cert, key: made.private }, routes('b'));
  plain = http.createServer(routes('plain'));
  outside = http.createServer(routes('outside'));
  A = `https://127.0.0.1:${await listen(a, '127.0.0.1')}`;
  B = `https://127.0.0.1:${await listen(b, '127.0.0.1')}`;
  PLAIN = `http://127.0.0.1:${await listen(plain, '127.0.0.1')}`;
  const host = outsideAddress();
  OUTSIDE = `http://${host}:${await listen(outside, host)}`;
});

afterAll(async () => {
  for (const s of [a, b, plain, outside]) {
    s?.closeAllConnections();
    await new Promise((r) => (s ? s.close(r) : r(null)));
  }
});

const reset = () => {
  for (const k of Object.keys(seen) as (keyof typeof seen)[]) seen[k].length = 0;
};

describe('the published compose file', () => {
  it('comes over https, and over plain http from loopback (the rig)', async () => {
    expect(await fetchComposeFile(`${A}/published/docker-compose.yml`, { ca })).toBe(COMPOSE);
    expect(await fetchComposeFile(`${PLAIN}/published/docker-compose.yml`)).toBe(COMPOSE);
  });

  it('is refused over plain http to any other host, before a request is made', async () => {
    reset();
    const url = `${OUTSIDE}/docker-compose.yml`;
    await expect(fetchComposeFile(url)).rejects.toThrow(`the published compose file: ${url} must be an https:// URL (plain http:// only to a loopback host`);
    expect(seen.outside).toEqual([]);
  });

  it('refuses a redirect to another origin, and does not follow it', async () => {
    reset();
    await expect(fetchComposeFile(`${A}/to-other-origin`, { ca })).rejects.toThrow(`a redirect to another origin is refused (to ${B}/docker-compose.yml)`);
    expect(seen.b).toEqual([]);
  });

  it('refuses a redirect from https to http, even to the same host and port', async () => {
    reset();
    await expect(fetchComposeFile(`${A}/to-http`, { ca })).rejects.toThrow('a redirect from https to http is refused');
    await expect(fetchComposeFile(`${A}/to-http-same-host`, { ca })).rejects.toThrow('a redirect from https to http is refused');
    expect(seen.plain).toEqual([]);
    expect(seen.a.map((s) => s.url)).toEqual(['/to-http', '/to-http-same-host']);
  });

  it('follows redirects within the same origin, up to five', async () => {
    reset();
    expect(await fetchComposeFile(`${A}/moved-twice`, { ca })).toBe(COMPOSE);
    expect(seen.a.map((s) => s.url)).toEqual(['/moved-twice', '/moved', '/published/docker-compose.yml']);
    await expect(fetchComposeFile(`${A}/loop`, { ca })).rejects.toThrow('more than 5 redirects');
  });

  it('trusts only certificates it can verify: a self-signed server without its CA is refused', async () => {
    await expect(fetchComposeFile(`${A}/published/docker-compose.yml`)).rejects.toThrow(/self-signed certificate|unable to verify/);
  });

  it('honours a sha256 pin: a match is fetched, a mismatch names the expected and the actual digest', async () => {
    expect(await fetchComposeFile(`${A}/published/docker-compose.yml`, { ca, sha256: sha(COMPOSE) })).toBe(COMPOSE);
    const wrong = sha('something else');
    await expect(fetchComposeFile(`${A}/published/docker-compose.yml`, { ca, sha256: wrong })).rejects.toThrow(
      `the published compose file from ${A}/published/docker-compose.yml does not match its sha256 pin: expected ${wrong}, got ${sha(COMPOSE)}`,
    );
  });

  it("fails the self-update's preflight fetch on a pin mismatch (PUBLISHED_COMPOSE_URL with PUBLISHED_COMPOSE_SHA256)", async () => {
    const wrong = sha('vetted file');
    const engine = new DockerSelfUpdateEngine(new Docker({ socketPath: '/nonexistent.sock' }), {
      repository: 'registry.test/installer', project: 'installer', workDir: '/opt/installer', composeFile: 'docker-compose.yml', stagingRoot: '/var/lib/installer/staging',
      rollbackTag: 'rollback', dockerSocket: '/nonexistent.sock', publishedComposeUrl: `${A}/published/docker-compose.yml`, publishedComposeSha256: wrong, sourcesCa: ca,
    }, {} as never);
    await expect(engine.publishedComposeOf('prod', 'sha256:img')).rejects.toThrow(`expected ${wrong}, got ${sha(COMPOSE)}`);
    await expect(engine.publishedComposeFile('prod', 'sha256:new')).rejects.toThrow(`expected ${wrong}, got ${sha(COMPOSE)}`);
  });

  it('refuses an answer larger than 1 MB', async () => {
    await expect(fetchComposeFile(`${A}/big`, { ca })).rejects.toThrow('larger than');
  });

  it('sends the credentials of the URL and its query string, and prints neither', async () => {
    reset();
    const url = `https://reader:${SECRET_PASSWORD}@127.0.0.1:${new URL(A).port}/missing.yml?${SECRET_QUERY}`;
    const err = (await fetchComposeFile(url, { ca }).catch((e: Error) => e)) as Error;
    expect(err.message).toBe(`fetching the published compose file from ${A}/missing.yml failed: HTTP 404`);
    expect(seen.a).toEqual([{ url: `/missing.yml?${SECRET_QUERY}`, authorization: `Basic ${Buffer.from(`reader:${SECRET_PASSWORD}`).toString('base64')}` }]);
    // A refusal and a pin mismatch print the same way.
    for (const e of [
      await fetchComposeFile(`http://reader:${SECRET_PASSWORD}@${new URL(OUTSIDE).host}/x.yml?${SECRET_QUERY}`).catch((x: Error) => x),
      await fetchComposeFile(`https://reader:${SECRET_PASSWORD}@127.0.0.1:${new URL(A).port}/docker-compose.yml?${SECRET_QUERY}`, { ca, sha256: sha('x') }).catch((x: Error) => x),
      await fetchComposeFile(`https://reader:${SECRET_PASSWORD}@127.0.0.1:${new URL(A).port}/to-http?${SECRET_QUERY}`, { ca }).catch((x: Error) => x),
    ]) {
      expect(e).toBeInstanceOf(Error);
      expect((e as Error).message).not.toContain(SECRET_PASSWORD);
      expect((e as Error).message).not.toContain('TOPSECRETSIG');
      expect((e as Error).message).not.toContain('reader');
    }
    expect(printableUrl(`https://reader:${SECRET_PASSWORD}@objects.example.com/a/b.yml?${SECRET_QUERY}#frag`)).toBe('https://objects.example.com/a/b.yml');
  });
});

describe("a deploy's templates", () => {
  const platform = () => new PlatformFiles(mkdtempSync(path.join(tmpdir(), 'sources-platform-')), 'sources-test');

  it('come over https with their pins matched, through same-origin redirects; each file logged without credentials or query string', async () => {
    const p = new PlatformFiles(mkdtempSync(path.join(tmpdir(), 'sources-platform-')), 'sources-test', undefined, {
      ca, pins: { 'docker-compose.yml': sha(TEMPLATE_COMPOSE), '.env.template': sha(TEMPLATE_ENV) },
    });
    reset();
    const lines: string[] = [];
    await p.installTemplates(`https://reader:${SECRET_PASSWORD}@127.0.0.1:${new URL(A).port}/templates-moved?${SECRET_QUERY}`, null, (l) => lines.push(l));
    expect(readFileSync(p.composeFile, 'utf8')).toBe(TEMPLATE_COMPOSE);
    expect(readFileSync(p.envFile, 'utf8')).toBe(TEMPLATE_ENV);
    expect(lines).toContain(`downloading ${A}/templates-moved/docker-compose.yml`);
    expect(lines).toContain('docker-compose.yml matches its sha256 pin');
    expect(lines.join('\n')).not.toMatch(/s3cret|TOPSECRET|reader/);
    // The folder's credentials and query string went with each file, and with the redirects within the origin.
    expect(seen.a.map((s) => s.url)).toEqual([
      `/templates-moved/docker-compose.yml?${SECRET_QUERY}`, '/templates/docker-compose.yml', `/templates-moved/.env.template?${SECRET_QUERY}`, '/templates/.env.template',
    ]);
    expect(new Set(seen.a.map((s) => s.authorization))).toEqual(new Set([`Basic ${Buffer.from(`reader:${SECRET_PASSWORD}`).toString('base64')}`]));
  });

  it('fail the deploy on a pin mismatch, naming the file and both digests, and install nothing', async () => {
    const wrong = sha('vetted template');
    const dir = mkdtempSync(path.join(tmpdir(), 'sources-platform-'));
    const p = new PlatformFiles(dir, 'sources-test', undefined, { ca, pins: { 'docker-compose.yml': wrong, '.env.template': sha(TEMPLATE_ENV) } });
    await expect(p.installTemplates(`${A}/templates/`, null, () => {})).rejects.toThrow(
      `the template docker-compose.yml from ${A}/templates/docker-compose.yml does not match its sha256 pin: expected ${wrong}, got ${sha(TEMPLATE_COMPOSE)}`,
    );
    expect(await p.hasComposeFile()).toBe(false);
  });

  it('are refused over plain http to another host, through a redirect to another origin or from https to http', async () => {
    reset();
    await expect(platform().installTemplates(`${OUTSIDE}/templates/`, null, () => {})).rejects.toThrow('must be an https:// URL');
    expect(seen.outside).toEqual([]);
    const p = new PlatformFiles(mkdtempSync(path.join(tmpdir(), 'sources-platform-')), 'sources-test', undefined, { ca });
    await expect(p.installTemplates(`${A}/templates-cross/`, null, () => {})).rejects.toThrow(
      `fetching the template docker-compose.yml from ${A}/templates-cross/docker-compose.yml: a redirect to another origin is refused (to ${B}/templates/docker-compose.yml)`,
    );
    await expect(p.installTemplates(`${A}/templates-down`, null, () => {})).rejects.toThrow('a redirect from https to http is refused');
    await expect(fetchTrusted(`${A}/to-other-origin`, { what: 'a file', maxBytes: 1024, ca })).rejects.toThrow('a redirect to another origin is refused');
    expect(await p.hasComposeFile()).toBe(false);
    expect(seen.b).toEqual([]);
    expect(seen.plain).toEqual([]);
  });

  it('come over plain http from loopback (the rig)', async () => {
    const p = platform();
    await p.installTemplates(`${PLAIN}/templates`, null, () => {});
    expect(readFileSync(p.composeFile, 'utf8')).toBe(TEMPLATE_COMPOSE);
  });
});

describe('the settings at boot', () => {
  const fail = (env: Record<string, string>) => {
    try {
      loadSettings(env, { readFile: () => '' });
    } catch (err) {
      if (err instanceof ConfigError) return err;
      throw err;
    }
    throw new Error('expected a ConfigError');
  };

  it('refuse a plain http:// source that is not loopback, in one line naming the variable and never the URL', () => {
    for (const variable of ['PUBLISHED_COMPOSE_URL', 'PLATFORM_TEMPLATES_URL']) {
      const err = fail({ [variable]: `http://reader:${SECRET_PASSWORD}@objects.example.com/x/?${SECRET_QUERY}` });
      expect(err.variable).toBe(variable);
      expect(err.message).toMatch(new RegExp(`^${variable}: must be an https:// URL \\(plain http:// only to a loopback host: 127\\.0\\.0\\.0/8, ::1 or localhost\\)`));
      expect(err.message).not.toContain('\n');
      expect(err.message).not.toMatch(/s3cret|TOPSECRET|objects\.example/);
    }
    expect(fail({ PLATFORM_TEMPLATES_URL: 'ftp://objects.example.com/x/' }).variable).toBe('PLATFORM_TEMPLATES_URL');
  });

  it('accept https anywhere, http to 127.0.0.0/8, ::1 and localhost, file:// for the published file and a directory for templates', () => {
    for (const url of ['https://objects.example.com/c.yml', 'http://127.0.0.1:8000/c.yml', 'http://127.3.2.1/c.yml', 'http://[::1]:81/c.yml', 'http://localhost/c.yml', 'file:///srv/c.yml']) {
      expect(loadSettings({ PUBLISHED_COMPOSE_URL: url }, { readFile: () => '' }).PUBLISHED_COMPOSE_URL).toBe(url);
    }
    expect(loadSettings({ PLATFORM_TEMPLATES_URL: '/srv/templates' }, { readFile: () => '' }).PLATFORM_TEMPLATES_URL).toBe('/srv/templates');
    expect(fail({ PUBLISHED_COMPOSE_URL: 'http://127.example.com/c.yml' }).variable).toBe('PUBLISHED_COMPOSE_URL');
  });

  it('read the pins, and refuse a malformed one naming the rule', () => {
    const s = loadSettings(
      { PUBLISHED_COMPOSE_SHA256: `sha256:${sha(COMPOSE).toUpperCase()}`, PLATFORM_TEMPLATES_SHA256: `docker-compose.yml=${sha(TEMPLATE_COMPOSE)}, .env.template=${sha(TEMPLATE_ENV)}` },
      { readFile: () => '' },
    );
    expect(s.PUBLISHED_COMPOSE_SHA256).toBe(sha(COMPOSE));
    expect(s.PLATFORM_TEMPLATES_SHA256).toEqual({ 'docker-compose.yml': sha(TEMPLATE_COMPOSE), '.env.template': sha(TEMPLATE_ENV) });
    expect(fail({ PUBLISHED_COMPOSE_SHA256: 'abc' }).message).toBe('PUBLISHED_COMPOSE_SHA256: must be a sha256 digest: 64 hex digits, optionally after sha256:');
    expect(fail({ PLATFORM_TEMPLATES_SHA256: `docker-compose.yml=${sha('x')}` }).message).toContain('.env.template is not pinned');
  });

  it('print the sources in diagnostics without credentials or query string', () => {
    const s = loadSettings(
      { PUBLISHED_COMPOSE_URL: `https://reader:${SECRET_PASSWORD}@objects.example.com/c.yml?${SECRET_QUERY}`, PLATFORM_TEMPLATES_URL: `https://objects.example.com/t/?${SECRET_QUERY}` },
      { readFile: () => '' },
    );
    const out = redactedSettings(s);
    expect(out.PUBLISHED_COMPOSE_URL).toBe('https://objects.example.com/c.yml');
    expect(out.PLATFORM_TEMPLATES_URL).toBe('https://objects.example.com/t/');
    expect(JSON.stringify(out)).not.toMatch(/s3cret|TOPSECRET/);
  });
});

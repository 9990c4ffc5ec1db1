// The pure parts of the self-update adapter: the published compose file over http(s) and file://,
// the engine's tar archive and multiplexed logs, the helper's summary lines, the helper's shape.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import path from 'node:path';
import Docker from 'dockerode';
import { DockerSelfUpdateEngine } from '../../src/adapters/self-update.ts';
import { ENGINE_REQUEST_TIMEOUT_MS, demultiplex, HELPER_INIT_TIMEOUT_SECONDS, helperSpec, parseHelperLog, stagedComposePath } from '../../src/adapters/self-update-helper.ts';
import { composeFileOfChannel, fetchComposeFile, firstFileOfTar, imageComposePath } from '../../src/adapters/compose-source.ts';
import { Readable } from 'node:stream';

const COMPOSE = 'name: installer\nservices:\n  backend:\n    image: x\n';
let server: Server;
let base: string;
const dir = mkdtempSync(path.join(tmpdir(), 'su-adapter-'));

beforeAll(async () => {
  server = createServer((req, res) => {
    if (req.url === '/docker-compose.yml') res.end(COMPOSE);
    else if (req.url === '/html') res.end('<html>login</html>');
    else res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(() => server?.close());

describe('the published compose file', () => {
  it('comes from an http(s) URL', async () => {
    expect(await fetchComposeFile(`${base}/docker-compose.yml`)).toBe(COMPOSE);
  });
  it('or from a file:// URL', async () => {
    const f = path.join(dir, 'published.yml');
    writeFileSync(f, COMPOSE);
    expect(await fetchComposeFile(pathToFileURL(f).href)).toBe(COMPOSE);
  });
  it('fails with the reason: HTTP status, missing file, not a compose file, unknown scheme', async () => {
    await expect(fetchComposeFile(`${base}/nope`)).rejects.toThrow(/HTTP 404/);
    await expect(fetchComposeFile(pathToFileURL(path.join(dir, 'missing.yml')).href)).rejects.toThrow(/ENOENT/);
    await expect(fetchComposeFile(`${base}/html`)).rejects.toThrow(/not a compose file/);
    await expect(fetchComposeFile('ftp://example.com/x.yml')).rejects.toThrow(/https:\/\/ or file:\/\//);
  });
});

describe('engine formats', () => {
  it('reads the one file of the archive the engine returns', async () => {
    const f = path.join(dir, 'docker-compose.dev.yml');
    writeFileSync(f, COMPOSE);
    const tar = spawnSync('tar', ['-C', dir, '-cf', '-', 'docker-compose.dev.yml']).stdout;
    expect((await firstFileOfTar(tar)).toString()).toBe(COMPOSE);
    // With a pax header first, as the engine may write for long names.
    const pax = spawnSync('tar', ['--format=pax', '-C', dir, '-cf', '-', 'docker-compose.dev.yml']).stdout;
    expect((await firstFileOfTar(pax)).toString()).toBe(COMPOSE);
    await expect(firstFileOfTar(Buffer.alloc(1024))).rejects.toThrow(/no regular file/);
    // A directory entry before the file, and the archive as a stream, as getArchive hands it over.
    const nested = path.join(dir, 'deploy');
    mkdirSync(nested, { recursive: true });
    writeFileSync(path.join(nested, 'docker-compose.yml'), COMPOSE);
    const withDir = spawnSync('tar', ['-C', dir, '-cf', '-', 'deploy']).stdout;
    expect((await firstFileOfTar(Readable.from([withDir.subarray(0, 700), withDir.subarray(700)]))).toString()).toBe(COMPOSE);
  });

  it('names the compose file a build ships for its channel', () => {
    expect(imageComposePath('prod')).toBe('/usr/src/app/deploy/docker-compose.yml');
    expect(imageComposePath('dev')).toBe('/usr/src/app/deploy/docker-compose.dev.yml');
    expect(composeFileOfChannel('beta')).toBe('docker-compose.beta.yml');
  });

  it('demultiplexes the engine log frames', () => {
    const frame = (stream: number, text: string) => {
      const body = Buffer.from(text);
      const h = Buffer.alloc(8);
      h[0] = stream;
      h.writeUInt32BE(body.length, 4);
      return Buffer.concat([h, body]);
    };
    expect(demultiplex(Buffer.concat([frame(1, 'self-update: a\n'), frame(2, 'err\n'), frame(1, 'self-update: status ok: x\n')]))).toBe('self-update: a\nerr\nself-update: status ok: x\n');
    expect(demultiplex(Buffer.from('plain text\n'))).toBe('plain text\n');
  });

  it("parses the helper's summary lines", () => {
    expect(parseHelperLog(readFileSync(new URL('../../scripts/self-update.sh', import.meta.url), 'utf8'))).toMatchObject({ status: null });
    expect(parseHelperLog('self-update: switch failed: exit 1: x is unhealthy\nself-update: status rolled-back: backend runs rollback again\n')).toEqual({
      status: 'rolled-back', switchFailure: 'exit 1: x is unhealthy', rollbackFailure: null,
    });
  });
});

describe('the helper container', () => {
  it('has the shape of the spec with the default staging root', () => {
    const spec = helperSpec(
      { repository: 'registry.example.com/installer', project: 'installer', workDir: '/opt/installer', composeFile: 'docker-compose.yml', stagingRoot: '/var/tmp/installer', rollbackTag: 'rollback', dockerSocket: '/var/run/docker.sock' },
      { tag: 'prod-latest', digest: 'sha256:abc' },
      'r-1',
    );
    expect(stagedComposePath('/var/tmp/installer')).toBe('/var/tmp/installer/self-update/docker-compose.yml');
    expect(spec).toEqual({
      name: 'installer-self-updater',
      image: 'registry.example.com/installer:prod-latest',
      cmd: ['sh', '/usr/src/app/scripts/self-update.sh', 'installer', '/opt/installer', 'docker-compose.yml', '/var/tmp/installer/self-update/docker-compose.yml', 'rollback', 'prod-latest', 'backend'],
      binds: ['/var/run/docker.sock:/var/run/docker.sock', '/opt/installer:/opt/installer', '/var/tmp/installer:/var/tmp/installer'],
      // The init's wait is always bounded, and the backend's deadline counts it (ADR 0045).
      env: [`SELF_UPDATE_INIT_TIMEOUT=${HELPER_INIT_TIMEOUT_SECONDS}`],
      labels: { 'io.installer.self-update.request': 'r-1', 'io.installer.self-update.target': 'sha256:abc' },
    });
  });
});

describe("the helper's wait against an engine that takes requests and never answers", () => {
  it('fails the attempt after ENGINE_REQUEST_TIMEOUT_MS instead of holding the boot reconciliation', async () => {
    const sock = path.join(dir, 'silent-engine.sock');
    const seen: string[] = [];
    // Answers the inspect (an exited helper) and never answers the logs request.
    const engine = createServer((req, res) => {
      seen.push(`${req.method} ${req.url?.split('?')[0]}`);
      if (req.url?.includes('/json')) res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ State: { Running: false, ExitCode: 0 } }));
    });
    await new Promise<void>((r) => engine.listen(sock, r));
    try {
      const su = new DockerSelfUpdateEngine(new Docker({ socketPath: sock }), {} as never, {} as never);
      const started = Date.now();
      await expect(su.waitHelper('cid', { deadline: null, signal: new AbortController().signal })).rejects.toThrow(/abort/i);
      const took = Date.now() - started;
      expect(took).toBeGreaterThanOrEqual(ENGINE_REQUEST_TIMEOUT_MS - 100);
      expect(took).toBeLessThan(ENGINE_REQUEST_TIMEOUT_MS + 5_000);
      expect(seen.map((s) => s.replace(/^GET \/v[\d.]+/, 'GET '))).toEqual(['GET /containers/cid/json', 'GET /containers/cid/logs']);
    } finally {
      engine.closeAllConnections();
      await new Promise((r) => engine.close(r));
    }
  }, 30_000);
});

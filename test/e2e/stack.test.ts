// The installer image, built here, running as its own compose stack on the real engine: the dev
// compose file as the other stack tests run it, then the production stack deployed by the steps
// of docs/deploy.md, with a platform whose control plane calls the installer over TLS with the token
// and certificate fingerprint the installer handed it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes, X509Certificate } from 'node:crypto';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { buildInstallerImage, docker, REGISTRY, run } from '../helpers/e2e/rig.ts';
import { deployAsDocumented, startStack, type DocumentedStack, type Stack } from '../helpers/e2e/stack.ts';
import { firstAdminToken } from '../helpers/e2e/first-admin.ts';
import { ROOT } from '../helpers/shared/process.ts';
import { parseSse } from '../helpers/shared/sse.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { parseEnv } from '../../src/adapters/platform-files.ts';
import { CONTROL_PLANE_CLIENT, PLAIN_HTTP_ATTEMPT } from '../helpers/e2e/control-plane-client.ts';

const tag = `dev-e2e-${randomBytes(3).toString('hex')}`;
const ref = `${REGISTRY}/installer:${tag}`;
// The production compose file runs `prod-latest` when VERSION is unset, as .env.example leaves it.
const prodLatest = `${REGISTRY}/installer:prod-latest`;
let digest: string;

beforeAll(async () => {
  const digests = await buildInstallerImage([ref, prodLatest]);
  digest = digests[ref]!;
});

describe('the installer stack (dev compose file, real engine, local registry)', () => {
  let stack: Stack | undefined;
  beforeAll(async () => {
    // The API document is off by default in production: this stack turns it on to check the bundle serves it.
    stack = await startStack({ version: tag, env: { API_DOCS: 'on' } });
  });
  afterAll(async () => stack?.down());

  it('is healthy once its one-shot migration has completed', async () => {
    const init = JSON.parse(await docker(['inspect', 'installer-backend-init']))[0];
    expect(init.State.Status).toBe('exited');
    expect(init.State.ExitCode).toBe(0);
    const backend = JSON.parse(await docker(['inspect', 'installer-backend']))[0];
    expect(backend.State.Health.Status).toBe('healthy');
    // Healthy by the image's own check: bash and scripts/healthcheck.sh, every second.
    expect(backend.Config.Healthcheck.Test).toEqual(['CMD', 'bash', '/usr/src/app/scripts/healthcheck.sh']);
    expect(backend.Config.Healthcheck.Interval).toBe(1e9);
    const passes = (backend.State.Health.Log as { ExitCode: number }[]).filter((l) => l.ExitCode === 0);
    expect(passes.length).toBeGreaterThan(0);
    expect(backend.Config.Env).toContain('INSTALLER_CHANNEL=dev');
    expect(backend.Config.Env).toContain('TZ=UTC');
    const res = await fetch(`${stack!.baseUrl}/api/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok', db: 'up' });
  });

  it('signs in the first admin and reports the digest that was pushed', async () => {
    const token = await stack!.login('admin', await stack!.adminPassword());
    const res = await fetch(`${stack!.baseUrl}/api/version`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
    const v = await res.json();
    expect(v).toMatchObject({ inContainer: true, image: ref, tag, digest });
    expect(digest).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('serves the operator UI built into the image at /', async () => {
    const res = await fetch(`${stack!.baseUrl}/jobs/any`);
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html).toContain('<div id="app">');
    const asset = /src="(\/assets\/[^"]+\.js)"/.exec(html)![1]!;
    expect((await fetch(`${stack!.baseUrl}${asset}`)).status).toBe(200);
  });

  it('serves its OpenAPI document and its viewer from the bundled backend', async () => {
    const doc = await fetch(`${stack!.baseUrl}/api/docs/json`);
    expect(doc.status).toBe(200);
    const api = (await doc.json()) as { openapi: string; info: { title: string }; paths: Record<string, unknown> };
    expect(api.info.title).toBe('Installer API');
    expect(Object.keys(api.paths)).toContain('/api/system/self-update');
    const viewer = await fetch(`${stack!.baseUrl}/api/docs/`);
    expect(viewer.status).toBe(200);
    expect(viewer.headers.get('content-security-policy')).toContain("script-src 'self';");
    expect(await viewer.text()).toContain('swagger-ui');
    // The viewer's files come from its package in node_modules, which the bundle points at.
    const script = await fetch(`${stack!.baseUrl}/api/docs/static/swagger-ui-bundle.js`);
    expect(script.status).toBe(200);
    expect((await script.arrayBuffer()).byteLength).toBeGreaterThan(100_000);
    const logo = await fetch(`${stack!.baseUrl}/api/docs/static/logo.svg`);
    expect(logo.status).toBe(200);
    expect(await logo.text()).toContain('<svg');
  });

  it("starts from the code cache the image's build made after a start (V8 accepts it under the CMD's own flags)", async () => {
    const image = JSON.parse(await docker(['image', 'inspect', ref]))[0];
    const cmd: string[] = image.Config.Cmd;
    expect(cmd.at(-1)).toBe('/usr/src/app/dist/src/bundle/start.js');
    // The image's own command with a port that stops it at its configuration, before it does anything.
    const r = await run('docker', ['run', '--rm', '-e', 'NODE_DEBUG=installer-code-cache', '-e', 'PORT=not-a-port', '--entrypoint', cmd[0]!, ref, ...cmd.slice(1)]);
    expect(r.stderr).toContain('installer: configuration error: PORT');
    expect(r.stderr).toMatch(/INSTALLER-CODE-CACHE \d+: code cache accepted: \d+ bytes/);
    expect(r.stderr).not.toContain('rejected');
    // Under other V8 flags the cache is refused, and the backend starts without it and says so.
    const other = await run('docker', ['run', '--rm', '-e', 'PORT=not-a-port', '--entrypoint', cmd[0]!, ref, '--no-flush-bytecode', ...cmd.slice(1)]);
    expect(other.stderr).toContain('installer: V8 rejected the code cache /usr/src/app/dist/src/bundle/main.js.cache');
    expect(other.stderr).toContain('installer: configuration error: PORT');
    // Made after a start ran, it holds the bytecode of the functions that start ran, not only what
    // compiling the bundle makes (Node's compile cache, which the image carried before): about three
    // times the size.
    const sizes = await run('docker', ['run', '--rm', '--entrypoint', 'node', ref, '-e', [
      "const { readFileSync, statSync } = require('node:fs'); const { Script } = require('node:vm');",
      "const bundle = '/usr/src/app/dist/src/bundle/main.js';",
      "const compiled = new Script(readFileSync(bundle, 'utf8'), { filename: bundle }).createCachedData().length;",
      "console.log(JSON.stringify({ compiled, cache: statSync(bundle + '.cache').size }));",
    ].join(' ')]);
    const { compiled, cache } = JSON.parse(sizes.stdout) as { compiled: number; cache: number };
    expect(cache).toBeGreaterThan(2 * compiled);
    // That start left nothing in the image: no database, secrets, certificate or first user's password.
    const left = await run('docker', ['run', '--rm', '--entrypoint', 'sh', ref, '-c', 'ls -A /tmp /var/lib/installer /var/lib/installer/secrets']);
    expect(left.stdout.split('\n').filter((line) => line && !line.endsWith(':'))).toEqual(['secrets']);
  });

  it('bundles ajv 8 once, and none of the parts it stubs out (scripts/bundle-backend.ts)', async () => {
    const r = await run('docker', ['run', '--rm', '--entrypoint', 'cat', ref, '/usr/src/app/dist/src/bundle/main.js']);
    const bundle = r.stdout;
    expect(bundle.length).toBeGreaterThan(1_000_000);
    // ajv 8 is installed three times (under fastify's compilers and ajv-formats); the bundle holds one.
    expect(bundle.match(/"node_modules\/[^"]*ajv\/dist\/core\.js"/g)).toHaveLength(1);
    for (const absent of ['node_modules/protobufjs/', 'node_modules/@grpc/', 'node_modules/glob/', 'node_modules/ssh2/']) expect(bundle).not.toContain(absent);
  });

  it('sits on the platform network as installer-backend and keeps its secrets out of the logs', async () => {
    const backend = JSON.parse(await docker(['inspect', 'installer-backend']))[0];
    expect(backend.NetworkSettings.Networks.platform.Aliases).toContain('installer-backend');
    const logs = await docker(['logs', 'installer-backend']);
    expect(logs).toContain('installer listening');
    expect(logs).not.toContain(stack!.databasePassword);
    const token = (await docker(['exec', 'installer-backend', 'cat', '/var/lib/installer/secrets/service-token'])).trim();
    expect(token.length).toBeGreaterThanOrEqual(32);
    expect(logs).not.toContain(token);
  });

  it('holds a request made while it starts and answers it once ready: its ports are bound before its code loads', async () => {
    await docker(['stop', '-t', '10', 'installer-backend']);
    const answers: { sentAt: number; status: number; body?: string }[] = [];
    const inFlight = new Set<Promise<void>>();
    let answered = false;
    const ask = async () => {
      const sentAt = Date.now();
      try {
        const res = await fetch(`${stack!.baseUrl}/api/health`, { signal: AbortSignal.timeout(10_000) });
        const body = res.status === 200 ? (await res.body?.cancel(), undefined) : await res.text();
        answers.push({ sentAt, status: res.status, ...(body !== undefined ? { body } : {}) });
        if (res.status === 200) answered = true;
      } catch {
        answers.push({ sentAt, status: 0 }); // refused, or reset
      }
    };
    // A client asking every 5 ms, each on its own connection, from before the start to the first 200.
    const timer = setInterval(() => {
      const p = ask().finally(() => inFlight.delete(p));
      inFlight.add(p);
    }, 5);
    const since = new Date().toISOString();
    try {
      await docker(['start', 'installer-backend']);
      await eventually(() => answered, 'a 200 from the restarted backend', 30_000, 10);
    } finally {
      clearInterval(timer);
      await Promise.all(inFlight);
    }
    // Fastify logs this once its server listens, here on the socket the loader bound.
    const line = (await docker(['logs', '--since', since, 'installer-backend'])).split('\n').find((l) => l.includes('Server listening at'));
    expect(line, 'the backend logs its listen').toBeDefined();
    const listenedAt = Date.parse((JSON.parse(line!) as { time: string }).time);
    // Requests sent well before the backend listened were held and answered, not refused: healthy,
    // or 503 `starting` while its controllers start (docs/adr/0043-healthy-means-reconciling.md).
    const starting = (a: { status: number; body?: string }) => a.status === 503 && JSON.parse(a.body ?? '{}').status === 'starting';
    const held = answers.filter((a) => (a.status === 200 || starting(a)) && a.sentAt < listenedAt - 20);
    expect(held.length, JSON.stringify({ listenedAt, answers })).toBeGreaterThan(0);
    expect(answers.filter((a) => a.status !== 200 && a.status !== 0 && !starting(a))).toEqual([]);
  });

  it('stops promptly and cleanly on SIGTERM (PID 1 handles it)', async () => {
    await docker(['stop', '-t', '10', 'installer-backend']);
    const backend = JSON.parse(await docker(['inspect', 'installer-backend']))[0];
    // A process that ignored SIGTERM would be killed after the timeout and exit 137.
    expect(backend.State.ExitCode).toBe(0);
    expect(await docker(['logs', 'installer-backend'])).toContain('shutting down');
  });
});

/** The lines of docs/deploy.md between two headings, and the commands in its code blocks. */
function docSection(from: string, to: string): string {
  const doc = readFileSync(path.join(ROOT, 'docs/deploy.md'), 'utf8');
  const start = doc.indexOf(from);
  const end = doc.indexOf(to, start + from.length);
  if (start < 0 || end < 0) throw new Error(`docs/deploy.md has no section from "${from}" to "${to}"`);
  return doc.slice(start, end);
}
const commandIn = (section: string, startsWith: string): string[] => {
  const line = section.split('\n').find((l) => l.startsWith(startsWith));
  if (!line) throw new Error(`docs/deploy.md: no command starting with "${startsWith}" in:\n${section}`);
  return line.replace(/\s+#.*$/, '').trim().split(/\s+/);
};

describe('the production stack deployed as docs/deploy.md says, and a platform control plane calling it', () => {
  const id = randomBytes(3).toString('hex');
  const platformImage = `${REGISTRY}/platform-test/control:${id}`;
  const databasePassword = randomBytes(24).toString('hex');
  let stack: DocumentedStack | undefined;
  let platformDir: string;
  let admin: string;

  beforeAll(async () => {
    // A Node image: the control plane's client checks the installer's certificate fingerprint.
    await docker(['tag', 'installer-rig/node:24', platformImage]);
    await docker(['push', platformImage]);
    // The values the page says must be set, and nothing else beyond the rig's own.
    const mustSet = [...docSection('Must be set:', 'Leave as they are').matchAll(/^\| `([A-Z_]+)` \|/gm)].map((m) => m[1]);
    const values = (workDir: string): Record<string, string> => ({
      DATABASE_PASSWORD: databasePassword,
      INSTALLER_REGISTRY: REGISTRY,
      INSTALLER_WORK_DIR: workDir,
      // A folder the backend reads (PLATFORM_DIR is mounted at the same path): templates come over
      // https or from a directory, and this rig has no certificate the backend would trust.
      PLATFORM_TEMPLATES_URL: path.join(workDir, 'platform', 'templates'),
    });
    expect(mustSet).toEqual(Object.keys(values('/x')));
    stack = await deployAsDocumented({ mustSet: values, upCommand: commandIn(docSection('## 3. Start it', '## 4.'), 'docker compose up') });
    platformDir = path.join(stack.workDir, 'platform');

    const templates = path.join(platformDir, 'templates');
    cpSync(path.join(ROOT, 'test/fixtures/control-plane-platform'), templates, { recursive: true });
    writeFileSync(path.join(templates, '.env.template'), `${readFileSync(path.join(templates, '.env.template'), 'utf8')}PLATFORM_IMAGE=${platformImage}\n`);
  });
  afterAll(async () => {
    if (platformDir) await run('docker', ['compose', '-p', 'platform', '-f', path.join(platformDir, 'docker-compose.yml'), 'down', '-v', '-t', '1'], { cwd: platformDir });
    await stack?.down();
  });

  it('comes up healthy on the prod channel; the first admin signs in with the password where the page says', async () => {
    const backend = JSON.parse(await docker(['inspect', 'installer-backend']))[0];
    expect(backend.State.Health.Status).toBe('healthy');
    expect(backend.Config.Env).toContain('INSTALLER_CHANNEL=prod');
    expect(backend.Config.Image).toBe(prodLatest);
    expect(await (await fetch(`${stack!.baseUrl}/api/health`)).json()).toEqual({ status: 'ok', db: 'up' });
    const password = (await stack!.compose(commandIn(docSection('## 4. Sign in', '## 5.'), 'docker compose exec').slice(2))).trim();
    const res = await fetch(`${stack!.baseUrl}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'admin', password }) });
    expect(res.status).toBe(200);
    // As the page says: nothing else until the first admin has chosen a new password.
    const first = ((await res.json()) as { token: string }).token;
    expect((await fetch(`${stack!.baseUrl}/api/deployment/status`, { headers: { authorization: `Bearer ${first}` } })).status).toBe(403);
    admin = await firstAdminToken(stack!.baseUrl, password);
  });

  it('deploys the platform, whose control plane calls the installer over TLS on `platform`, checking its certificate, with the token from its own environment; plain HTTP there is refused', async () => {
    const started = await fetch(`${stack!.baseUrl}/api/deployment/jobs`, { method: 'POST', headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' }, body: JSON.stringify({ action: 'deploy' }) });
    expect(started.status).toBe(202);
    const { jobId: deployId } = (await started.json()) as { jobId: string };
    const events = parseSse(await (await fetch(`${stack!.baseUrl}/api/deployment/jobs/${deployId}/logs`, { headers: { authorization: `Bearer ${admin}` }, signal: AbortSignal.timeout(240_000) })).text());
    expect(events.at(-1)?.data.outcome, JSON.stringify(events.slice(-8))).toBe('completed');
    expect(readFileSync(path.join(platformDir, 'docker-compose.yml'), 'utf8')).toContain('INSTALLER_SERVICE_TOKEN');

    // The control plane's own client, in its container: address, token and certificate fingerprint
    // from the environment the platform's .env gave it; the fingerprint is checked before the token is sent.
    const env = Object.fromEntries(parseEnv(readFileSync(path.join(platformDir, '.env'), 'utf8')).map((e) => [e.key, e.value]));
    const cert = await docker(['exec', 'installer-backend', 'cat', '/var/lib/installer/secrets/tls/cert.pem']);
    expect(env.INSTALLER_URL).toBe('https://installer-backend:8443');
    expect(env.INSTALLER_TLS_FINGERPRINT256).toBe(new X509Certificate(cert).fingerprint256);
    const call = async (...args: string[]) => JSON.parse((await docker(['exec', 'platform-control-1', 'node', '-e', CONTROL_PLANE_CLIENT, ...args])).trim()) as { status?: number; body?: string; fingerprint?: string; error?: string };
    const status = await call('GET', '/api/deployment/status');
    expect(status, JSON.stringify(status)).toMatchObject({ status: 200, fingerprint: env.INSTALLER_TLS_FINGERPRINT256 });
    expect(status.body).toContain('"project":"platform"');
    // Without the token the same call is refused: the path is authenticated end to end.
    expect(await call('GET', '/api/deployment/status', '--anonymous')).toMatchObject({ status: 401 });
    // A certificate other than the one named in .env: the client stops before it sends anything.
    const forged = JSON.parse((await docker(['exec', '-e', `INSTALLER_TLS_FINGERPRINT256=${'00:'.repeat(31)}00`, 'platform-control-1', 'node', '-e', CONTROL_PLANE_CLIENT, 'GET', '/api/deployment/status'])).trim());
    expect(forged).toMatchObject({ error: 'certificate fingerprint mismatch' });
    // Plain HTTP with the token from a container on `platform`: the connection is refused, at the
    // old address and at the backend's address on that network alike; nothing of the request is read.
    const platformIp = JSON.parse(await docker(['inspect', 'installer-backend']))[0].NetworkSettings.Networks.platform.IPAddress as string;
    for (const host of ['installer-backend', platformIp]) {
      const plain = JSON.parse((await docker(['exec', 'platform-control-1', 'node', '-e', PLAIN_HTTP_ATTEMPT, host, '8080'])).trim());
      expect(plain, `plain HTTP to ${host}:8080`).toEqual({ refused: true });
    }
    // The healthcheck (the container's loopback) and the host's loopback keep plain HTTP.
    expect(JSON.parse(await docker(['inspect', 'installer-backend']))[0].State.Health.Status).toBe('healthy');
    expect((await fetch(`${stack!.baseUrl}/api/health`)).status).toBe(200);
    // Last: the restart it asks for recreates its own container.
    const job = await call('POST', '/api/deployment/jobs', '{"action":"restart","services":["control"]}');
    expect(job.status, JSON.stringify(job)).toBe(202);
    const jobId = (JSON.parse(job.body!) as { jobId: string }).jobId;

    const row = await eventually(async () => {
      const rows = (await (await fetch(`${stack!.baseUrl}/api/deployment/actions?limit=20`, { headers: { authorization: `Bearer ${admin}` } })).json()) as { jobId: string | null; kind: string; status: string; actor: string; actorEmail: string | null }[];
      return rows.find((r) => r.jobId === jobId && r.status !== 'started');
    }, 'the restart requested by the control plane to finish', 120_000, 500);
    expect(row).toMatchObject({ kind: 'restart', status: 'completed', actor: 'platform:user-4711', actorEmail: 'u4711@example.com', actorKind: 'platform-user' });

    const token = (await docker(['exec', 'installer-backend', 'cat', '/var/lib/installer/secrets/service-token'])).trim();
    expect(readFileSync(path.join(platformDir, '.env'), 'utf8')).toContain(`INSTALLER_SERVICE_TOKEN=${token}`);
    expect(await docker(['logs', 'installer-backend'])).not.toContain(token);
  });
});

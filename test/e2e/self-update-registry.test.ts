// The self-update check and start against the real engine and registry, with small images built
// here and the app in this process: a repository or a tag that does not exist is reported as such
// (not as "registry unreachable"), and without PUBLISHED_COMPOSE_URL the published compose file is
// the one the channel's newest image ships, pulled in the background, read once per image and kept
// through the dangling-image prune; a set PUBLISHED_COMPOSE_URL still wins.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ROOT } from '../helpers/shared/process.ts';
import { docker, REGISTRY, retryOnSharedEngine, run } from '../helpers/e2e/rig.ts';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import type { RuntimePort, VersionInfo } from '../../src/contracts/ports.ts';
import type { DockerSelfUpdateEngine } from '../../src/adapters/self-update.ts';

const ns = `sur-${randomBytes(3).toString('hex')}`;
/** A repository holding the running build only, one holding a newer `dev-latest` too, one that does not exist. */
const onlyRunning = `${REGISTRY}/${ns}-a`;
const withNewer = `${REGISTRY}/${ns}-b`;
const missing = `${REGISTRY}/${ns}-none`;
const dir = mkdtempSync(path.join(tmpdir(), 'su-registry-'));
const shipped = readFileSync(path.join(ROOT, 'deploy/docker-compose.dev.yml'), 'utf8');
const newerShips = `${shipped}# shipped by the newer build ${ns}\n`;
const pushed = new Map<string, string>(); // reference → digest
let runningImageId = '';

/** A small image that ships `compose` where an installer image ships its dev compose file. */
async function buildAndPush(ref: string, compose: string, label: string): Promise<string> {
  const ctx = mkdtempSync(path.join(dir, 'ctx-'));
  writeFileSync(path.join(ctx, 'docker-compose.dev.yml'), compose);
  writeFileSync(
    path.join(ctx, 'Dockerfile'),
    `FROM installer-rig/busybox:latest\nLABEL io.installer.test=${label}\nCOPY docker-compose.dev.yml /usr/src/app/deploy/docker-compose.dev.yml\n`,
  );
  await retryOnSharedEngine(`building ${ref}`, async () => {
    await docker(['build', '-q', '-t', ref, ctx], { env: { DOCKER_BUILDKIT: '0' } });
    await docker(['push', '-q', ref]);
  });
  const repo = ref.slice(0, ref.lastIndexOf(':'));
  const digests = await docker(['image', 'inspect', '--format', '{{range .RepoDigests}}{{println .}}{{end}}', ref]);
  const d = digests.split('\n').find((l) => l.startsWith(`${repo}@`))!.split('@')[1]!;
  pushed.set(ref, d);
  return d;
}

const localImageId = async (ref: string) => {
  const r = await run('docker', ['image', 'inspect', '--format', '{{.Id}}', ref]);
  return r.code === 0 ? r.stdout.trim() : null;
};

/** The backend as the engine would report it: running `<repository>:dev-41`. */
function runtimeOn(repository: string): RuntimePort {
  return {
    async version(): Promise<VersionInfo> {
      return { inContainer: false, image: `${repository}/installer:dev-41`, tag: 'dev-41', digest: pushed.get(`${onlyRunning}/installer:dev-41`)!, imageId: runningImageId, containerId: null };
    },
  };
}

/** The app and its self-update controller on the real engine; the local compose file is the shipped dev file. */
async function installerOn(registry: string, env: Record<string, string> = {}): Promise<TestApp> {
  const workDir = mkdtempSync(path.join(dir, 'work-'));
  writeFileSync(path.join(workDir, 'docker-compose.dev.yml'), shipped);
  return startTestApp({
    runtime: runtimeOn(registry),
    env: { OBSERVED_CHANNEL_MAX_AGE_SECONDS: '0', INSTALLER_REGISTRY: registry, INSTALLER_CHANNEL: 'dev', INSTALLER_WORK_DIR: workDir, INSTALLER_COMPOSE_FILE: 'docker-compose.dev.yml', STAGING_ROOT: path.join(workDir, 'staging'), ...env },
    controllers: (wired) => wired.controllers.start(['self-update']),
  });
}

const headers = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'amy' };
async function check(t: TestApp) {
  const res = await t.app.inject({ method: 'GET', url: '/api/system/self-update-check', headers });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as { updateAvailable: boolean; remoteDigest: string | null; composeChanged: boolean | null; error?: string };
}
const start = (t: TestApp) => t.app.inject({ method: 'POST', url: '/api/system/self-update', headers });

beforeAll(async () => {
  // The running build: in the first repository and (same digest) in the second; the newer build
  // only in the second, as its dev-latest, and not local (as on a host that never pulled it).
  await buildAndPush(`${onlyRunning}/installer:dev-41`, shipped, `${ns}-running`);
  runningImageId = (await localImageId(`${onlyRunning}/installer:dev-41`))!;
  await docker(['tag', `${onlyRunning}/installer:dev-41`, `${withNewer}/installer:dev-41`]);
  await docker(['push', '-q', `${withNewer}/installer:dev-41`]);
  await buildAndPush(`${withNewer}/installer:dev-latest`, newerShips, `${ns}-newer`);
  await docker(['rmi', `${withNewer}/installer:dev-latest`]);
});

afterAll(async () => {
  const out = await run('docker', ['image', 'ls', '--format', '{{.Repository}}:{{.Tag}}']);
  const refs = out.stdout.split('\n').filter((r) => r.includes(`/${ns}-`));
  if (refs.length) await run('docker', ['rmi', '-f', ...refs]);
  const untagged = await run('docker', ['image', 'ls', '--filter', `label=io.installer.test=${ns}-newer`, '-q']);
  if (untagged.stdout.trim()) await run('docker', ['rmi', '-f', ...untagged.stdout.trim().split('\n')]);
  for (const [ref, d] of pushed) {
    const repo = ref.slice(REGISTRY.length + 1, ref.lastIndexOf(':'));
    await fetch(`http://${REGISTRY}/v2/${repo}/manifests/${d}`, { method: 'DELETE' }).catch(() => {});
  }
});

describe('a missing repository or tag is reported as such', () => {
  it('a tag that does not exist: the check says so, and the start answers 400 saying so, nothing changed', async () => {
    const t = await installerOn(onlyRunning);
    try {
      const c = await check(t);
      expect(c).toMatchObject({ updateAvailable: false, remoteDigest: null });
      expect(c.error).toContain(`not in the registry: tag dev-latest does not exist in repository ${onlyRunning}/installer`);
      expect(c.error).not.toContain('registry unreachable');
      const r = await start(t);
      expect(r.statusCode, r.body).toBe(400);
      const message = (r.json() as { message: string }).message;
      expect(message).toContain(`tag dev-latest does not exist in repository ${onlyRunning}/installer`);
      expect(message).toMatch(/nothing was changed$/);
      expect(message).not.toContain('unreachable');
      expect(await localImageId(`${onlyRunning}/installer:rollback`)).toBeNull();
    } finally {
      await t.close();
    }
  });

  it('a repository that does not exist: the check says so, and the start answers 400 saying so', async () => {
    const t = await installerOn(missing);
    try {
      const c = await check(t);
      expect(c).toMatchObject({ updateAvailable: false, remoteDigest: null });
      expect(c.error).toContain(`not in the registry: repository ${missing}/installer does not exist in the registry`);
      expect(c.error).not.toContain('registry unreachable');
      const r = await start(t);
      expect(r.statusCode, r.body).toBe(400);
      expect((r.json() as { message: string }).message).toContain(`repository ${missing}/installer does not exist in the registry`);
    } finally {
      await t.close();
    }
  });

  it('a registry nobody listens on is still "registry unreachable"', async () => {
    const t = await installerOn(`127.0.0.1:5999/${ns}`);
    try {
      const c = await check(t);
      expect(c.error).toMatch(/registry unreachable: .*127\.0\.0\.1:5999.*connection refused/);
      expect(c.error).not.toContain('does not exist');
    } finally {
      await t.close();
    }
  });
});

describe('without PUBLISHED_COMPOSE_URL the published compose file is the one the newest image ships', () => {
  it('pulls the newest image in the background, then compares with its file; the pull survives the prune', async () => {
    const t = await installerOn(withNewer);
    try {
      const newest = pushed.get(`${withNewer}/installer:dev-latest`)!;
      expect(await localImageId(`${withNewer}/installer@${newest}`)).toBeNull();
      const first = await check(t);
      expect(first).toMatchObject({ updateAvailable: true, remoteDigest: newest, composeChanged: null });
      expect(first.error).toContain(`published compose file unavailable: the newest build of channel dev (${newest}) is not local yet: it is being pulled`);
      await (t.wired.selfUpdateEngine as DockerSelfUpdateEngine).prefetchSettled();
      const c = await eventually(async () => {
        const x = await check(t);
        return x.composeChanged !== null ? x : null;
      }, 'composeChanged from the pulled image', 60_000, 250);
      expect(c).toMatchObject({ updateAvailable: true, remoteDigest: newest, composeChanged: true });
      expect(c.error).toBeUndefined();
      // The pull is tagged, so the installer's own dangling-image prune keeps it for the update.
      const pulled = await localImageId(`${withNewer}/installer:dev-prefetched`);
      expect(pulled).toBe(await localImageId(`${withNewer}/installer@${newest}`));
      await docker(['image', 'prune', '-f', '--filter', `label=io.installer.test=${ns}-newer`]);
      expect(await localImageId(`${withNewer}/installer:dev-prefetched`)).toBe(pulled);

      // Read once per image: further checks create no container of that image, and leave none behind.
      // Engine events take fractional epoch seconds; the pause keeps the last reading out of the window.
      await new Promise((r) => setTimeout(r, 500));
      const since = (Date.now() / 1000).toFixed(3);
      for (let i = 0; i < 3; i++) expect((await check(t)).composeChanged).toBe(true);
      const until = Math.ceil(Date.now() / 1000) + 1;
      const events = await docker(['events', '--since', since, '--until', String(until), '--filter', 'event=create', '--filter', 'type=container', '--format', '{{.Actor.Attributes.image}}']);
      expect(events.split('\n').filter((l) => l.trim() === pulled || l.trim() === pulled!.replace(/^sha256:/, ''))).toEqual([]);
      expect((await docker(['ps', '-a', '-q', '--filter', 'label=io.installer.role=compose-reader'])).trim()).toBe('');
    } finally {
      await t.close();
    }
  });

  it('the running image ships the same file as the local one: composeChanged false', async () => {
    // The second repository's dev-latest moved to the running build: the newest image is local.
    await docker(['tag', `${onlyRunning}/installer:dev-41`, `${withNewer}/installer:dev-latest`]);
    await docker(['push', '-q', `${withNewer}/installer:dev-latest`]);
    const t = await installerOn(withNewer);
    try {
      const c = await check(t);
      expect(c).toMatchObject({ updateAvailable: false, composeChanged: false });
      expect(c.error).toBeUndefined();
    } finally {
      await t.close();
    }
  });

  it('a set PUBLISHED_COMPOSE_URL still wins', async () => {
    const published = path.join(dir, 'published');
    mkdirSync(published, { recursive: true });
    writeFileSync(path.join(published, 'docker-compose.yml'), `${shipped}# from object storage\n`);
    const t = await installerOn(withNewer, { PUBLISHED_COMPOSE_URL: `file://${published}/docker-compose.yml` });
    try {
      expect(await check(t)).toMatchObject({ updateAvailable: false, composeChanged: true });
      writeFileSync(path.join(published, 'docker-compose.yml'), shipped);
      expect(await check(t)).toMatchObject({ composeChanged: false });
    } finally {
      await t.close();
    }
  });
});

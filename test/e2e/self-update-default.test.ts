// A default install updating itself on the real engine and registry: deploy/docker-compose.yml with a
// .env made from deploy/.env.example, changed only where the rig differs from a customer's host (its
// registry, a Postgres mirror, free ports on loopback, the work dir). No PUBLISHED_COMPOSE_URL: the
// compose file installed is the one the new image ships. It updates, rolls back from a broken build
// onto `rollback`, and with SELF_UPDATE_ROLLBACK_TAG=previous rolls back onto `previous`.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ROOT } from '../helpers/shared/process.ts';
import { docker, freePort, run } from '../helpers/e2e/rig.ts';
import { removeLeftovers } from '../helpers/e2e/stack.ts';
import { firstAdminToken } from '../helpers/e2e/first-admin.ts';
import { type SelfUpdateCheck as Check } from '../helpers/api/self-update.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { HELPER, helperExit, helperState, Images, localDigest, STAGED_FILE, STAGING_ROOT } from '../helpers/e2e/self-update-rig.ts';
import { NOT_VERIFIED } from '../../src/contracts/signatures.ts';
import { makeKeyPair, signBuild } from '../helpers/e2e/signing.ts';
import { registryDoorForContainers, type RegistryDoor } from '../helpers/e2e/fake-registries.ts';
import { REGISTRY } from '../helpers/e2e/rig.ts';
import { parseSse } from '../helpers/shared/sse.ts';

const images = new Images();
const BASE = 'base';
const workDir = mkdtempSync(path.join(tmpdir(), 'installer-default-'));
const composeFile = path.join(workDir, 'docker-compose.yml');
const shipped = readFileSync(path.join(ROOT, 'deploy/docker-compose.yml'), 'utf8');
let baseUrl = '';
let token = '';

/** deploy/.env.example with the given lines replaced (a commented `#NAME=` line is uncommented). */
function envFromExample(values: Record<string, string>): string {
  const lines = readFileSync(path.join(ROOT, 'deploy/.env.example'), 'utf8').split('\n');
  const left = new Map(Object.entries(values));
  const out = lines.map((line) => {
    const m = /^#?([A-Z][A-Z0-9_]*)=/.exec(line);
    if (!m || !left.has(m[1]!)) return line;
    const v = left.get(m[1]!)!;
    left.delete(m[1]!);
    return `${m[1]}=${v}`;
  });
  for (const [k, v] of left) out.push(`${k}=${v}`);
  return out.join('\n');
}

/** `docker compose` as the operator runs it in the work dir: the project name comes from the file. */
const compose = (args: string[], env: Record<string, string> = {}) => docker(['compose', '-f', composeFile, ...args], { cwd: workDir, env, timeoutMs: 10 * 60_000 });

const call = async (method: string, p: string) => {
  const res = await fetch(`${baseUrl}${p}`, { method, headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(120_000) });
  const text = await res.text();
  return { status: res.status, body: JSON.parse(text) as unknown };
};
const check = async () => {
  const r = await call('GET', '/api/system/self-update-check');
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as Check;
};
const version = async () => (await call('GET', '/api/version')).body as { digest: string | null; image: string | null };
const startUpdate = () => call('POST', '/api/system/self-update');
const statusFile = () => readFileSync(path.join(workDir, '.self-update-status'), 'utf8').trim();
const until = <T>(what: string, fn: () => Promise<T | null | undefined | false>) => eventually(fn, what, 180_000, 250);
const settled = (digest: string) =>
  until(`the backend on ${digest} with a reconciled update`, async () => {
    if ((await version()).digest !== digest) return null;
    const c = await check();
    return c.lastUpdate.status !== 'started' ? c : null;
  });
const backendEnv = async () => JSON.parse(await docker(['inspect', 'installer-backend']))[0].Config.Env as string[];
const login = async () => {
  const generated = (await docker(['exec', 'installer-backend', 'cat', '/var/lib/installer/secrets/initial-admin-password'])).trim();
  token = await firstAdminToken(baseUrl, generated);
};

beforeAll(async () => {
  await images.buildBase(BASE);
  await images.publish(BASE, 'prod');
  const built = await Promise.allSettled([images.buildVariant('ships-new-compose', BASE, 'new-compose'), images.buildVariant('unhealthy', BASE, 'unhealthy')]);
  for (const b of built) if (b.status === 'rejected') throw b.reason;

  await removeLeftovers();
  copyFileSync(path.join(ROOT, 'deploy/docker-compose.yml'), composeFile);
  // The published port speaks HTTPS; the client here uses the plain HTTP port on loopback.
  const port = await freePort();
  let httpPort = await freePort();
  while (httpPort === port) httpPort = await freePort();
  writeFileSync(
    path.join(workDir, '.env'),
    envFromExample({
      INSTALLER_REGISTRY: images.registry,
      POSTGRES_IMAGE: 'installer-rig/postgres:15',
      INSTALLER_BIND: '127.0.0.1',
      INSTALLER_PORT: String(port),
      INSTALLER_HTTP_PORT: String(httpPort),
      INSTALLER_WORK_DIR: workDir,
      // The test publishes builds and reads the check at once: no observation of the channel is old enough.
      OBSERVED_CHANNEL_MAX_AGE_SECONDS: '0',
    }),
  );
  baseUrl = `http://127.0.0.1:${httpPort}`;
  try {
    await compose(['up', '-d', '--wait', '--wait-timeout', '180', 'backend']);
  } catch (err) {
    const logs = await run('docker', ['compose', '-f', composeFile, 'logs', '--no-color', '--tail', '80'], { cwd: workDir });
    throw new Error(`${(err as Error).message}\n${logs.stdout}${logs.stderr}`);
  }
  await login();
});

afterAll(async () => {
  await run('docker', ['compose', '-f', composeFile, 'down', '-v', '--remove-orphans', '-t', '5'], { cwd: workDir });
  await run('docker', ['rm', '-f', HELPER]);
  rmSync(path.join(STAGING_ROOT, 'self-update'), { recursive: true, force: true });
  await images.cleanup();
  rmSync(workDir, { recursive: true, force: true });
});

describe('a default install (deploy/.env.example) updating itself', () => {
  it('runs the channel tag with the default rollback tag and no PUBLISHED_COMPOSE_URL; its file is the one its image ships', async () => {
    const env = await backendEnv();
    expect(env).toContain('SELF_UPDATE_ROLLBACK_TAG=rollback');
    expect(env).toContain('PUBLISHED_COMPOSE_URL=');
    expect(env).toContain('INSTALLER_CHANNEL=prod');
    expect((await version()).image).toBe(images.ref('prod-latest'));
    const c = await check();
    expect(c).toEqual({
      updateAvailable: false,
      currentDigest: images.digests.get(BASE),
      remoteDigest: images.digests.get(BASE),
      composeChanged: false,
      lastUpdate: { status: null, detail: null, at: null, targetDigest: null, jobId: null },
      // The default install has no signing key: its check says plainly that updates are not verified.
      signature: { policy: 'off', result: null, detail: NOT_VERIFIED, refused: false },
      // The packaged stack runs the platform on this host unless PLATFORM_RUNTIME says swarm.
      platformRuntime: 'compose',
      observedAt: expect.any(String),
      ageMs: expect.any(Number),
    });
  });

  it('updates to a new build and installs the compose file that build ships', async () => {
    const previous = images.digests.get(BASE)!;
    const target = await images.publish('new-compose', 'prod');
    // As on a customer's host, the new build is in the registry only: the local tags go back.
    await docker(['tag', images.ref(BASE), images.ref('prod-latest')]);
    await docker(['rmi', images.ref('new-compose')]);
    const newFile = `${shipped}# shipped by ships-new-compose-new-compose-${images.namespace}\n`;
    // The check pulls the new build in the background, then compares with the file it ships.
    const c = await until('composeChanged known', async () => {
      const x = await check();
      return x.composeChanged !== null ? x : null;
    });
    expect(c).toMatchObject({ updateAvailable: true, currentDigest: previous, remoteDigest: target, composeChanged: true });
    expect(await localDigest(images.ref('prod-prefetched'))).toBe(target);

    const r = await startUpdate();
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ started: true, targetDigest: target });
    const h = (await helperState())!;
    expect(h.cmd).toEqual(['sh', '/usr/src/app/scripts/self-update.sh', 'installer', workDir, 'docker-compose.yml', STAGED_FILE, 'rollback', 'prod-latest', 'backend']);
    expect(readFileSync(STAGED_FILE, 'utf8')).toBe(newFile);
    expect(await localDigest(images.ref('rollback'))).toBe(previous);

    expect(await helperExit()).toBe(0);
    expect(statusFile()).toBe('ok');
    const after = await settled(target);
    expect(after).toMatchObject({ updateAvailable: false, currentDigest: target, composeChanged: false, lastUpdate: { status: 'completed', targetDigest: target } });
    expect(readFileSync(composeFile, 'utf8')).toBe(newFile);
    expect(readFileSync(`${composeFile}.pre-update`, 'utf8')).toBe(shipped);
  });

  it('rolls back from a broken build onto the rollback tag', async () => {
    const previous = (await version()).digest!;
    const installed = readFileSync(composeFile, 'utf8');
    const target = await images.publish('unhealthy', 'prod');
    const r = await startUpdate();
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ started: true, targetDigest: target });
    // The broken build ships the base file: that is what was staged, and what the rollback undid.
    expect(readFileSync(STAGED_FILE, 'utf8')).toBe(shipped);
    expect(await helperExit()).toBe(0);
    expect(statusFile()).toBe('rolled-back');
    const c = await settled(previous);
    expect(c.lastUpdate).toMatchObject({ status: 'rolled-back', targetDigest: target });
    expect((await version()).image).toBe(images.ref('rollback'));
    expect(readFileSync(composeFile, 'utf8')).toBe(installed);
  });

  it('with SELF_UPDATE_ROLLBACK_TAG=previous, preflight pins and the rollback lands on `previous`', async () => {
    const env = readFileSync(path.join(workDir, '.env'), 'utf8').replace(/^SELF_UPDATE_ROLLBACK_TAG=.*$/m, 'SELF_UPDATE_ROLLBACK_TAG=previous');
    writeFileSync(path.join(workDir, '.env'), env);
    // The local prod-latest is the broken build now: the backend is recreated on the rollback
    // tag, as the deliberate rollback by hand does (VERSION=rollback).
    await compose(['up', '-d', '--wait', '--wait-timeout', '180', 'backend'], { VERSION: 'rollback' });
    await until('the backend answering', async () => (await fetch(`${baseUrl}/api/health`).catch(() => null))?.ok);
    expect(await backendEnv()).toContain('SELF_UPDATE_ROLLBACK_TAG=previous');
    const previous = (await version()).digest!;
    const target = images.digests.get('prod-latest')!;

    const r = await startUpdate();
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ started: true, targetDigest: target });
    expect((await helperState())!.cmd[6]).toBe('previous');
    expect(await localDigest(images.ref('previous'))).toBe(previous);
    expect(await helperExit()).toBe(0);
    expect(statusFile()).toBe('rolled-back');
    const c = await settled(previous);
    expect(c.lastUpdate).toMatchObject({ status: 'rolled-back', targetDigest: target });
    expect((await version()).image).toBe(images.ref('previous'));
  });
});

// The same install with signing keys in its .env (docs/adr/0053-signed-builds.md): the compose file
// mounts the host's key files and the backend checks the channel's builds against them. The backend
// reads signatures from inside its container, where the rig's registry (the host's loopback) is not
// reachable: SIGNATURE_REGISTRY_ENDPOINTS names a relay to it on one of the machine's own addresses.
describe('the same install with signing keys in its .env', () => {
  const keysDir = mkdtempSync(path.join(tmpdir(), 'installer-keys-'));
  let door: RegistryDoor;
  /** The update's transcript, replayed from its job's stream (it has ended). */
  const transcript = async (jobId: string) => {
    const res = await fetch(`${baseUrl}/api/deployment/jobs/${jobId}/logs`, { headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' }, signal: AbortSignal.timeout(60_000) });
    return parseSse(await res.text()).filter((e) => e.event === 'output').map((e) => String(e.data.line));
  };

  beforeAll(async () => {
    door = await registryDoorForContainers(REGISTRY);
    const installerKey = await makeKeyPair(keysDir, 'installer');
    const platformKey = await makeKeyPair(keysDir, 'platform');
    const env = readFileSync(path.join(workDir, '.env'), 'utf8');
    writeFileSync(
      path.join(workDir, '.env'),
      `${env}\nSIGNATURE_PUBLIC_KEYS_FILE=${installerKey}\nPLATFORM_SIGNATURE_PUBLIC_KEYS_FILE=${platformKey}\nSIGNATURE_REGISTRY_ENDPOINTS=${REGISTRY}=http://${door.address}\n`,
    );
    // The backend as it runs now (the last case left it on `previous`), recreated with the keys.
    await compose(['up', '-d', '--wait', '--wait-timeout', '180', 'backend'], { VERSION: 'previous' });
    await until('the backend answering', async () => (await fetch(`${baseUrl}/api/health`).catch(() => null))?.ok);
  }, 300_000);
  afterAll(async () => {
    await door?.shut();
    rmSync(keysDir, { recursive: true, force: true });
  });

  it('mounts the key files, refuses an unsigned build before anything changes, and installs a signed one', async () => {
    const env = await backendEnv();
    expect(env).toContain('SIGNATURE_PUBLIC_KEYS_FILE=/run/installer/signing/installer.pub');
    expect(env).toContain('PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE=/run/installer/signing/platform.pub');
    expect(env.filter((e) => e.includes(keysDir))).toEqual([]);
    // The channel's newest build (the unhealthy one, never signed) is refused, in the check first.
    const running = (await version()).digest!;
    const helperBefore = (await helperState())?.id ?? null;
    const rollbackBefore = await localDigest(images.ref('rollback'));
    const unsigned = images.digests.get('prod-latest')!;
    const c = await until('the check to read the signature', async () => {
      const x = await check();
      return x.remoteDigest === unsigned && x.signature.result ? x : null;
    });
    expect(c.signature).toEqual({ policy: 'require', result: 'no-signature', detail: expect.stringContaining('has no signature in'), refused: true });
    const refused = await startUpdate();
    expect(refused.status, JSON.stringify(refused.body)).toBe(409);
    expect((refused.body as { message: string }).message).toMatch(/^self-update not started: checking: the target build is not verified \(no-signature\): .+; SIGNATURE_POLICY=require refuses it; nothing was changed$/);
    // Nothing changed: no helper started, the rollback tag where it was, the same backend.
    expect((await helperState())?.id ?? null).toBe(helperBefore);
    expect(await localDigest(images.ref('rollback'))).toBe(rollbackBefore);
    expect((await version()).digest).toBe(running);

    // A build signed with the installer's key is offered and installed.
    await images.buildVariant('ships-new-compose', BASE, 'signed');
    const target = await images.publish('signed', 'prod');
    await signBuild(keysDir, images.repo, target, 'installer');
    const offered = await until('the signed build offered', async () => {
      const x = await check();
      return x.remoteDigest === target && x.signature.result === 'verified' ? x : null;
    });
    expect(offered.signature).toEqual({ policy: 'require', result: 'verified', detail: expect.stringContaining('is signed by installer.pub'), keyId: expect.stringMatching(/^installer\.pub \([0-9a-f]{16}\)$/), refused: false });
    const r = await startUpdate();
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ started: true, targetDigest: target });
    const jobId = (r.body as { jobId: string }).jobId;
    expect(await helperExit()).toBe(0);
    const after = await settled(target);
    expect(after.lastUpdate).toMatchObject({ status: 'completed', targetDigest: target });
    expect((await transcript(jobId)).filter((l) => l.startsWith('signature: '))).toEqual([expect.stringMatching(/^signature: verified: the build sha256:[0-9a-f]{12}… is signed by installer\.pub \([0-9a-f]{16}\)$/)]);
    // The new backend boots with the same keys, through the compose file its image shipped.
    expect(await backendEnv()).toContain('SIGNATURE_PUBLIC_KEYS_FILE=/run/installer/signing/installer.pub');
    expect((await check()).signature).toMatchObject({ policy: 'require', result: 'verified' });
  });
});

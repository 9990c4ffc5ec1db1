// The target build's signature checked in preflight, before anything changes
// (docs/adr/0053-signed-builds.md): the installer in process with its self-update controller, the
// channel's builds real ones in the rig's registry, signed (or not) by the real signer. The engine's
// side of the update (pull, tags, helper) is the API tier's fake, so that each case ends at the
// preflight's verdict; the registry and the signatures are real.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { FakeEngine, startSelfUpdateApp, type SelfUpdateApp, type SelfUpdateCheck } from '../helpers/api/self-update.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { TEST_SECRETS } from '../helpers/api/app.ts';
import { docker, REGISTRY, uniqueName } from '../helpers/e2e/rig.ts';
import { makeKeyPair, pushBuild, signBuild } from '../helpers/e2e/signing.ts';
import { storedJobEvents } from '../helpers/e2e/jobs.ts';
import { NOT_VERIFIED } from '../../src/contracts/signatures.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'self-update-signatures-'));
const registry = `${REGISTRY}/${uniqueName('sig-update-t')}`;
const repo = `${registry}/installer`;
const keys: Record<'trusted' | 'stranger', string> = { trusted: '', stranger: '' };
const builds: Record<'signed' | 'unsigned' | 'stranger', string> = { signed: '', unsigned: '', stranger: '' };
const service = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'amy', 'x-actor-email': 'amy@example.com' };
let t: SelfUpdateApp | undefined;

beforeAll(async () => {
  keys.trusted = await makeKeyPair(dir, 'trusted');
  keys.stranger = await makeKeyPair(dir, 'stranger');
  for (const b of ['signed', 'unsigned', 'stranger'] as const) builds[b] = await pushBuild(dir, repo, b);
  await signBuild(dir, repo, builds.signed, 'trusted');
  await signBuild(dir, repo, builds.stranger, 'stranger');
}, 600_000);
afterEach(async () => {
  await t?.close();
  t = undefined;
});
afterAll(async () => {
  for (const b of Object.keys(builds)) await docker(['rmi', '-f', `${repo}:${b}`]).catch(() => {});
  rmSync(dir, { recursive: true, force: true });
});

/** The installer in process, its channel's newest build being `build`, with the signature settings `env`. */
async function installer(build: keyof typeof builds, env: Record<string, string>, groups?: ('self-update' | 'update-policy')[]) {
  const engine = new FakeEngine();
  engine.registry.set(`${repo}:dev-latest`, builds[build]);
  engine.pullable.set(builds[build], `img-${build}`);
  t = await startSelfUpdateApp({ engine, env: { INSTALLER_REGISTRY: registry, ...env }, ...(groups ? { groups } : {}) });
  return { app: t, engine };
}

async function check(a: SelfUpdateApp): Promise<SelfUpdateCheck> {
  const res = await a.app.inject({ method: 'GET', url: '/api/system/self-update-check', headers: service });
  expect(res.statusCode, res.body).toBe(200);
  return res.json() as SelfUpdateCheck;
}

async function updateTo(build: keyof typeof builds, env: Record<string, string>) {
  const { app, engine } = await installer(build, env);
  const res = await app.app.inject({ method: 'POST', url: '/api/system/self-update', headers: service, payload: {} });
  const body = res.json() as { message: string; jobId?: string | null; started?: boolean };
  const jobId = body.jobId ?? (await app.db.database.db.selectFrom('self_update_requests').select('job_id').executeTakeFirstOrThrow()).job_id!;
  const lines = (await storedJobEvents(app.db.database.db, jobId)).filter((e) => e.type === 'output').map((e) => String(e.payload.line));
  return { status: res.statusCode, body, lines: lines.filter((l) => l.startsWith('signature: ')), engine };
}

describe('the target build verified in preflight', () => {
  it('with a key file the default is require: a build signed by a trusted key is installed, its key named in the transcript', async () => {
    const u = await updateTo('signed', { SIGNATURE_PUBLIC_KEYS_FILE: keys.trusted });
    expect(u.status, u.body.message).toBe(200);
    expect(u.body.started).toBe(true);
    expect(u.lines).toEqual([expect.stringMatching(/^signature: verified: the build sha256:[0-9a-f]{12}… is signed by trusted\.pub \([0-9a-f]{16}\)$/)]);
    expect(u.engine.calls).toContain('pullByDigest');
  });

  it('require refuses an unsigned build: aborted, naming the cause, before anything changed (409: a block of the preflight report)', async () => {
    const u = await updateTo('unsigned', { SIGNATURE_PUBLIC_KEYS_FILE: keys.trusted, SIGNATURE_POLICY: 'require' });
    expect(u.status).toBe(409);
    expect(u.body.message).toMatch(/^self-update not started: checking: the target build is not verified \(no-signature\): the build sha256:[0-9a-f]{12}… has no signature in .*; SIGNATURE_POLICY=require refuses it; nothing was changed$/);
    expect(u.lines).toEqual([expect.stringMatching(/^signature: no-signature: /)]);
    for (const step of ['backupDatabase', 'pullByDigest', 'tag', 'writeStaged', 'spawnHelper']) expect(u.engine.calls, step).not.toContain(step);
  });

  it('require refuses a build signed by a key it does not trust', async () => {
    const u = await updateTo('stranger', { SIGNATURE_PUBLIC_KEYS_FILE: keys.trusted });
    expect(u.status).toBe(409);
    expect(u.body.message).toContain('not verified (unknown-key): the build');
    expect(u.body.message).toContain('is signed, but by no trusted key (trusted.pub');
    expect(u.engine.calls).not.toContain('pullByDigest');
  });

  it('warn lets an unsigned build go on, with the verdict in the transcript', async () => {
    const u = await updateTo('unsigned', { SIGNATURE_PUBLIC_KEYS_FILE: keys.trusted, SIGNATURE_POLICY: 'warn' });
    expect(u.status, u.body.message).toBe(200);
    expect(u.lines).toEqual([expect.stringMatching(/^signature: no-signature: the build sha256:[0-9a-f]{12}… has no signature/)]);
    expect(u.engine.calls).toContain('pullByDigest');
  });

  it('with no key the update goes on, and its transcript says plainly that it was not verified', async () => {
    const u = await updateTo('unsigned', {});
    expect(u.status, u.body.message).toBe(200);
    expect(u.lines).toEqual([`signature: not checked: ${NOT_VERIFIED}`]);
  });
});

describe("the remote build's signature in the update check and the policy", () => {
  it('the check names the verdict and whether an update to it would be refused', async () => {
    const signed = await installer('signed', { SIGNATURE_PUBLIC_KEYS_FILE: keys.trusted });
    expect((await check(signed.app)).signature).toEqual({ policy: 'require', result: 'verified', detail: expect.stringContaining('is signed by trusted.pub'), keyId: expect.stringMatching(/^trusted\.pub \([0-9a-f]{16}\)$/), refused: false });
    await signed.app.close();
    const stranger = await installer('stranger', { SIGNATURE_PUBLIC_KEYS_FILE: keys.trusted });
    const c = await check(stranger.app);
    expect(c).toMatchObject({ updateAvailable: true, remoteDigest: builds.stranger });
    expect(c.signature).toEqual({ policy: 'require', result: 'unknown-key', detail: expect.stringContaining('signed, but by no trusted key'), refused: true });
    await stranger.app.close();
    const warned = await installer('unsigned', { SIGNATURE_PUBLIC_KEYS_FILE: keys.trusted, SIGNATURE_POLICY: 'warn' });
    expect((await check(warned.app)).signature).toMatchObject({ policy: 'warn', result: 'no-signature', refused: false });
  });

  it("the policy's auto never starts a build that require refuses, nor announces it", async () => {
    const { app } = await installer('unsigned', { SIGNATURE_PUBLIC_KEYS_FILE: keys.trusted }, ['self-update', 'update-policy']);
    expect((await check(app)).signature).toMatchObject({ result: 'no-signature', refused: true });
    const always = { days: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'], startHour: 0, endHour: 24 };
    const put = await app.app.inject({ method: 'PUT', url: '/api/system/update-policy', headers: service, payload: { mode: 'auto', window: always } });
    expect(put.statusCode, put.body).toBe(200);
    const status = await eventually(async () => {
      const p = (await app.app.inject({ method: 'GET', url: '/api/system/update-policy', headers: service })).json() as { status: { decision: string | null; detail: string | null; availableDigest: string | null } };
      return p.status.decision === 'unverified' ? p.status : null;
    }, 'the policy to decide unverified');
    expect(status.detail).toContain('SIGNATURE_POLICY=require refuses it');
    expect(status.availableDigest).toBeNull();
    await app.wired.controllers.reconcilePolicy();
    expect(await app.db.database.db.selectFrom('self_update_requests').selectAll().execute()).toEqual([]);
  });
});

// The installer updating itself on the real engine, registry and Postgres, driven through its API:
// newest already, a good update, an unhealthy build rolled back, a build that migrates and then
// fails (rolled back onto a changed schema), a failing rollback recovered by hand, and the refusals
// (409 while a job runs or an update is in flight, 400 with the registry unreachable).
// Images are built here and derived from the good one (test/fixtures/self-update).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import path from 'node:path';
import { ROOT } from '../helpers/shared/process.ts';
import { freePort, run, startPlatform, type PlatformProject } from '../helpers/e2e/rig.ts';
import {
  helperExit, helperLinesOf, helperLogs, helperState, Images, localDigest, STAGED_FILE, STAGING_ROOT, startInstaller, transcript, type InstallerUnderTest,
} from '../helpers/e2e/self-update-rig.ts';
import type { SseMessage } from '../helpers/shared/sse.ts';
import { LATEST_MIGRATION, type SelfUpdateCheck as Check } from '../helpers/api/self-update.ts';
import type { UpdateHistoryEntry } from '../../src/contracts/update-history.ts';

const images = new Images();
let i: InstallerUnderTest;
let platform: PlatformProject;
const BASE = 'dev-e2e-base';

beforeAll(async () => {
  await images.buildBase(BASE);
  await images.publish(BASE);
  // All settled before a failure is thrown, so that afterAll cleans up every image built.
  const built = await Promise.allSettled([
    images.buildVariant('good', BASE, 'good-1'),
    images.buildVariant('unhealthy', BASE, 'unhealthy'),
    images.buildVariant('migrates-then-unhealthy', BASE, 'migrates'),
    images.buildVariant('crashes', BASE, 'crashes'),
  ]);
  for (const b of built) if (b.status === 'rejected') throw b.reason;
  platform = await startPlatform();
  // The tests publish builds and read the check at once: no observation of the channel is old enough.
  i = await startInstaller(images, BASE, { OBSERVED_CHANNEL_MAX_AGE_SECONDS: '0' });
});

afterAll(async () => {
  await i?.down();
  await platform?.remove();
  await images.cleanup();
});

const check = async () => {
  const r = await i.get('/api/system/self-update-check');
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as Check;
};
const startUpdate = () => i.post('/api/system/self-update');
const version = async () => (await i.get('/api/version')).body as { digest: string | null; image: string | null };
const statusFile = () => readFileSync(path.join(i.stack.workDir, '.self-update-status'), 'utf8').trim();
/** The backend answers on `digest` and has reconciled the update (lastUpdate no longer `started`). */
const settled = (digest: string) =>
  i.until(`the backend on ${digest} with a reconciled update`, async () => {
    if ((await version()).digest !== digest) return null;
    const c = await check();
    return c.lastUpdate.status !== 'started' ? c : null;
  });
/** The helper's line announcing a compose switch to `tag` (the wait is the rig's, shorter than 300 s). */
const switchLine = (tag: string) => new RegExp(`^self-update: running: VERSION=${tag} INSTALLER_INIT_REPLICAS=0 docker compose -p ${i.stack.project} -f docker-compose\\.dev\\.yml up -d --wait --wait-timeout \\d+ backend$`);

/**
 * The update's transcript after the restart: linked from lastUpdate and the audit row, preflight and
 * the helper's start before, the helper's whole output (as `docker logs` shows it) after, then its
 * status, the decision and `finished` (docs/adr/0030-self-update-transcript.md).
 */
async function checkTranscript(jobId: string, c: Check, end: { helperStatus: string; decision: string; outcome: 'completed' | 'failed' }): Promise<SseMessage[]> {
  expect(jobId).toMatch(/^[0-9a-f-]{36}$/);
  expect(c.lastUpdate.jobId).toBe(jobId);
  const actions = (await i.get('/api/deployment/actions?limit=50')).body as { kind: string; jobId: string | null }[];
  expect(actions.find((a) => a.kind === 'self-update')!.jobId).toBe(jobId);
  const events = await transcript(i, jobId);
  expect(events.map((e) => Number(e.id))).toEqual(events.map((_, n) => n + 1));
  const phases = events.filter((e) => e.event === 'phase').map((e) => String(e.data.phase));
  for (const p of ['started', 'resolving', 'pulling', 'recording', 'spawning', 'helper-started', 'helper-output', 'helper-status', 'decision']) expect(phases, p).toContain(p);
  expect(phases.indexOf('helper-started')).toBeLessThan(phases.indexOf('helper-output'));
  expect(events.filter((e) => e.event === 'progress').map((e) => e.data.status)).toEqual(['Pulling', 'Pulled']);
  // The helper's whole output, read from its exited container: every line docker logs shows, in order.
  const fromHelper = helperLinesOf(events);
  const logs = await run('docker', ['logs', 'installer-self-updater']);
  const split = (text: string) => (text === '' ? [] : text.replace(/\n$/, '').split('\n'));
  const [stdout, stderr] = [split(logs.stdout), split(logs.stderr)];
  // Every line, and the helper's stdout (its steps and compose's output) in its order; the engine
  // interleaves stderr by time, which `docker logs` splits off.
  expect([...fromHelper].sort()).toEqual([...stdout, ...stderr].sort());
  const stderrSet = new Set(stderr);
  expect(fromHelper.filter((l) => !stderrSet.has(l))).toEqual(stdout.filter((l) => !stderrSet.has(l)));
  expect(fromHelper.some((l) => l.startsWith('self-update: running: VERSION='))).toBe(true);
  expect(events.find((e) => e.data.phase === 'helper-status')!.data.status).toBe(end.helperStatus);
  expect(events.find((e) => e.data.phase === 'decision')!.data).toMatchObject({ outcome: end.decision, detail: c.lastUpdate.detail });
  expect(events.at(-1)!.data).toMatchObject({ outcome: end.outcome, state: end.decision });
  return events;
}

const backendLogs = async () => {
  const r = await run('docker', ['logs', 'installer-backend']);
  return r.stdout + r.stderr;
};

describe('self-update on the real engine', () => {
  it('1. newest already: started=false and no helper container', async () => {
    const c = await check();
    expect(c).toMatchObject({ updateAvailable: false, currentDigest: images.digests.get(BASE), remoteDigest: images.digests.get(BASE), composeChanged: true });
    expect(c.lastUpdate).toEqual({ status: null, detail: null, at: null, targetDigest: null, jobId: null });
    const r = await startUpdate();
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ started: false, targetDigest: images.digests.get(BASE) });
    expect(await helperState()).toBeNull();
  });

  it('2. a good new build: updated, /api/version = targetDigest, helper exit 0, status ok, platform untouched', async () => {
    const target = await images.publish('good-1');
    const before = await platform.containers();
    const c = await check();
    expect(c).toMatchObject({ updateAvailable: true, remoteDigest: target, currentDigest: images.digests.get(BASE) });

    const startedAt = Date.now();
    const r = await startUpdate();
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ started: true, targetDigest: target });
    // A second update while this one is in flight.
    const again = await startUpdate();
    expect(again.status, JSON.stringify(again.body)).toBe(409);

    const h = (await helperState())!;
    expect(h.cmd).toEqual(['sh', '/usr/src/app/scripts/self-update.sh', i.stack.project, i.stack.workDir, 'docker-compose.dev.yml', STAGED_FILE, 'rollback', 'dev-latest', 'backend']);
    expect(h.image).toBe(images.ref('dev-latest'));
    expect(h.binds).toEqual(['/var/run/docker.sock:/var/run/docker.sock', `${i.stack.workDir}:${i.stack.workDir}`, `${STAGING_ROOT}:${STAGING_ROOT}`]);
    expect(h.healthcheck).toEqual(['NONE']);
    expect(h.autoRemove).toBe(false);
    expect(readFileSync(STAGED_FILE, 'utf8')).toBe(i.publishedText);
    expect(await localDigest(images.ref('rollback'))).toBe(images.digests.get(BASE));

    expect(await helperExit()).toBe(0);
    expect(statusFile()).toBe('ok');
    const after = await settled(target);
    expect((await version()).digest).toBe(target);
    expect(after).toMatchObject({ updateAvailable: false, currentDigest: target, composeChanged: false, lastUpdate: { status: 'completed', targetDigest: target } });
    expect(readFileSync(i.stack.composeFile, 'utf8')).toBe(i.publishedText);
    expect(readFileSync(`${i.stack.composeFile}.pre-update`, 'utf8')).toBe(readFileSync(path.join(ROOT, 'deploy/docker-compose.dev.yml'), 'utf8'));
    expect((await i.get('/api/health')).body).toEqual({ status: 'ok', db: 'up' });
    // The platform was not pulled, recreated or restarted.
    expect(await platform.containers()).toEqual(before);
    const actions = (await i.get('/api/deployment/actions?limit=5')).body as { kind: string; status: string; targetDigest: string; schemaMigration: string; actor: string }[];
    expect(actions.find((a) => a.kind === 'self-update')).toMatchObject({ status: 'completed', targetDigest: target, schemaMigration: LATEST_MIGRATION, actor: 'admin' });
    // The transcript after the restart: the compose output of the switch included.
    const events = await checkTranscript((r.body as { jobId: string }).jobId, after, { helperStatus: 'ok', decision: 'completed', outcome: 'completed' });
    const out = helperLinesOf(events);
    expect(out.filter((l) => switchLine('dev-latest').test(l))).toHaveLength(1);
    expect(out.some((l) => /Container installer-backend\s+(Healthy|Started|Recreated)/.test(l))).toBe(true);
    expect(out.at(-1)).toMatch(/^self-update: status ok/);

    // The downtime the installer measured itself (docs/adr/0031-update-history.md): the old backend
    // wrote its last answer as the switch stopped it, the new one its first readiness.
    const settledAt = Date.now();
    const history = (await i.get('/api/system/self-update/history')).body as UpdateHistoryEntry[];
    const entry = history[0]!;
    expect(entry).toMatchObject({ outcome: 'completed', actor: { id: 'admin' }, from: { digest: images.digests.get(BASE) }, to: { tag: 'dev-latest', digest: target }, downtimeNote: null });
    expect(entry.downtimeMs, JSON.stringify(entry)).not.toBeNull();
    // Positive and plausible: a real gap, shorter than the whole update as this test saw it, and
    // between its own two ends, which lie inside the update.
    expect(entry.downtimeMs!).toBeGreaterThan(0);
    expect(entry.downtimeMs!).toBeLessThan(Math.min(60_000, settledAt - startedAt));
    expect(Date.parse(entry.firstReadyAt!) - Date.parse(entry.lastAnswerAt!)).toBe(entry.downtimeMs);
    expect(Date.parse(entry.lastAnswerAt!)).toBeGreaterThanOrEqual(startedAt - 1_000);
    expect(Date.parse(entry.firstReadyAt!)).toBeLessThanOrEqual(Date.parse(entry.finishedAt!));
    // The same figure in /metrics.
    const metrics = (await i.get('/metrics')).body as string;
    const line = metrics.split('\n').find((l) => l.startsWith(`installer_self_update_downtime_seconds{request_id="${entry.requestId}"} `));
    expect(line, metrics.split('\n').filter((l) => l.includes('self_update')).join('\n')).toBeDefined();
    expect(Number(line!.split(' ').pop())).toBeCloseTo(entry.downtimeMs! / 1000, 6);
    expect(metrics).toMatch(/^installer_self_updates_total\{outcome="completed"\} 1$/m);
    console.log(`self-update downtime measured by the installer: ${entry.downtimeMs} ms`);
  });

  it('3. a build whose healthcheck fails: rolled back, helper exit 0, back on the old digest with the reason', async () => {
    const previous = (await version()).digest!;
    const target = await images.publish('unhealthy');
    const r = await startUpdate();
    expect(r.body).toMatchObject({ started: true, targetDigest: target });
    expect(await helperExit()).toBe(0);
    expect(statusFile()).toBe('rolled-back');
    const c = await settled(previous);
    expect(c.lastUpdate.status).toBe('rolled-back');
    expect(c.lastUpdate.targetDigest).toBe(target);
    expect(c.lastUpdate.detail).toMatch(/^rolled back: the switch to dev-latest failed \(exit 1: .*unhealthy.*\); helper exit 0; still on the previous image .*/);
    expect((await version()).image).toBe(images.ref('rollback'));
    expect(c).toMatchObject({ updateAvailable: true, currentDigest: previous, remoteDigest: target });
    // The transcript, written by the backend that rolled back: the switch's failure and the rollback's compose output.
    const out = helperLinesOf(await checkTranscript((r.body as { jobId: string }).jobId, c, { helperStatus: 'rolled-back', decision: 'rolled-back', outcome: 'failed' }));
    expect(out.filter((l) => switchLine('dev-latest').test(l))).toHaveLength(1);
    expect(out.some((l) => l.startsWith('self-update: switch failed: exit 1'))).toBe(true);
    expect(out.filter((l) => switchLine('rollback').test(l))).toHaveLength(1);
  });

  it('4. a build that migrates the schema and then fails: ROLLED BACK ONTO A CHANGED SCHEMA, logged at error level', async () => {
    const previous = (await version()).digest!;
    const target = await images.publish('migrates');
    const r = await startUpdate();
    expect(r.body).toMatchObject({ started: true, targetDigest: target });
    expect(await helperExit()).toBe(0);
    expect(statusFile()).toBe('rolled-back');
    const c = await settled(previous);
    expect(c.lastUpdate).toMatchObject({ status: 'rolled-back', targetDigest: target });
    // The spec's words, then the backup preflight took (test/e2e/self-update-backup.test.ts restores one).
    expect(c.lastUpdate.detail).toMatch(/^ROLLED BACK ONTO A CHANGED SCHEMA; the database was backed up before the update as installer-\d{8}T\d{9}Z-sha256-[0-9a-f]{12}\.dump; to bring the old schema back: docker stop installer-backend && /);
    const errorLine = (await backendLogs()).split('\n').find((l) => l.includes('"level":"error"') && l.includes('ROLLED BACK ONTO A CHANGED SCHEMA'));
    expect(errorLine).toBeDefined();
    expect(errorLine).toContain('0099_self_update_test_marker');
    expect(errorLine).toContain(`"preUpdateMigration":"${LATEST_MIGRATION}"`);
  });

  it('5. a failing build and a failing rollback tag: status failed, exit 1, recovery text; reconciled after a manual compose up', async () => {
    const target = await images.publish('unhealthy');
    const r = await startUpdate();
    expect(r.body).toMatchObject({ started: true, targetDigest: target });
    // Preflight pinned `rollback` to the running image; make that tag a build that crashes.
    await images.tagLocal(images.ref('crashes'), images.ref('rollback'));
    expect(await helperExit()).toBe(1);
    expect(statusFile()).toBe('failed');
    const logs = await helperLogs();
    expect(logs).toContain('self-update: rollback failed: exit 1');
    expect(logs).toContain('fetch the installer compose file from object storage');
    expect(logs).toContain('docker compose pull && docker compose up -d');
    await expect(fetch(`${i.stack.baseUrl}/api/health`, { signal: AbortSignal.timeout(2_000) })).rejects.toThrow();

    // The operator brings a good image up by hand; its boot reconciles the update.
    await i.stack.compose(['up', '-d', '--wait', '--wait-timeout', '120', 'backend'], { VERSION: BASE });
    const base = images.digests.get(BASE)!;
    const c = await settled(base);
    expect(c.lastUpdate.status).toBe('neither');
    expect(c.lastUpdate.targetDigest).toBe(target);
    expect(c.lastUpdate.detail).toContain(`restarted on ${images.ref(BASE)} (${base}), which is neither the target ${target}`);
    expect(c.lastUpdate.detail).toContain('the rollback failed too');
    // The transcript, written by the backend brought up by hand: the failed switch, the failed rollback, the recovery text.
    const out = helperLinesOf(await checkTranscript((r.body as { jobId: string }).jobId, c, { helperStatus: 'failed', decision: 'neither', outcome: 'failed' }));
    expect(out.filter((l) => switchLine('rollback').test(l))).toHaveLength(1);
    expect(out.some((l) => l.startsWith('self-update: rollback failed: exit 1'))).toBe(true);
    expect(out.some((l) => l.includes('docker compose pull && docker compose up -d'))).toBe(true);
  });

  it('6. 409 while a deployment job runs; 400 with the registry unreachable and nothing changed', async () => {
    // A platform pull from a registry that accepts connections and never answers keeps a job running.
    const sockets: Socket[] = [];
    const silent: Server = createServer((s) => sockets.push(s));
    const port = await freePort();
    await new Promise<void>((r) => silent.listen(port, '127.0.0.1', r));
    try {
      // PLATFORM_DIR is bind-mounted into the backend at the same path: the file is written on the host.
      writeFileSync(path.join(i.stack.platformDir, 'docker-compose.yml'), `services:\n  hang:\n    image: 127.0.0.1:${port}/hang/forever:1\n`);
      const job = await i.post('/api/deployment/jobs', { action: 'pull' });
      expect(job.status, JSON.stringify(job.body)).toBe(202);
      const jobId = (job.body as { jobId: string }).jobId;
      await i.until('the job running', async () => ((await i.get(`/api/deployment/jobs/${jobId}`)).body as { phase: string }).phase === 'running', 30_000);
      const refused = await startUpdate();
      expect(refused.status).toBe(409);
      expect((refused.body as { message: string }).message).toContain(`deployment job ${jobId} (pull) is running`);
      expect(await helperState()).toMatchObject({ running: false, exitCode: 1 }); // still the helper of scenario 5
      expect((await i.post(`/api/deployment/jobs/${jobId}/cancel`)).status).toBe(202);
      await i.until('the job ended', async () => ['completed', 'failed'].includes(((await i.get(`/api/deployment/jobs/${jobId}`)).body as { phase: string }).phase), 60_000);
    } finally {
      for (const s of sockets) s.destroy();
      silent.close();
    }

    // The same backend, told to use a registry nobody listens on.
    const unreachable = `127.0.0.1:5999/${images.namespace}`;
    await images.tagLocal(images.ref(BASE), `${unreachable}/installer:${BASE}`);
    await i.stack.compose(['up', '-d', '--wait', '--wait-timeout', '120', 'backend'], { VERSION: BASE, INSTALLER_REGISTRY: unreachable });
    const c = await check();
    expect(c).toMatchObject({ updateAvailable: false, remoteDigest: null });
    expect(c.error).toMatch(/registry unreachable: .*127\.0\.0\.1:5999.*connection refused/);

    const staged = { text: readFileSync(STAGED_FILE, 'utf8'), mtime: statSync(STAGED_FILE).mtimeMs };
    const helperBefore = (await helperState())!.id;
    const actionsBefore = (await i.get('/api/deployment/actions?limit=50')).body as unknown[];
    const r = await startUpdate();
    expect(r.status).toBe(400);
    expect((r.body as { message: string }).message).toMatch(/cannot be resolved.*127\.0\.0\.1:5999.*connection refused.*nothing was changed/);
    expect((await run('docker', ['image', 'inspect', `${unreachable}/installer:rollback`])).code).not.toBe(0);
    expect({ text: readFileSync(STAGED_FILE, 'utf8'), mtime: statSync(STAGED_FILE).mtimeMs }).toEqual(staged);
    expect((await helperState())!.id).toBe(helperBefore);
    expect((await i.get('/api/deployment/actions?limit=50')).body).toEqual(actionsBefore);
  });
});

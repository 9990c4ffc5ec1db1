// How each self-update ends, on the real engine, registry and Postgres, with the installer stack in
// containers: the `self-update` audit row (kind, status, exit code, actor, detail) of an update that
// completed, one rolled back, one whose rollback failed too, and one whose outcome could not be
// decided because the engine was unreachable while the new backend booted. After the rollback the
// local channel tag names the image that runs again, so a plain `docker compose up -d` (VERSION
// unset) stays on the good build; the check says that the offered build is the one rolled back.
// After the undecided one, jobs and updates are accepted again and a later boot leaves it closed.
// The backend reaches the engine through the engine gate (test/helpers/e2e/engine-gate.ts), which can
// drop every request: the engine is then unreachable for the backend only, not for the helper.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { docker, run } from '../helpers/e2e/rig.ts';
import { helperExit, helperLogs, Images } from '../helpers/e2e/self-update-rig.ts';
import { EngineGate } from '../helpers/e2e/engine-gate.ts';
import { startCrashInstaller, type CrashInstaller } from '../helpers/e2e/crash-stack.ts';
import { type SelfUpdateCheck as Check } from '../helpers/api/self-update.ts';
import { eventually } from '../helpers/shared/eventually.ts';

interface Action {
  id: string;
  kind: string;
  status: string;
  exitCode: number | null;
  actor: string;
  detail: string | null;
  targetDigest: string | null;
}

const BASE = 'dev-outcomes-base';
const images = new Images();
let gate: EngineGate;
let i: CrashInstaller;

const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const imageId = async (ref: string) => (await docker(['image', 'inspect', '-f', '{{.Id}}', ref])).trim();

/** A call that tolerates the restart gap (no answer yet → null). */
async function get<T>(p: string): Promise<T | null> {
  try {
    const r = await i.call('GET', p, undefined, 10_000);
    return r.status === 200 ? (r.body as T) : null;
  } catch {
    return null;
  }
}
const check = () => get<Check>('/api/system/self-update-check');
const version = () => get<{ digest: string | null; image: string | null }>('/api/version');

/** The backend answers on `digest` and its last update has an outcome other than `started`. */
const settled = (digest: string, timeoutMs = 240_000) =>
  eventually(
    async () => {
      if ((await version())?.digest !== digest) return null;
      const c = await check();
      return c && c.lastUpdate.status !== 'started' ? c : null;
    },
    `the backend on ${digest} with a reconciled update`,
    timeoutMs,
    500,
  );

/** The newest `self-update` audit row, as GET /api/deployment/actions shows it. */
async function lastAudit(): Promise<Action> {
  const r = await i.call('GET', '/api/deployment/actions?limit=50');
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  const row = (r.body as Action[]).find((a) => a.kind === 'self-update');
  expect(row, 'a self-update audit row').toBeDefined();
  return row!;
}

async function startUpdate(target: string): Promise<void> {
  const r = await i.call('POST', '/api/system/self-update', undefined, 300_000);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  expect(r.body).toMatchObject({ started: true, targetDigest: target });
}

/** The installer's .env without VERSION: the compose file's default (`dev-latest`) applies. */
function unsetVersion(): void {
  const file = path.join(i.workDir, '.env');
  writeFileSync(file, readFileSync(file, 'utf8').split('\n').filter((l) => !l.startsWith('VERSION=')).join('\n'));
}

/** docker compose on the installer's project as an operator runs it, VERSION unset unless given. */
async function compose(args: string[], env: Record<string, string> = {}): Promise<void> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'VERSION')) as Record<string, string>;
  const r = await run('docker', ['compose', '-p', i.project, '-f', i.composeFile, ...args], { cwd: i.workDir, env: { ...clean, ...env }, timeoutMs: 300_000 });
  // run() merges process.env under env: VERSION must not come from this process either.
  expect(process.env.VERSION, 'VERSION set in the test process').toBeUndefined();
  if (r.code !== 0) throw new Error(`docker compose ${args.join(' ')} failed (${r.code}):\n${r.stdout}\n${r.stderr}`);
}

beforeAll(async () => {
  gate = new EngineGate(path.join(mkdtempSync(path.join(tmpdir(), 'installer-outcomes-gate-')), 'docker.sock'));
  await gate.start();
  await images.buildBase(BASE);
  await images.publish(BASE);
  const built = await Promise.allSettled([
    images.buildVariant('good', BASE, 'good-1'),
    images.buildVariant('crashes', BASE, 'crashes'),
    images.buildVariant('unhealthy', BASE, 'unhealthy'),
  ]);
  for (const b of built) if (b.status === 'rejected') throw b.reason;
  i = await startCrashInstaller(images, BASE, gate.socketPath);
}, 900_000);

afterAll(async () => {
  gate?.refuse(false);
  await i?.down();
  await gate?.close();
  if (gate) rmSync(path.dirname(gate.socketPath), { recursive: true, force: true });
  await images.cleanup();
});

describe('the outcome of each self-update, on the real engine', () => {
  it('completed: audit row completed, exit 0, the actor, "updated to …"', async () => {
    const base = images.digests.get(BASE)!;
    const target = await images.publish('good-1');
    await startUpdate(target);
    expect(await helperExit()).toBe(0);
    const c = await settled(target);
    expect(c.lastUpdate).toMatchObject({ status: 'completed', targetDigest: target });
    expect(c.warning).toBeUndefined();
    expect(await lastAudit()).toMatchObject({
      kind: 'self-update', status: 'completed', exitCode: 0, actor: 'admin', targetDigest: target,
      detail: `updated to dev-latest (${target}) from ${base}`,
    });
    expect(await imageId(images.ref('dev-latest'))).toBe(await imageId(images.ref('good-1')));
  }, 600_000);

  it('rolled back: audit row failed with exit 0; the channel tag names the image that runs again; compose up with VERSION unset stays on it', async () => {
    const good = images.digests.get('good-1')!;
    const target = await images.publish('crashes');
    await startUpdate(target);
    expect(await helperExit()).toBe(0);
    const c = await settled(good);
    expect(c.lastUpdate.status, JSON.stringify(c.lastUpdate)).toBe('rolled-back');
    // The detail names the image that runs: the rollback tag, not the tag the update started from.
    expect((await version())?.image).toBe(images.ref('rollback'));
    expect(c.lastUpdate.detail).toMatch(
      new RegExp(`^rolled back: the switch to dev-latest failed \\(.+\\); helper exit 0; still on the previous image ${esc(images.ref('rollback'))} \\(${esc(good)}\\); the local tag dev-latest points at it again$`),
    );
    expect(await lastAudit()).toMatchObject({ kind: 'self-update', status: 'failed', exitCode: 0, actor: 'admin', targetDigest: target, detail: c.lastUpdate.detail });

    // Preflight had pointed dev-latest at the crashing build; it is the rollback image again.
    const rollbackId = await imageId(images.ref('rollback'));
    expect(await imageId(images.ref('dev-latest'))).toBe(rollbackId);
    expect(await imageId(images.ref('dev-latest'))).not.toBe(await imageId(images.ref('crashes')));

    // The registry still offers the crashing build: available by digests, but said to have rolled back.
    expect(c).toMatchObject({ updateAvailable: true, currentDigest: good, remoteDigest: target });
    expect(c.warning).toMatch(new RegExp(`^the last update to ${esc(target)} did not stick and was rolled back at `));

    // An operator's plain `docker compose up -d`, VERSION unset: the backend is recreated from
    // dev-latest, and that is the good build.
    unsetVersion();
    await compose(['up', '-d', 'backend']);
    await i.waitHealthy(180_000);
    const backend = JSON.parse(await docker(['inspect', 'installer-backend']))[0] as { Image: string; Config: { Image: string } };
    expect(backend.Config.Image).toBe(images.ref('dev-latest'));
    expect(backend.Image).toBe(rollbackId);
    const after = await eventually(async () => ((await version())?.image === images.ref('dev-latest') ? version() : null), 'the recreated backend answering', 120_000, 500);
    expect(after?.digest).toBe(good);
    // Still healthy a little later: the crashing build would have exited by now.
    await new Promise((r) => setTimeout(r, 3_000));
    expect((await docker(['inspect', '-f', '{{.State.Status}} {{.RestartCount}}', 'installer-backend'])).trim()).toBe('running 0');
  }, 600_000);

  it('failed: switch and rollback both failed; after a manual start the audit row is failed with exit 1 and says so', async () => {
    const good = images.digests.get('good-1')!;
    const target = await images.publish('unhealthy');
    await startUpdate(target);
    // Preflight pinned `rollback` to the running image; make that tag a build that crashes. The
    // unhealthy build takes longer than this to be judged (its start period), so the rollback sees it.
    await images.tagLocal(images.ref('crashes'), images.ref('rollback'));
    expect(await helperExit()).toBe(1);
    expect(await helperLogs()).toContain('self-update: status failed');

    // The operator starts the good build by hand; its boot reconciles.
    await compose(['up', '-d', '--wait', '--wait-timeout', '180', 'backend'], { VERSION: 'good-1' });
    const c = await settled(good);
    expect(c.lastUpdate.status, JSON.stringify(c.lastUpdate)).toBe('rolled-back');
    expect(c.lastUpdate.detail).toContain('and the rollback failed too');
    expect(c.lastUpdate.detail).toContain(`still on the previous image ${images.ref('good-1')} (${good})`);
    const row = await lastAudit();
    expect(row).toMatchObject({ kind: 'self-update', status: 'failed', exitCode: 1, actor: 'admin', targetDigest: target, detail: c.lastUpdate.detail });
    expect(row.detail).toMatch(/^rolled back: the switch to dev-latest failed \(.+\) and the rollback failed too \(.+\); the backend was started again by hand/);
    // The unhealthy build is not what dev-latest names any more.
    expect(await imageId(images.ref('dev-latest'))).toBe(await imageId(images.ref('good-1')));
  }, 600_000);

  it('could not decide (engine unreachable while the new backend boots): undecided, audit row failed, jobs and updates accepted, not brought back by a later boot', async () => {
    const target = await images.publish(BASE);
    await startUpdate(target);
    // From now on the backend cannot reach the engine; the helper (on the real socket) switches.
    gate.refuse(true);
    expect(await helperExit()).toBe(0);
    const undecided = await eventually(
      async () => {
        const c = await check();
        return c?.lastUpdate.status === 'undecided' ? c : null;
      },
      'the update closed as undecided',
      240_000,
      1_000,
    );
    expect(gate.refused).toBeGreaterThan(0);
    const detail = undecided.lastUpdate.detail!;
    expect(detail).toMatch(
      new RegExp(
        `^could not decide how the update to dev-latest \\(${esc(target)}\\) ended: the helper container installer-self-updater could not be read through the Docker engine ` +
          '\\(10 attempts, last error: .+\\); closed without an outcome so that jobs and updates are accepted again',
      ),
    );
    expect(undecided.lastUpdate.targetDigest).toBe(target);
    expect(await lastAudit()).toMatchObject({ kind: 'self-update', status: 'failed', exitCode: null, actor: 'admin', targetDigest: target, detail });

    // Not in flight any more: a job is accepted (it fails: the engine is unreachable) and an update
    // is not refused with 409 (its preflight cannot resolve the target without the engine: 400).
    const job = await i.call('POST', '/api/deployment/jobs', { action: 'pull' });
    expect(job.status, JSON.stringify(job.body)).toBe(202);
    const jobId = (job.body as { jobId: string }).jobId;
    await eventually(async () => ['completed', 'failed'].includes((await get<{ phase: string }>(`/api/deployment/jobs/${jobId}`))?.phase ?? ''), 'the job ended', 120_000, 500);
    const refused = await i.call('POST', '/api/system/self-update', undefined, 120_000);
    expect(refused.status, JSON.stringify(refused.body)).toBe(400);

    // The engine is back and the backend restarts: the update stays closed as it was.
    gate.refuse(false);
    // To the millisecond: whole seconds would take in the lines the backend wrote in the second
    // before the restart, among them the undecided close's own "waiting for" line.
    const since = new Date().toISOString();
    await docker(['restart', '-t', '10', 'installer-backend']);
    await i.waitHealthy(120_000);
    await i.login();
    await eventually(async () => (await version())?.digest === target, 'the backend answering on the target', 60_000, 500);
    await new Promise((r) => setTimeout(r, 2_000));
    const later = (await check())!;
    expect(later.lastUpdate).toEqual(undecided.lastUpdate);
    expect(await lastAudit()).toMatchObject({ status: 'failed', exitCode: null, detail });
    const logs = await run('docker', ['logs', '--since', since, 'installer-backend']);
    expect(logs.stdout + logs.stderr).not.toContain('waiting for installer-self-updater to exit');
    // And an update is accepted: the backend runs the channel's newest build already.
    const newest = await i.call('POST', '/api/system/self-update', undefined, 120_000);
    expect(newest.status, JSON.stringify(newest.body)).toBe(200);
    expect(newest.body).toMatchObject({ started: false, targetDigest: target });
  }, 900_000);
});

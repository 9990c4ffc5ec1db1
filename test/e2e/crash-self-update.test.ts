// Crash injection for the self-update chart, in its true deployment shape: the installer stack in
// containers on the real engine and registry. The backend container is driven into every state of
// the self-update chart (and into the moments after a final state while its outcome is stored),
// killed with `docker kill -s KILL`, and started again. States are held from outside: the engine
// gate holds (or fails) the backend's engine requests, a FIFO in place of the published or the
// staged compose file holds a read, and a lock taken by another database session holds a write.
// After each restart: the request is in the right final state with a clear detail, no audit row is
// `started`, no request is left in preflight, the rollback and channel tags and the staged file are
// as they were (nothing has changed), and no helper container exists that no status row accounts for.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { tmpdir } from 'node:os';
import { spawnSync } from 'node:child_process';
import { docker, run } from '../helpers/e2e/rig.ts';
import { HELPER, Images, STAGED_FILE } from '../helpers/e2e/self-update-rig.ts';
import { EngineGate, type Hold } from '../helpers/e2e/engine-gate.ts';
import { startCrashInstaller, type CrashInstaller } from '../helpers/e2e/crash-stack.ts';
import { chartInstanceIds, CrashTally, holdDatabase, requireCrashPoints, waitForChartState, type DbHold } from '../helpers/e2e/crash.ts';
import { selfUpdateMachine } from '../../machines/self-update.machine.ts';
import { eventually } from '../helpers/shared/eventually.ts';

const INTERRUPTED = 'interrupted: the backend restarted during preflight; nothing was changed';
const BASE = 'dev-crash-base';
const images = new Images();
const tally = new CrashTally('self-update');
const covered = new Set<string>();
let gate: EngineGate;
let i: CrashInstaller;
let dbUrl: string;
const gateHolds: Hold[] = [];
const dbHolds: DbHold[] = [];
const fifos: { file: string; restore: string | null }[] = [];

const holdGate = (method: string, p: RegExp) => {
  const h = gate.hold({ method, path: p });
  gateHolds.push(h);
  return h;
};
const holdDb = async (statements: string[], values: unknown[][] = []) => {
  const h = await holdDatabase(dbUrl, statements, values);
  dbHolds.push(h);
  return h;
};

/** Puts a FIFO where a file is read: the reader blocks until the test lets go. */
function fifoAt(file: string): void {
  const restore = existsSync(file) ? readFileSync(file, 'utf8') : null;
  rmSync(file, { force: true });
  mkdirSync(path.dirname(file), { recursive: true });
  const r = spawnSync('mkfifo', [file]);
  if (r.status !== 0) throw new Error(`mkfifo ${file} failed: ${r.stderr}`);
  fifos.push({ file, restore });
}

async function releaseHolds(): Promise<void> {
  for (const h of dbHolds.splice(0)) await h.release();
  for (const h of gateHolds.splice(0)) h.release();
  for (const f of fifos.splice(0)) {
    rmSync(f.file, { force: true });
    if (f.restore !== null) writeFileSync(f.file, f.restore);
  }
}

/** SIGKILL of the backend container, then what held it lets go, then the container starts again. */
async function crashAndRestart(): Promise<void> {
  await i.kill();
  await releaseHolds();
  await i.restart();
}

/** Starts an update without waiting for the answer (the route waits for preflight, which is held). */
function requestUpdate(): void {
  void i.call('POST', '/api/system/self-update', undefined, 300_000).catch(() => {});
}

const imageId = async (ref: string) => {
  const r = await run('docker', ['image', 'inspect', '-f', '{{.Id}}', ref]);
  return r.code === 0 ? r.stdout.trim() : null;
};

interface Before {
  rollback: string | null;
  channel: string | null;
  staged: string | null;
}

async function observed(): Promise<Before> {
  return {
    rollback: await imageId(images.ref('rollback')),
    channel: await imageId(images.ref('dev-latest')),
    staged: existsSync(STAGED_FILE) ? readFileSync(STAGED_FILE, 'utf8') : null,
  };
}

async function query<T>(text: string, values: unknown[] = []): Promise<T[]> {
  const pg = await import('pg');
  const c = new pg.default.Client({ connectionString: dbUrl });
  await c.connect();
  try {
    return (await c.query(text, values)).rows as T[];
  } finally {
    await c.end();
  }
}

/** No audit row started, no request in preflight, every helper container accounted for by a status row. */
async function expectQuiet(): Promise<void> {
  const started = await query<{ id: string }>(`select id from deployment_actions where status = 'started'`);
  expect(started, 'audit rows still started').toEqual([]);
  const open = await query<{ request_id: string; phase: string }>(`select request_id, phase from self_update_status where phase in ('requested', 'preflight')`);
  expect(open, 'requests left in preflight').toEqual([]);
  const helper = await run('docker', ['inspect', '-f', '{{.Id}}', HELPER]);
  if (helper.code === 0) {
    const owner = await query(`select request_id from self_update_status where helper_container_id = $1`, [helper.stdout.trim()]);
    expect(owner, `${HELPER} ${helper.stdout.trim()} is accounted for by no status row`).toHaveLength(1);
  }
}

/** The request ended aborted with `detail`, and nothing has changed. */
async function expectAborted(requestId: string, before: Before, detail: string | RegExp = INTERRUPTED): Promise<void> {
  let row: { phase: string; detail: string | null; action_id: string | null } | undefined;
  await eventually(async () => {
    [row] = await query<NonNullable<typeof row>>(`select phase, detail, action_id from self_update_status where request_id = $1`, [requestId]);
    return row && row.phase !== 'preflight' && row.phase !== 'requested';
  }, `request ${requestId} to end`, 30_000, 200).catch(() => {});
  expect(row?.phase, JSON.stringify(row)).toBe('aborted');
  if (detail instanceof RegExp) expect(row!.detail).toMatch(detail);
  else expect(row!.detail).toBe(detail);
  expect(await observed(), 'tags and staged file as before').toEqual(before);
  const helper = await run('docker', ['inspect', HELPER]);
  expect(helper.code, `${HELPER} exists after an aborted preflight`).not.toBe(0);
  await expectQuiet();
}

function crashPoint(state: string, name: string, fn: () => Promise<void>, timeout = 180_000): void {
  covered.add(state);
  it(`${state}: ${name}`, () => tally.point(`${state}: ${name}`, fn), timeout);
}

/** Drives a fresh update to `state`, with `arm` holding the dependency of that state. */
async function driveTo(state: string, arm: () => Promise<unknown> | unknown): Promise<{ requestId: string; before: Before }> {
  const before = await observed();
  const known = await chartInstanceIds(i.baseUrl, i.token(), 'selfUpdate');
  await arm();
  requestUpdate();
  const requestId = await waitForChartState(i.baseUrl, i.token(), 'selfUpdate', known, state, 90_000);
  return { requestId, before };
}

beforeAll(async () => {
  gate = new EngineGate(path.join(mkdtempSync(path.join(tmpdir(), 'installer-crash-gate-')), 'docker.sock'));
  await gate.start();
  await images.buildBase(BASE);
  await images.publish(BASE);
  await images.buildVariant('good', BASE, 'good-1');
  await images.publish('good-1');
  // On the host, the channel tag still names the build that runs (the registry's has moved on), so
  // a preflight that retags it and is not undone shows.
  await docker(['tag', images.ref(BASE), images.ref('dev-latest')]);
  i = await startCrashInstaller(images, BASE, gate.socketPath);
  dbUrl = await i.databaseUrl();
}, 900_000);

afterEach(releaseHolds);

afterAll(async () => {
  await releaseHolds();
  await i?.down();
  await gate?.close();
  if (gate) rmSync(path.dirname(gate.socketPath), { recursive: true, force: true });
  await images.cleanup();
  console.log(tally.summary());
});

describe('kill -9 of the installer container in every state of the self-update chart', () => {
  it('every non-final state of the self-update chart has a crash point below', () => {
    expect(requireCrashPoints(selfUpdateMachine, covered).length).toBeGreaterThan(0);
  });

  crashPoint('resolving', 'the registry digest asked through the engine', async () => {
    const { requestId, before } = await driveTo('resolving', () => holdGate('GET', /\/distribution\//));
    await gateHolds[0]!.hit();
    await crashAndRestart();
    await expectAborted(requestId, before);
  });

  crashPoint('checking', 'the backend inspecting its own container', async () => {
    const own = (await docker(['inspect', '-f', '{{.Id}}', 'installer-backend'])).trim();
    const dist = holdGate('GET', /\/distribution\//);
    const { requestId, before } = await driveTo('resolving', () => {});
    await dist.hit();
    const inspect = holdGate('GET', new RegExp(`/containers/${own}/json`));
    dist.release();
    await inspect.hit();
    await waitForChartState(i.baseUrl, i.token(), 'selfUpdate', requestId, 'checking');
    await crashAndRestart();
    await expectAborted(requestId, before);
  });

  crashPoint('fetchingCompose', 'reading the published compose file', async () => {
    const { requestId, before } = await driveTo('fetchingCompose', () => fifoAt(i.publishedFile));
    await new Promise((r) => setTimeout(r, 300));
    await crashAndRestart();
    await expectAborted(requestId, before);
  });

  crashPoint('pulling', 'the target pulled by digest', async () => {
    const { requestId, before } = await driveTo('pulling', () => holdGate('POST', /\/images\/create\?/));
    await gateHolds[0]!.hit();
    await crashAndRestart();
    await expectAborted(requestId, before);
  });

  crashPoint('backingUp', 'the database backup (an exec in installer-postgres)', async () => {
    const { requestId, before } = await driveTo('backingUp', () => holdGate('POST', /\/containers\/[^/]+\/exec$/));
    await gateHolds[0]!.hit();
    await crashAndRestart();
    await expectAborted(requestId, before);
  });

  crashPoint('taggingRollback', 'tagging the running image rollback', async () => {
    const { requestId, before } = await driveTo('taggingRollback', () => holdGate('POST', /\/images\/.+\/tag\?.*tag=rollback/));
    await gateHolds[0]!.hit();
    await crashAndRestart();
    await expectAborted(requestId, before);
  });

  crashPoint('staging', 'reading the staged compose file before replacing it', async () => {
    const { requestId, before } = await driveTo('staging', () => fifoAt(STAGED_FILE));
    await new Promise((r) => setTimeout(r, 300));
    await crashAndRestart();
    await expectAborted(requestId, before);
  });

  crashPoint('taggingNew', 'tagging the pulled image dev-latest', async () => {
    const { requestId, before } = await driveTo('taggingNew', () => holdGate('POST', /\/images\/.+\/tag\?.*tag=dev-latest/));
    await gateHolds[0]!.hit();
    await crashAndRestart();
    await expectAborted(requestId, before);
  });

  crashPoint('recording', 'inserting the audit row', async () => {
    let hd!: DbHold;
    const { requestId, before } = await driveTo('recording', async () => {
      hd = await holdDb(['lock table deployment_actions in exclusive mode']);
    });
    await hd.waiting(/insert into "deployment_actions"/);
    await crashAndRestart();
    await expectAborted(requestId, before);
  });

  crashPoint('recording', 'audit row inserted, the request row not yet updated', async () => {
    const tagNew = holdGate('POST', /\/images\/.+\/tag\?.*tag=dev-latest/);
    const { requestId, before } = await driveTo('taggingNew', () => {});
    await tagNew.hit();
    // The request row is locked: the snapshot of `recording` and the row's action id both wait,
    // while the audit row is inserted.
    const hd = await holdDb(['select 1 from self_update_status where request_id = $1 for update'], [[requestId]]);
    tagNew.release();
    await hd.waiting(/"action_id"/);
    await crashAndRestart();
    await expectAborted(requestId, before);
  });

  crashPoint('removingLeftover', 'removing a leftover helper', async () => {
    const { requestId, before } = await driveTo('removingLeftover', () => holdGate('DELETE', new RegExp(`/containers/${HELPER}`)));
    await gateHolds[0]!.hit();
    await crashAndRestart();
    await expectAborted(requestId, before);
    expect((await query(`select status, detail from deployment_actions where kind = 'self-update' order by created_at desc limit 1`))[0]).toMatchObject({ status: 'failed' });
  });

  crashPoint('spawning', 'creating the helper', async () => {
    const { requestId, before } = await driveTo('spawning', () => holdGate('POST', /\/containers\/create\?name=installer-self-updater/));
    await gateHolds[0]!.hit();
    await crashAndRestart();
    await expectAborted(requestId, before);
  });

  crashPoint('spawning', 'helper created, not yet started', async () => {
    const { requestId, before } = await driveTo('spawning', () => holdGate('POST', /\/containers\/[0-9a-f]{64}\/start/));
    await gateHolds[0]!.hit();
    await crashAndRestart();
    await expectAborted(requestId, before, /^interrupted: the backend restarted during preflight/);
  });

  crashPoint('undoing', 'putting back what preflight changed after the helper could not start', async () => {
    const create = holdGate('POST', /\/containers\/create\?name=installer-self-updater/);
    const { requestId, before } = await driveTo('spawning', () => {});
    const held = await create.hit();
    const undo = holdGate('POST', /\/images\/.+\/tag\?.*tag=dev-latest/);
    const untag = holdGate('DELETE', /\/images\//);
    held.fail(500, 'injected: no helper today');
    await Promise.race([undo.hit(), untag.hit()]);
    await waitForChartState(i.baseUrl, i.token(), 'selfUpdate', requestId, 'undoing');
    await crashAndRestart();
    await expectAborted(requestId, before);
  });

  crashPoint('aborted', 'a failed pull, the outcome not yet stored', async () => {
    const pull = holdGate('POST', /\/images\/create\?/);
    const { requestId, before } = await driveTo('pulling', () => {});
    const held = await pull.hit();
    const hd = await holdDb(['select 1 from self_update_status where request_id = $1 for update'], [[requestId]]);
    held.fail(500, 'injected: the registry is gone');
    await hd.waiting(/update "self_update_status"/);
    await crashAndRestart();
    await expectAborted(requestId, before);
  });

  crashPoint('helperRunning', 'helper started, the request not yet marked helper-running', async () => {
    const target = images.digests.get('good-1')!;
    const create = holdGate('POST', /\/containers\/create\?name=installer-self-updater/);
    const { requestId } = await driveTo('spawning', () => {});
    await create.hit();
    await holdDb(['select 1 from self_update_status where request_id = $1 for update'], [[requestId]]);
    create.release();
    // The helper runs: the backend is killed before it could write that down.
    const until = Date.now() + 30_000;
    while ((await run('docker', ['inspect', '-f', '{{.State.Status}}', HELPER])).stdout.trim() !== 'running') {
      if (Date.now() > until) throw new Error(`${HELPER} never ran`);
      await new Promise((r) => setTimeout(r, 100));
    }
    await i.kill();
    await releaseHolds();
    // The helper switches the stack to the target; the backend that comes up reconciles.
    expect(Number((await docker(['wait', HELPER], { timeoutMs: 300_000 })).trim())).toBe(0);
    await i.waitHealthy(180_000);
    await i.login();
    let row: { phase: string; detail: string | null; helper_container_id: string | null } | undefined;
    await eventually(async () => {
      [row] = await query<NonNullable<typeof row>>(`select phase, detail, helper_container_id from self_update_status where request_id = $1`, [requestId]);
      return row && row.phase !== 'preflight' && row.phase !== 'helper-running';
    }, `request ${requestId} to end`, 120_000, 500).catch(() => {});
    expect(row?.phase, JSON.stringify(row)).toBe('completed');
    expect(((await i.call('GET', '/api/version')).body as { digest: string }).digest).toBe(target);
    const audit = await query<{ status: string; target_digest: string }>(`select status, target_digest from deployment_actions where kind = 'self-update' order by created_at desc limit 1`);
    expect(audit[0]).toMatchObject({ status: 'completed', target_digest: target });
    await expectQuiet();
  }, 600_000);

  it('reports the crash points: every one converged', () => {
    console.log(tally.summary());
    expect(tally.injected).toBeGreaterThanOrEqual(covered.size);
    expect(tally.converged).toBe(tally.injected);
  });
});

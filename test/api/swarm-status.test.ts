// The platform's runtime in the reads (PLATFORM_RUNTIME): with `swarm`, the status carries the
// Swarm's nodes, the stack's services and tasks from the platform's row (or why there are none), and
// the update check and the diagnostics bundle name the runtime; with `compose` (the default) they
// name it too and the status has no Swarm part. The observer here is a stand-in that serves each
// refresh request with the rows a test sets (the real one on a real Swarm: test/e2e/swarm-observed.test.ts).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { beginObservation, OBSERVED_CHANNEL, writeObserved, type ObservedCondition, type ObservedData, type ObservedKey } from '../../src/state/observed.ts';
import type { SwarmObservation } from '../../src/contracts/swarm.ts';

const at = () => new Date().toISOString();
const reachable: ObservedCondition = { type: 'EngineReachable', status: 'True', reason: 'EngineAnswered', message: 'the engine answered', observedAt: at() };

const SWARM: SwarmObservation = {
  nodes: [
    { id: 'n1', hostname: 'vm', role: 'manager', leader: true, state: 'ready', availability: 'active', managerReachability: 'reachable', engineVersion: '26.1.5', address: '10.0.0.1', message: null },
    { id: 'n2', hostname: 'w1', role: 'worker', leader: false, state: 'down', availability: 'drain', managerReachability: null, engineVersion: '26.1.5', address: '10.0.0.2', message: 'heartbeat failure' },
  ],
  services: [
    { id: 's1', name: 'stk_web', service: 'web', mode: 'replicated', desiredReplicas: 2, runningReplicas: 1, image: 'r/web:1', digest: 'sha256:aa', updateState: 'rollback_completed', updateMessage: 'rolled back' },
  ],
  tasks: [
    { id: 't1', serviceId: 's1', service: 'web', slot: 1, nodeId: 'n1', node: 'vm', state: 'running', desiredState: 'running', error: null, message: 'started', timestamp: at(), createdAt: at(), containerId: 'c1', image: 'r/web:1', digest: 'sha256:aa', current: true },
    { id: 't2', serviceId: 's1', service: 'web', slot: 2, nodeId: null, node: null, state: 'pending', desiredState: 'running', error: 'no suitable node', message: 'pending task scheduling', timestamp: at(), createdAt: at(), containerId: null, image: 'r/web:1', digest: 'sha256:aa', current: true },
    { id: 't3', serviceId: 's1', service: 'web', slot: 2, nodeId: 'n2', node: 'w1', state: 'failed', desiredState: 'shutdown', error: 'task: non-zero exit (1)', message: 'started', timestamp: at(), createdAt: at(), containerId: 'c3', image: 'r/web:1', digest: 'sha256:aa', current: false },
  ],
};

/** A stand-in observer: serves each refresh request with what `rows` holds for the key. */
class RowServer {
  private unlisten: (() => Promise<void>) | undefined;
  constructor(
    private readonly t: TestApp,
    public rows: Partial<{ [K in ObservedKey]: { data: ObservedData[K]; conditions: ObservedCondition[] } }>,
  ) {}
  async start(): Promise<void> {
    this.unlisten = await this.t.db.database.listen(OBSERVED_CHANNEL, (key) => void this.serve(key as ObservedKey));
  }
  private async serve(key: ObservedKey): Promise<void> {
    const row = this.rows[key];
    if (!row) return;
    const db = this.t.db.database.db;
    const begun = await beginObservation(db, key);
    await writeObserved(db, key, { data: row.data as never, conditions: row.conditions, ...begun });
  }
  stop = () => this.unlisten?.();
}

/** Every row the status, the check and the bundle read, the platform's as given. */
const rowsWith = (platform: ObservedData['platform'], platformConditions: ObservedCondition[]): RowServer['rows'] => ({
  platform: { data: platform, conditions: platformConditions },
  installer: { data: { inContainer: false, image: null, tag: null, digest: null, imageId: null, containerId: null }, conditions: [reachable] },
  engine: { data: { reachable: true, facts: { version: '26.1.5' }, installerContainers: [] }, conditions: [reachable] },
  platformEnv: { data: { sealed: 'sealed', keys: ['A'] }, conditions: [] },
  channel: { data: { channel: 'dev', currentDigest: 'sha256:1', remoteDigest: 'sha256:1', composeChanged: false, errors: [] }, conditions: [] },
});

const swarmRow = (project: string): ObservedData['platform'] => ({
  project,
  runtime: 'swarm',
  containers: [{ name: 'stk_web.1.t1', service: 'web', state: 'running', health: null, image: 'r/web:1', digest: 'sha256:aa', since: null }],
  services: ['web'],
  swarm: SWARM,
});

async function get(t: TestApp, url: string): Promise<Record<string, unknown>> {
  const res = await t.app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${await t.token('admin')}` } });
  expect(res.statusCode, res.body).toBe(200);
  return JSON.parse(res.body) as Record<string, unknown>;
}

let swarm: { t: TestApp; rows: RowServer };
let compose: { t: TestApp; rows: RowServer };

async function appWith(env: Record<string, string>, platform: (project: string) => ObservedData['platform']) {
  // No real observer: the stand-in is the only writer of observed rows, and always fresh (max age 0).
  const t = await startTestApp({ observer: false, env: { OBSERVED_MAX_AGE_SECONDS: '0', ...env } });
  const rows = new RowServer(t, rowsWith(platform(t.settings.PLATFORM_PROJECT), [reachable]));
  await rows.start();
  return { t, rows };
}

beforeAll(async () => {
  [swarm, compose] = await Promise.all([
    appWith({ PLATFORM_RUNTIME: 'swarm', PLATFORM_PROJECT: 'stk' }, swarmRow),
    appWith({}, (project) => ({ project, runtime: 'compose', containers: [], services: ['web'] })),
  ]);
});
afterAll(async () => {
  for (const a of [swarm, compose]) {
    await a?.rows.stop();
    await a?.t.close();
  }
});

describe('PLATFORM_RUNTIME=swarm', () => {
  it('GET /api/deployment/status: the runtime, the nodes, services and tasks as observed, beside the containers', async () => {
    const status = await get(swarm.t, '/api/deployment/status');
    expect(status).toMatchObject({ project: 'stk', runtime: 'swarm', containers: [{ name: 'stk_web.1.t1' }] });
    // Every field of every view passes the response schema.
    expect(status.swarm).toEqual(SWARM);
    expect(status.swarmError).toBeUndefined();
  });

  it('GET /api/deployment/status: an engine that is no manager leaves no Swarm and says why', async () => {
    const cause = "the engine is not a Swarm manager, so the stack cannot be read from it: This node is not a swarm manager. Worker nodes can't be used to view or modify cluster state.";
    swarm.rows.rows.platform = {
      data: { project: 'stk', runtime: 'swarm', containers: [], services: ['web'], engineError: cause, swarmError: cause },
      conditions: [reachable, { type: 'SwarmReachable', status: 'False', reason: 'NotAManager', message: cause, observedAt: at() }],
    };
    try {
      const status = await get(swarm.t, '/api/deployment/status');
      expect(status).toMatchObject({ runtime: 'swarm', containers: [], swarmError: cause, engineError: cause });
      expect(status.swarm).toBeUndefined();
    } finally {
      swarm.rows.rows.platform = { data: swarmRow('stk'), conditions: [reachable] };
    }
  });

  it('GET /api/deployment/status: a row observed under the Compose runtime holds no Swarm', async () => {
    swarm.rows.rows.platform = { data: { project: 'stk', containers: [], services: ['web'] }, conditions: [reachable] };
    try {
      const status = await get(swarm.t, '/api/deployment/status');
      expect(status).toMatchObject({ runtime: 'swarm', swarmError: expect.stringContaining('last observed as a Compose project') });
      expect(status.swarm).toBeUndefined();
    } finally {
      swarm.rows.rows.platform = { data: swarmRow('stk'), conditions: [reachable] };
    }
  });

  it('the update check and the diagnostics bundle name the runtime; the bundle holds the Swarm', async () => {
    expect(await get(swarm.t, '/api/system/self-update-check')).toMatchObject({ platformRuntime: 'swarm', updateAvailable: false });
    const bundle = await get(swarm.t, '/api/system/diagnostics');
    expect(bundle.platformRuntime).toBe('swarm');
    expect(bundle.platform).toMatchObject({ project: 'stk', swarm: SWARM });
  });
});

describe('PLATFORM_RUNTIME=compose (the default)', () => {
  it('the status says compose and has no Swarm part; the check and the bundle say compose', async () => {
    const status = await get(compose.t, '/api/deployment/status');
    expect(status.runtime).toBe('compose');
    expect('swarm' in status || 'swarmError' in status).toBe(false);
    expect(await get(compose.t, '/api/system/self-update-check')).toMatchObject({ platformRuntime: 'compose' });
    const bundle = await get(compose.t, '/api/system/diagnostics');
    expect(bundle.platformRuntime).toBe('compose');
    expect(bundle.platform).not.toHaveProperty('swarm');
  });
});

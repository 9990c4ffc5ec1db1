// The platform's jobs on the rig's real multi-node Swarm (docs/adr/0056-platform-on-a-swarm.md):
// the machine's engine is the manager, two worker engines run in privileged containers. A platform
// of three services (web: three replicas with a health check; worker: two; agent: global) is
// deployed by the deploy job, then restarted, stopped and started while a worker is drained, and
// while a worker is killed; and the failures a Swarm meets end the job failed with their cause: a
// task that never starts, and an update the Swarm rolled back itself. After each job the engine's
// state is what its outcome says.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { docker, REGISTRY, run, uniqueName } from '../helpers/e2e/rig.ts';
import { followJob, requestJob, requestJobAndFollow } from '../helpers/e2e/jobs.ts';
import { killWorker, reviveWorker, setAvailability, waitReady, WORKERS } from '../helpers/e2e/swarm-rig.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { ROOT } from '../helpers/shared/process.ts';
import { putSetting } from '../../src/state/settings.ts';
import { isPlatformProcessOf } from '../../src/adapters/processes.ts';

const FIXTURE = path.join(ROOT, 'test/fixtures/swarm-platform');
const stack = uniqueName('swarmt');
const image = `${REGISTRY}/${stack}/busybox:1`;
let t: TestApp;
let platformDir: string;

interface Task {
  id: string;
  service: string;
  node: string;
  desired: string;
  state: string;
}

/** The stack's tasks as `docker stack ps` reports them (the manager's view across nodes). */
async function tasks(): Promise<Task[]> {
  const out = await docker(['stack', 'ps', stack, '--no-trunc', '--format', '{{json .}}']);
  return out.trim().split('\n').filter(Boolean).map((l) => {
    const r = JSON.parse(l) as { ID: string; Name: string; Node: string; DesiredState: string; CurrentState: string };
    return { id: r.ID, service: r.Name.replace(`${stack}_`, '').replace(/\..*$/, ''), node: r.Node, desired: r.DesiredState.toLowerCase(), state: r.CurrentState.split(' ')[0]!.toLowerCase() };
  });
}
const runningOf = async (service: string) => (await tasks()).filter((x) => x.service === service && x.desired === 'running' && x.state === 'running');

interface ServiceSpec {
  Spec: { Mode: { Replicated?: { Replicas: number }; Global?: object }; TaskTemplate: { ContainerSpec: { Image: string }; Placement?: { Constraints?: string[] } }; UpdateConfig?: { Order?: string } };
  UpdateStatus?: { State: string };
}
const inspect = async (service: string): Promise<ServiceSpec> => JSON.parse(await docker(['service', 'inspect', `${stack}_${service}`]))[0];
const inspectRaw = async (service: string): Promise<{ Spec: { TaskTemplate: { ContainerSpec: { Secrets?: { SecretName: string }[] } } } }> => JSON.parse(await docker(['service', 'inspect', `${stack}_${service}`]))[0];

/** Waits until the service runs `n` tasks, all in the running state. */
const converged = (service: string, n: number, timeoutMs = 90_000) =>
  eventually(async () => ((await runningOf(service)).length === n ? runningOf(service) : null), `${stack}_${service} to run ${n} tasks`, timeoutMs, 500);

async function stopped(): Promise<{ service: string; replicas: number | null }[]> {
  return t.db.database.db.selectFrom('platform_stopped_services').select(['service', 'replicas']).where('stack', '=', stack).orderBy('service').execute();
}

beforeAll(async () => {
  await waitReady();
  await docker(['tag', 'installer-rig/busybox:latest', image]);
  await docker(['push', '-q', image]);
  await docker(['image', 'rm', image]);
  const templates = mkdtempSync(path.join(tmpdir(), 'swarm-templates-'));
  copyFileSync(path.join(FIXTURE, 'docker-compose.yml'), path.join(templates, 'docker-compose.yml'));
  writeFileSync(path.join(templates, '.env.template'), `${readFileSync(path.join(FIXTURE, '.env.template'), 'utf8')}PLATFORM_IMAGE=${image}\n`);
  platformDir = mkdtempSync(path.join(tmpdir(), 'swarm-platform-'));
  t = await startTestApp({
    controllers: true,
    env: { PLATFORM_RUNTIME: 'swarm', PLATFORM_DIR: platformDir, PLATFORM_PROJECT: stack, PLATFORM_TEMPLATES_URL: templates, PLATFORM_CONVERGE_TIMEOUT_SECONDS: '20' },
  });
  await putSetting(t.db.database.db, 'vmUser', 'alice', 'admin');
});

afterAll(async () => {
  await t?.close();
  for (const w of WORKERS) {
    await reviveWorker(w).catch(() => {});
    await setAvailability(w, 'active').catch(() => {});
  }
  await run('docker', ['stack', 'rm', stack]);
  await run('docker', ['image', 'rm', image]);
});

describe('jobs on a multi-node Swarm', () => {
  it('deploy renders the stack from the templates and .env, pulls, pins the digest and spreads the replicas over the nodes', async () => {
    const { events, finished } = await requestJobAndFollow(t, 'deploy');
    expect(finished.outcome, JSON.stringify(events.slice(-8))).toBe('completed');
    expect(events.filter((e) => e.event === 'phase').map((e) => e.data.phase)).toEqual(['started', 'prepare', 'pull', 'up', 'prune']);
    expect(events.find((e) => e.data.phase === 'up')?.data.command).toContain(`docker stack deploy --detach=false --prune --resolve-image never --with-registry-auth -c - ${stack}`);
    const web = await converged('web', 3);
    expect(new Set(web.map((x) => x.node)).size).toBe(3);
    expect(await converged('worker', 2)).toHaveLength(2);
    expect(await converged('agent', 3)).toHaveLength(3);
    // Pinned: every node runs the digest the manager pulled and checked.
    const digest = JSON.parse(await docker(['image', 'inspect', image]))[0].RepoDigests[0].split('@')[1];
    expect((await inspect('web')).Spec.TaskTemplate.ContainerSpec.Image).toBe(`${image}@${digest}`);
    // Rendered from the templates' .env, with the VM user.
    expect(readFileSync(path.join(platformDir, '.env'), 'utf8')).toContain('ADMIN_EMAIL=alice@example.invalid');
    expect(JSON.stringify(JSON.parse(await docker(['service', 'inspect', `${stack}_web`]))[0].Spec.TaskTemplate.ContainerSpec.Env)).toContain('ADMIN_EMAIL=alice@example.invalid');
  });

  it('pull fetches on the manager, then on every other node that runs a task, through one-shot jobs that run nothing of the image', async () => {
    const nodesOfWeb = new Set((await runningOf('web')).map((x) => x.node));
    const { finished, events } = await requestJobAndFollow(t, 'pull', ['web']);
    expect(finished.outcome, JSON.stringify(events.slice(-8))).toBe('completed');
    const pulledOn = events.map((e) => /^pulled \S+ on node (\S+)$/.exec(String(e.data.line ?? ''))?.[1]).filter(Boolean);
    const manager = (await docker(['info', '--format', '{{.Name}}'])).trim();
    expect(new Set(pulledOn)).toEqual(new Set([...nodesOfWeb].filter((n) => n !== manager)));
    expect(pulledOn.length).toBeGreaterThan(0);
    // The one-shot jobs are gone, and the stack's services did not move.
    expect((await docker(['service', 'ls', '--filter', `name=${stack}-pull-`, '--format', '{{.Name}}'])).trim()).toBe('');
    expect(await converged('web', 3)).toHaveLength(3);
  });

  describe('while a worker is drained', () => {
    beforeAll(async () => {
      await setAvailability(WORKERS[0], 'drain');
      await eventually(async () => !(await tasks()).some((x) => x.node === WORKERS[0] && x.desired === 'running'), `no task left on ${WORKERS[0]}`, 90_000, 500);
    });
    afterAll(async () => {
      await setAvailability(WORKERS[0], 'active');
    });

    it('deploy goes through with the node drained: the templates again, and every task on the nodes still active', async () => {
      const { finished, events } = await requestJobAndFollow(t, 'deploy');
      expect(finished.outcome, JSON.stringify(events.slice(-8))).toBe('completed');
      expect(await converged('web', 3)).toHaveLength(3);
      expect(await converged('worker', 2)).toHaveLength(2);
      expect((await tasks()).some((x) => x.node === WORKERS[0] && x.desired === 'running')).toBe(false);
    });

    it('restart replaces every web task start-first, on the nodes still active', async () => {
      const before = new Set((await runningOf('web')).map((x) => x.id));
      const { events, finished } = await requestJobAndFollow(t, 'restart', ['web']);
      expect(finished.outcome, JSON.stringify(events.slice(-8))).toBe('completed');
      expect(events.some((e) => String(e.data.line ?? '').includes(`restarting ${stack}_web start-first`))).toBe(true);
      const after = await converged('web', 3);
      expect(after.some((x) => before.has(x.id))).toBe(false);
      expect(after.some((x) => x.node === WORKERS[0])).toBe(false);
      expect((await inspect('web')).Spec.UpdateConfig?.Order).toBe('start-first');
    });

    it('stop scales the services to zero and keeps their counts; compose-up restores them', async () => {
      const stop = await requestJobAndFollow(t, 'stop');
      expect(stop.finished.outcome, JSON.stringify(stop.events.slice(-8))).toBe('completed');
      expect(await stopped()).toEqual([{ service: 'agent', replicas: null }, { service: 'web', replicas: 3 }, { service: 'worker', replicas: 2 }]);
      expect((await inspect('web')).Spec.Mode.Replicated?.Replicas).toBe(0);
      await eventually(async () => (await tasks()).every((x) => x.desired !== 'running'), 'every task to be stopped', 60_000, 500);
      const up = await requestJobAndFollow(t, 'compose-up');
      expect(up.finished.outcome, JSON.stringify(up.events.slice(-8))).toBe('completed');
      expect(await converged('web', 3)).toHaveLength(3);
      expect(await converged('worker', 2)).toHaveLength(2);
      // The global agent is back on the two active nodes (the drained one takes no task).
      expect(await converged('agent', 2)).toHaveLength(2);
      expect(await stopped()).toEqual([]);
    });
  });

  describe('while a worker is killed', () => {
    it('a restart goes on with the node lost mid-update, and the replicas end on the nodes left', async () => {
      await waitReady();
      const jobId = await requestJob(t, 'restart', ['web']);
      // The node is lost as the update starts a new task on it (or, if the update places none
      // there, as it ends): the Swarm's updater may then wait for that task for ever, and the job
      // starts the update over on the nodes left.
      await eventually(async () => (await inspect('web')).UpdateStatus?.State === 'updating', 'the web update to begin', 30_000, 100);
      const old = new Set((await tasks()).map((x) => x.id));
      await eventually(async () => {
        const starting = (await tasks()).some((x) => !old.has(x.id) && x.node === WORKERS[1] && x.desired === 'running' && x.state !== 'running');
        return starting || (await inspect('web')).UpdateStatus?.State !== 'updating';
      }, 'a new web task starting on the worker', 60_000, 100);
      await killWorker(WORKERS[1]);
      const { finished, events } = await followToEnd(jobId);
      expect(finished.outcome, JSON.stringify(events.slice(-8))).toBe('completed');
      const web = await converged('web', 3);
      expect(web.some((x) => x.node === WORKERS[1])).toBe(false);
    });

    it('stop and compose-up while the node is down: the services stop and come back on the nodes left', async () => {
      const stop = await requestJobAndFollow(t, 'stop', ['web', 'worker']);
      expect(stop.finished.outcome, JSON.stringify(stop.events.slice(-8))).toBe('completed');
      await eventually(async () => (await runningOf('web')).length === 0 && (await runningOf('worker')).length === 0, 'web and worker to stop', 60_000, 500);
      const up = await requestJobAndFollow(t, 'compose-up', ['web', 'worker']);
      expect(up.finished.outcome, JSON.stringify(up.events.slice(-8))).toBe('completed');
      expect((await converged('web', 3)).some((x) => x.node === WORKERS[1])).toBe(false);
      expect(await converged('worker', 2)).toHaveLength(2);
    });

    afterAll(async () => {
      await reviveWorker(WORKERS[1]);
    });
  });

  it('kill stops the named service at once and keeps its count for the next start', async () => {
    const { finished, events } = await requestJobAndFollow(t, 'kill', ['worker']);
    expect(finished.outcome, JSON.stringify(events.slice(-8))).toBe('completed');
    expect(await stopped()).toEqual([{ service: 'worker', replicas: 2 }]);
    expect((await runningOf('worker')).length).toBe(0);
    expect((await runningOf('web')).length).toBe(3);
    const up = await requestJobAndFollow(t, 'compose-up', ['worker']);
    expect(up.finished.outcome, JSON.stringify(up.events.slice(-8))).toBe('completed');
    expect(await converged('worker', 2)).toHaveLength(2);
  });

  it('a secret from the .env is a Swarm secret named by its digest; a new value moves the service to a new secret and the old one goes', async () => {
    const name = (value: string) => `${stack}_api_token_${createHash('sha256').update(value).digest('hex').slice(0, 12)}`;
    const secretsOf = async () => (await inspectRaw('worker')).Spec.TaskTemplate.ContainerSpec.Secrets?.map((x) => x.SecretName) ?? [];
    expect(await secretsOf()).toEqual([name('first-token')]);
    const operator = { authorization: `Bearer ${await t.token('operator')}` };
    const put = await t.app.inject({ method: 'PUT', url: '/api/deployment/config', headers: operator, payload: { set: { API_TOKEN: 'second-token' } } });
    expect(put.statusCode, put.body).toBe(202);
    const { finished, events } = await requestJobAndFollow(t, 'apply-config', ['worker']);
    expect(finished.outcome, JSON.stringify(events.slice(-8))).toBe('completed');
    expect(await secretsOf()).toEqual([name('second-token')]);
    expect(await converged('worker', 2)).toHaveLength(2);
    const left = (await docker(['secret', 'ls', '--filter', `label=com.docker.stack.namespace=${stack}`, '--format', '{{.Name}}'])).trim().split('\n');
    expect(left).toEqual([name('second-token')]);
    // The value is in no job output.
    expect(JSON.stringify(events)).not.toContain('second-token');
  });

  it('an update the Swarm rolls back (failure_action: rollback) fails the job with the Swarm\'s reason', async () => {
    const operator = { authorization: `Bearer ${await t.token('operator')}` };
    const put = await t.app.inject({ method: 'PUT', url: '/api/deployment/config', headers: operator, payload: { set: { WEB_MODE: 'broken' } } });
    expect(put.statusCode, put.body).toBe(202);
    const before = (await inspect('web')).Spec.TaskTemplate.ContainerSpec.Image;
    const { finished, events } = await requestJobAndFollow(t, 'apply-config', ['web']);
    expect(finished.outcome, JSON.stringify(events.slice(-8))).toBe('failed');
    expect(String(finished.detail)).toMatch(new RegExp(`^recreate failed: the Swarm rolled back the update of ${stack}_web \\(rollback_\\w+\\): `));
    // The Swarm put the previous spec back: web still runs three healthy tasks.
    expect(await converged('web', 3)).toHaveLength(3);
    expect((await inspect('web')).Spec.TaskTemplate.ContainerSpec.Image).toBe(before);
  });

  it('a task that never starts fails the job past the convergence bound, naming the task\'s error', async () => {
    const operator = { authorization: `Bearer ${await t.token('operator')}` };
    // A constraint no node meets: the new worker tasks stay pending.
    const compose = path.join(platformDir, 'docker-compose.yml');
    writeFileSync(compose, readFileSync(compose, 'utf8').replace('      replicas: 2\n', '      replicas: 2\n      placement:\n        constraints: ["node.labels.no-such-label==x"]\n'));
    const put = await t.app.inject({ method: 'PUT', url: '/api/deployment/config', headers: operator, payload: { set: { WEB_MODE: 'ok' } } });
    expect(put.statusCode, put.body).toBe(202);
    const jobId = await requestJob(t, 'compose-up', ['worker']);
    // While it waits, its row names the `docker stack deploy` it runs: a backend restarted now stops
    // that CLI before it closes the job as interrupted (stopLeftover), as it stops a compose run.
    const pid = await eventually(async () => {
      const row = await t.db.database.db.selectFrom('deployment_job_status').select('runner_pid').where('job_id', '=', jobId).executeTakeFirst();
      return row?.runner_pid && isPlatformProcessOf(row.runner_pid, stack) ? row.runner_pid : null;
    }, 'the job to record the CLI it runs', 20_000, 100);
    expect(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').slice(0, 3)).toEqual(['docker', 'stack', 'deploy']);
    const { finished, events } = await followToEnd(jobId);
    expect(finished.outcome, JSON.stringify(events.slice(-8))).toBe('failed');
    expect(String(finished.detail)).toContain('up-pulled failed: the stack');
    expect(String(finished.detail)).toContain('did not converge: no progress within 20 s');
    expect(String(finished.detail)).toMatch(/no suitable node/);
  });
});

/** Follows a job already requested to its `finished` event. */
async function followToEnd(jobId: string) {
  const events = await followJob(t, jobId);
  return { events, finished: events.at(-1)!.data };
}

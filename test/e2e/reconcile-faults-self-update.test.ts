// A self-update whose reconcile throws, on the real engine, registry and Postgres
// (docs/adr/0042-reconcile-contract.md): the backend runs in this process as if in a container of
// a compose project of its own (a backend container of the running build, and the project's
// Postgres that preflight's pg_dump runs in); its preflight pulls, tags, stages and starts a real
// helper container. A statement fails before the database receives it:
// - the end of preflight (the row becomes helper-running with the helper's id): written on a retry,
//   the chart not run again, so one helper container and one audit row;
// - the opening of the outcome's run: the outcome is recorded on the retries, once.
// The helper is the channel's newest build, a small image without the switch script: it exits at
// once, which is an outcome like any other.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ROOT } from '../helpers/shared/process.ts';
import { docker, REGISTRY, retryOnSharedEngine, run } from '../helpers/e2e/rig.ts';
import { startTestApp, TEST_SECRETS, type TestApp } from '../helpers/api/app.ts';
import { createTestDatabase } from '../helpers/shared/db.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { StatementFaults } from '../helpers/shared/statement-faults.ts';
import { listSelfUpdates } from '../../src/state/self-update.ts';
import { HELPER_NAME } from '../../src/adapters/self-update-helper.ts';
import type { RuntimePort } from '../../src/contracts/ports.ts';

const ns = `rfsu-${randomBytes(3).toString('hex')}`;
const registry = `${REGISTRY}/${ns}`;
const repo = `${registry}/installer`;
const project = `rfsu-${randomBytes(3).toString('hex')}`;
const dir = mkdtempSync(path.join(tmpdir(), 'rfsu-'));
const composeFile = path.join(dir, 'project.yml');
const shipped = readFileSync(path.join(ROOT, 'deploy/docker-compose.dev.yml'), 'utf8');
const service = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'amy' };
const backoff = { baseMs: 50, maxMs: 200, attempts: 3 };
const faults = new StatementFaults();
const digests = new Map<string, string>();
let t: TestApp;

const compose = (args: string[]) => docker(['compose', '-p', project, '-f', composeFile, ...args], { timeoutMs: 5 * 60_000 });

/** A small image that ships `composeText` where an installer image ships its dev compose file, pushed as `tag`. */
async function buildAndPush(tag: string, composeText: string): Promise<string> {
  const ref = `${repo}:${tag}`;
  const ctx = mkdtempSync(path.join(dir, 'ctx-'));
  writeFileSync(path.join(ctx, 'docker-compose.dev.yml'), composeText);
  writeFileSync(
    path.join(ctx, 'Dockerfile'),
    `FROM installer-rig/busybox:latest\nLABEL io.installer.test=${ns}-${tag}\nCOPY docker-compose.dev.yml /usr/src/app/deploy/docker-compose.dev.yml\n` +
      `CMD ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]\n`,
  );
  await retryOnSharedEngine(`building ${ref}`, async () => {
    await docker(['build', '-q', '-t', ref, ctx], { env: { DOCKER_BUILDKIT: '0' } });
    await docker(['push', '-q', ref]);
  });
  const d = (await docker(['image', 'inspect', '--format', '{{range .RepoDigests}}{{println .}}{{end}}', ref])).split('\n').find((l) => l.startsWith(`${repo}@`))!.split('@')[1]!;
  digests.set(tag, d);
  return d;
}

/** Containers named as the helper that the engine created since `since` (epoch seconds). */
async function helpersCreatedSince(since: string): Promise<number> {
  const until = String(Math.ceil(Date.now() / 1000) + 1);
  const out = await docker(['events', '--since', since, '--until', until, '--filter', 'type=container', '--filter', 'event=create', '--filter', `container=${HELPER_NAME}`, '--format', '{{.ID}}']);
  return out.split('\n').filter(Boolean).length;
}

beforeAll(async () => {
  await buildAndPush('dev-41', shipped);
  await buildAndPush('dev-latest', `${shipped}# shipped by the newer build ${ns}\n`);
  await docker(['rmi', `${repo}:dev-latest`]);
  // The installer's own compose project: its backend (the running build) and its Postgres.
  writeFileSync(
    composeFile,
    [
      'services:',
      '  backend:',
      `    image: ${repo}:dev-41`,
      '  postgres:',
      '    image: installer-rig/postgres:15',
      '    environment:',
      '      POSTGRES_HOST_AUTH_METHOD: trust',
      '    volumes:',
      '      - backups:/backups',
      'volumes:',
      '  backups:',
      '',
    ].join('\n'),
  );
  await compose(['up', '-d']);
  await eventually(async () => (await run('docker', ['compose', '-p', project, '-f', composeFile, 'exec', '-T', 'postgres', 'pg_isready', '-U', 'postgres'])).code === 0, 'the project\'s Postgres', 60_000, 250);
  const backendId = (await compose(['ps', '-q', 'backend'])).trim();
  const imageId = (await docker(['inspect', '--format', '{{.Image}}', backendId])).trim();
  // The installer's database; preflight's pg_dump runs in the project's Postgres, on a database of that name.
  const db = await createTestDatabase();
  await compose(['exec', '-T', 'postgres', 'createdb', '-U', 'postgres', db.name]);
  const runtime: RuntimePort = {
    version: async () => ({ inContainer: true, image: `${repo}:dev-41`, tag: 'dev-41', digest: digests.get('dev-41')!, imageId, containerId: backendId }),
  };
  const workDir = path.join(dir, 'work');
  mkdirSync(workDir);
  writeFileSync(path.join(workDir, 'docker-compose.dev.yml'), shipped);
  t = await startTestApp({
    db,
    runtime,
    env: {
      INSTALLER_REGISTRY: registry, INSTALLER_CHANNEL: 'dev', INSTALLER_PROJECT: project, INSTALLER_WORK_DIR: workDir,
      INSTALLER_COMPOSE_FILE: 'docker-compose.dev.yml', STAGING_ROOT: path.join(dir, 'staging'), OBSERVED_CHANNEL_MAX_AGE_SECONDS: '0',
    },
    controllers: (wired) => wired.controllers.start(['self-update']),
    reconcile: { backoff, db: (d) => faults.wrap(d) },
  });
}, 600_000);

afterAll(async () => {
  faults.disarmAll();
  await t?.close();
  await run('docker', ['rm', '-f', HELPER_NAME]);
  await run('docker', ['compose', '-p', project, '-f', composeFile, 'down', '-v', '-t', '1']);
  const out = await run('docker', ['image', 'ls', '--format', '{{.Repository}}:{{.Tag}}']);
  const refs = out.stdout.split('\n').filter((r) => r.startsWith(`${registry}/`));
  if (refs.length) await run('docker', ['rmi', '-f', ...refs]);
});
beforeEach(() => faults.disarmAll());

const db = () => t.db.database.db;
const post = () => t.app.inject({ method: 'POST', url: '/api/system/self-update', headers: service });

/** The newest request once its outcome is recorded (out of helper-running). */
async function settled() {
  return eventually(async () => {
    const r = (await listSelfUpdates(db()))[0];
    return r && !['requested', 'preflight', 'helper-running'].includes(r.phase) ? r : null;
  }, 'the update\'s outcome', 120_000, 100);
}

describe('a self-update on the real engine whose reconcile throws', () => {
  it('writes the end of preflight on a retry: one helper container, one audit row, the row says it recovered', async () => {
    const since = (Date.now() / 1000).toFixed(3);
    const armed = faults.arm({ kind: 'update', table: 'self_update_status', where: (json: string) => json.includes('"helper_container_id"') });
    const res = await post();
    expect(res.statusCode, res.body).toBe(200);
    const req = await settled();
    expect(armed.fired).toBe(1);
    expect(req.helperContainerId).toMatch(/^[0-9a-f]{64}$/);
    expect(await helpersCreatedSince(since)).toBe(1);
    const audit = await db().selectFrom('deployment_actions').selectAll().where('kind', '=', 'self-update').execute();
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ target_digest: digests.get('dev-latest') });
    const status = await db().selectFrom('self_update_status').select('conditions').where('request_id', '=', req.requestId).executeTakeFirstOrThrow();
    expect((status.conditions as { type: string; status: string; reason: string }[]).find((c) => c.type === 'Reconciled')).toMatchObject({ status: 'True', reason: 'Recovered' });
    // Preflight ran once: the target pulled and tagged, the rollback tag on the running build.
    expect((await docker(['image', 'inspect', '--format', '{{.Id}}', `${repo}:rollback`])).trim()).toBe((await docker(['image', 'inspect', '--format', '{{.Id}}', `${repo}:dev-41`])).trim());
  });

  it('records the outcome once when opening its run throws: one finished event, one audit end', async () => {
    await settled();
    // The outcome's run after the last update is over before the fault is armed.
    await eventually(async () => (await db().selectFrom('reconcile_runs').select('run_id').where('finished_at', 'is', null).execute()).length === 0, 'no run open');
    const armed = faults.arm({ kind: 'insert', table: 'reconcile_runs', times: backoff.attempts - 1 });
    const res = await post();
    expect(res.statusCode, res.body).toBe(200);
    const req = await settled();
    expect(armed.fired).toBe(backoff.attempts - 1);
    const events = await db().selectFrom('deployment_job_events').select(['type', 'payload']).where('job_id', '=', req.jobId!).execute();
    expect(events.filter((e) => e.type === 'finished')).toHaveLength(1);
    const audit = await db().selectFrom('deployment_actions').selectAll().where('kind', '=', 'self-update').where('job_id', '=', req.jobId!).execute();
    expect(audit).toHaveLength(1);
    expect(audit[0]!.status).not.toBe('started');
    // Woken again: nothing more to record.
    await t.wired.controllers.reconcileOutcome();
    expect(await db().selectFrom('deployment_job_events').select('type').where('job_id', '=', req.jobId!).where('type', '=', 'finished').execute()).toHaveLength(1);
  });
});

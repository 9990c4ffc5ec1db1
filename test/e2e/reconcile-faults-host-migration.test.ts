// A host migration job whose reconcile throws, on the real engine, a real systemd host and the real
// Postgres (docs/adr/0042-reconcile-contract.md): it shares the compose jobs' run (runJob), so a
// throw before its chart (its audit row) or after it (its status row at the end) is recorded on the
// row and retried, the script runs once, and the job ends as it would have, each write made once.
// The runner image is the rig's base image with the bundled script where the installer's image has
// it: the same nsenter and bash, without building the whole installer image.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { mkdtempSync, mkdirSync, copyFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { docker, run, uniqueName } from '../helpers/e2e/rig.ts';
import { BASE_IMAGE, hostMigrationEnv, SCRIPT, startSystemdHost, type SystemdHost } from '../helpers/e2e/systemd-host.ts';
import { followJob } from '../helpers/e2e/jobs.ts';
import { eventually } from '../helpers/shared/eventually.ts';
import { StatementFaults, type Fault } from '../helpers/shared/statement-faults.ts';
import { getJob } from '../../src/state/jobs.ts';
import { BUNDLED_SCRIPT } from '../../src/adapters/host-runner.ts';

const image = `${uniqueName('migrate-runner')}:test`;
const scriptPath = '/opt/installer-api/migrate-host.sh';
const faults = new StatementFaults();
let host: SystemdHost;
let t: TestApp;

beforeAll(async () => {
  const context = mkdtempSync(path.join(tmpdir(), 'migrate-runner-'));
  mkdirSync(path.join(context, 'scripts'));
  copyFileSync(SCRIPT, path.join(context, 'scripts', 'migrate-host.sh'));
  writeFileSync(path.join(context, 'Dockerfile'), `FROM ${BASE_IMAGE}\nCOPY scripts/migrate-host.sh ${BUNDLED_SCRIPT}\n`);
  try {
    [host] = await Promise.all([startSystemdHost(), docker(['build', '-q', '-t', image, context])]);
  } finally {
    rmSync(context, { recursive: true, force: true });
  }
  t = await startTestApp({
    controllers: true,
    env: hostMigrationEnv(host, image, scriptPath),
    reconcile: { backoff: { baseMs: 50, maxMs: 200, attempts: 4 }, db: (db) => faults.wrap(db) },
  });
  const admin = { authorization: `Bearer ${await t.token('admin')}` };
  expect((await t.app.inject({ method: 'POST', url: '/api/migrate/vm-user', headers: admin, payload: { vmUser: 'ubuntu' } })).statusCode).toBe(200);
}, 300_000);
afterAll(async () => {
  faults.disarmAll();
  await t?.close();
  await host?.remove();
  await run('docker', ['rmi', image]);
});
beforeEach(() => faults.disarmAll());

const db = () => t.db.database.db;
const has = (...words: string[]) => (json: string) => words.every((w) => json.includes(w));

const STEPS: [string, Fault][] = [
  ['writing its audit row', { kind: 'insert', table: 'deployment_actions' }],
  ['writing its status row at the end', { kind: 'update', table: 'deployment_job_status', where: has('"finished_at"') }],
];

describe('a host migration job whose run throws', () => {
  it.each(STEPS)('recovers from a throw while %s: the script runs once, the job completes, each write made once', async (_step, fault) => {
    const armed = faults.arm(fault);
    const res = await t.app.inject({ method: 'POST', url: '/api/migrate/run-host', headers: { authorization: `Bearer ${await t.token('admin')}` } });
    expect(res.statusCode, res.body).toBe(202);
    const { jobId } = res.json() as { jobId: string };
    const job = await eventually(async () => {
      const j = await getJob(db(), jobId);
      return j && (j.phase === 'completed' || j.phase === 'failed') ? j : null;
    }, 'the migration to end', 120_000, 200);
    expect(armed.fired).toBe(1);
    expect(job, job.detail ?? '').toMatchObject({ phase: 'completed', exitCode: 0, detail: null });
    await eventually(async () => ((await getJob(db(), jobId))?.conditions.find((c) => c.type === 'Reconciled')?.reason === 'Recovered' ? true : null), 'the recovered condition');
    const events = await followJob(t, jobId);
    expect(events.at(-1)).toMatchObject({ event: 'finished', data: { outcome: 'completed', exitCode: 0 } });
    // The chart ran once: each of its phases once, one finished event.
    expect(events.filter((e) => e.event === 'phase').map((e) => e.data.phase)).toEqual(['started', 'copy-script', 'run-script']);
    expect(events.filter((e) => e.event === 'finished')).toHaveLength(1);
    const audit = await db().selectFrom('deployment_actions').selectAll().where('job_id', '=', jobId).execute();
    expect(audit.map((a) => [a.kind, a.status, a.exit_code])).toEqual([['migrate-host', 'completed', 0]]);
    const left = await run('docker', ['ps', '-a', '--filter', 'label=io.installer.role=host-migration', '--format', '{{.Names}}']);
    expect(left.stdout.trim()).toBe('');
  });
});

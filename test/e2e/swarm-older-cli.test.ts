// The platform on the rig's Swarm driven through a docker CLI older than 26.0 (bookworm's 20.10,
// which the rig keeps apart from PATH): its `stack deploy` has no --detach and only submits the
// stack, so the step waits for the services to converge itself, with the same bound on progress
// and the same failure as the CLI's own wait (docs/adr/0056-platform-on-a-swarm.md). The backend
// is a process of its own whose PATH finds that CLI first, as on a host that has it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createTestDatabase, type TestDatabase } from '../helpers/shared/db.ts';
import { runEntry, ROOT, type Running } from '../helpers/shared/process.ts';
import { docker, REGISTRY, run, uniqueName } from '../helpers/e2e/rig.ts';
import { waitReady } from '../helpers/e2e/swarm-rig.ts';
import { parseSse } from '../helpers/shared/sse.ts';
import { createUser } from '../../src/state/users.ts';
import { putSetting } from '../../src/state/settings.ts';

/** Where scripts/rig/setup.sh keeps bookworm's docker CLI. */
const OLD_CLI_DIR = '/var/lib/installer-rig/docker-cli-20.10';
const FIXTURE = path.join(ROOT, 'test/fixtures/swarm-platform');
const stack = uniqueName('swarmold');
const image = `${REGISTRY}/${stack}/busybox:1`;
const BOUND_S = 20;
let db: TestDatabase;
let proc: Running | undefined;
let base: string;
let token: string;
let platformDir: string;

const headers = () => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' });

/** Requests a job and reads its stream to the end: the output lines and how it finished. */
async function job(action: string, services?: string[]) {
  const res = await fetch(`${base}/api/deployment/jobs`, { method: 'POST', headers: headers(), body: JSON.stringify(services ? { action, services } : { action }) });
  expect(res.status, await res.clone().text()).toBe(202);
  const { jobId } = (await res.json()) as { jobId: string };
  const stream = await fetch(`${base}/api/deployment/jobs/${jobId}/logs`, { headers: { ...headers(), accept: 'text/event-stream' }, signal: AbortSignal.timeout(300_000) });
  const events = parseSse(await stream.text());
  return { lines: events.filter((e) => e.event === 'output').map((e) => String(e.data.line)), finished: events.at(-1)!.data };
}

/** The tasks meant to run of a service of the stack, with their states, as the CLI of the machine reports them. */
async function running(service: string): Promise<string[]> {
  const out = await docker(['service', 'ps', `${stack}_${service}`, '--filter', 'desired-state=running', '--format', '{{.CurrentState}}']);
  return out.trim().split('\n').filter(Boolean).map((l) => l.split(' ')[0]!.toLowerCase());
}

beforeAll(async () => {
  const cli = await run(path.join(OLD_CLI_DIR, 'docker'), ['--version']);
  if (cli.code !== 0 || !cli.stdout.includes(' 20.10.')) throw new Error(`the rig's docker CLI 20.10 is not at ${OLD_CLI_DIR} (scripts/rig/setup.sh keeps it): ${cli.stdout}${cli.stderr}`);
  const help = await run(path.join(OLD_CLI_DIR, 'docker'), ['stack', 'deploy', '--help']);
  expect(help.stdout).not.toContain('--detach');
  await waitReady();
  await docker(['tag', 'installer-rig/busybox:latest', image]);
  await docker(['push', '-q', image]);
  const templates = mkdtempSync(path.join(tmpdir(), 'swarm-old-templates-'));
  copyFileSync(path.join(FIXTURE, 'docker-compose.yml'), path.join(templates, 'docker-compose.yml'));
  writeFileSync(path.join(templates, '.env.template'), `${readFileSync(path.join(FIXTURE, '.env.template'), 'utf8')}PLATFORM_IMAGE=${image}\n`);
  platformDir = mkdtempSync(path.join(tmpdir(), 'swarm-old-platform-'));
  db = await createTestDatabase();
  await createUser(db.database.db, { username: 'ops', password: 'ops-password-1', role: 'operator' });
  await putSetting(db.database.db, 'vmUser', 'alice', 'admin');
  proc = runEntry('src/main.ts', {
    PATH: `${OLD_CLI_DIR}:${process.env.PATH ?? '/usr/bin:/bin'}`,
    DATABASE_URL: db.url,
    DATA_DIR: mkdtempSync(path.join(tmpdir(), 'swarm-old-data-')),
    HOST: '127.0.0.1',
    PORT: '0',
    LOG_LEVEL: 'info',
    PLATFORM_RUNTIME: 'swarm',
    PLATFORM_DIR: platformDir,
    PLATFORM_PROJECT: stack,
    PLATFORM_TEMPLATES_URL: templates,
    PLATFORM_CONVERGE_TIMEOUT_SECONDS: String(BOUND_S),
  });
  base = await proc.url;
  const login = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'ops', password: 'ops-password-1' }) });
  token = ((await login.json()) as { token: string }).token;
});

afterAll(async () => {
  await proc?.stop('SIGTERM');
  await run('docker', ['stack', 'rm', stack]);
  await run('docker', ['image', 'rm', image]);
  await db?.drop();
});

describe('a docker CLI whose stack deploy cannot wait (20.10)', () => {
  it('deploy submits the stack, then waits itself until every service runs, writing each count as it changes', async () => {
    const { lines, finished } = await job('deploy');
    expect(finished.outcome, lines.slice(-12).join('\n')).toBe('completed');
    expect(lines).toContain("this docker CLI's stack deploy cannot wait (--detach came with CLI 26.0): the step waits for the services to converge itself, with the same bound");
    // The counts it wrote end with every service whole.
    const last = (service: string) => lines.filter((l) => l.startsWith(`${stack}_${service}: `)).at(-1);
    expect(last('web')).toBe(`${stack}_web: 3/3 tasks running`);
    expect(last('worker')).toBe(`${stack}_worker: 2/2 tasks running`);
    expect(last('agent')).toBe(`${stack}_agent: 3/3 tasks running`);
    // The job ended once the Swarm had them running, not merely submitted.
    expect(await running('web')).toEqual(['running', 'running', 'running']);
    expect(await running('worker')).toEqual(['running', 'running']);
  });

  it('restart and stop/start go through that CLI\'s own service commands, which wait', async () => {
    const before = await docker(['service', 'ps', `${stack}_web`, '--filter', 'desired-state=running', '--format', '{{.ID}}']);
    const restart = await job('restart', ['web']);
    expect(restart.finished.outcome, restart.lines.slice(-12).join('\n')).toBe('completed');
    const after = await docker(['service', 'ps', `${stack}_web`, '--filter', 'desired-state=running', '--format', '{{.ID}}']);
    expect(after.trim().split('\n').filter((id) => before.includes(id))).toEqual([]);
    expect(await running('web')).toEqual(['running', 'running', 'running']);
    const stop = await job('stop', ['worker']);
    expect(stop.finished.outcome, stop.lines.slice(-12).join('\n')).toBe('completed');
    expect(await running('worker')).toEqual([]);
    const start = await job('compose-up', ['worker']);
    expect(start.finished.outcome, start.lines.slice(-12).join('\n')).toBe('completed');
    expect(start.lines.filter((l) => l.startsWith(`${stack}_worker: `)).at(-1)).toBe(`${stack}_worker: 2/2 tasks running`);
    expect(await running('worker')).toEqual(['running', 'running']);
  });

  it('a task that never starts fails the step past the same bound, with the same message, naming the task\'s error', async () => {
    const compose = path.join(platformDir, 'docker-compose.yml');
    writeFileSync(compose, readFileSync(compose, 'utf8').replace('      replicas: 2\n', '      replicas: 2\n      placement:\n        constraints: ["node.labels.no-such-label==x"]\n'));
    const began = Date.now();
    const { lines, finished } = await job('compose-up', ['worker']);
    expect(finished.outcome, lines.slice(-12).join('\n')).toBe('failed');
    expect(String(finished.detail)).toContain(`up-pulled failed: the stack ${stack} did not converge: no progress within ${BOUND_S} s`);
    expect(String(finished.detail)).toMatch(/no suitable node/);
    expect(Date.now() - began).toBeGreaterThanOrEqual(BOUND_S * 1000);
  });
});

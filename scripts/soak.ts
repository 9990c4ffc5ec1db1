// `npm run soak [-- --minutes N]` (default 20, at most 20): the packaged installer stack
// (deploy/docker-compose.yml, images built by scripts/build-image.sh) on a Docker engine of its own,
// driven in a loop while it is hurt: platform jobs and self-updates requested through the API, the
// backend's node process killed with SIGKILL, its Postgres container restarted and the engine
// itself restarted, each at random moments. Then, with everything idle, what must hold (issue
// "Nothing wedges it"; docs/reliability.md, "The soak"):
//   no job, self-update or reconcile run left in flight; a new job and a new self-update accepted
//   (no 409); every action audited once; every job's events numbered 1..n with no gap or repeat and
//   one `finished`; every webhook event delivered, under one key, in its endpoint's order.
// It prints the figures and each check, and exits 1 when one fails.
//
// The engine is private: its own dockerd (data root, exec root, pidfile, socket) in a mount
// namespace of its own whose /run is empty, so that the stack's `/var/run/docker.sock` binds (the
// backend's and the self-update helper's) name this engine and never the host's. Restarting "the
// engine" restarts that one; the host's engine is used only to build the images, which go through
// the local registry. Everything is removed at the end, on failure and on Ctrl-C too.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, openSync, closeSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePort, must, run } from '../test/helpers/e2e/rig.ts';
import { Images } from '../test/helpers/e2e/self-update-rig.ts';
import { firstAdminToken } from '../test/helpers/e2e/first-admin.ts';
import { ROOT } from '../test/helpers/shared/process.ts';

const MAX_MINUTES = 20;
/** Kept for settling and the final checks at the end of the run. */
const FINAL_RESERVE_MS = 5 * 60_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(Math.random() * xs.length)]!;
const out = (line: string) => process.stdout.write(`${line}\n`);
const log = (line: string) => process.stdout.write(`  [${new Date().toISOString().slice(11, 19)}] ${line}\n`);

function minutesArg(argv: string[]): number {
  const i = argv.indexOf('--minutes');
  if (i < 0) return MAX_MINUTES;
  const n = Number(argv[i + 1]);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--minutes must be a positive number, not ${argv[i + 1] ?? 'nothing'}`);
  return Math.min(n, MAX_MINUTES);
}

// ---------------------------------------------------------------------------------------------
// The private engine

class Engine {
  readonly root = mkdtempSync(path.join(tmpdir(), 'soak-'));
  readonly socket = path.join(this.root, 'docker.sock');
  readonly host = `unix://${this.socket}`;
  private child: ChildProcess | null = null;
  private exited: Promise<void> = Promise.resolve();
  private readonly logFile = path.join(this.root, 'dockerd.log');

  constructor() {
    mkdirSync(path.join(this.root, 'data'));
    mkdirSync(path.join(this.root, 'x'));
  }

  running(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  tail(): string {
    return existsSync(this.logFile) ? readFileSync(this.logFile, 'utf8').slice(-3000) : '';
  }

  docker(args: string[], opts: { cwd?: string; timeoutMs?: number; input?: string } = {}): Promise<string> {
    return must('docker', ['-H', this.host, ...args], { timeoutMs: opts.timeoutMs ?? 120_000, ...(opts.cwd ? { cwd: opts.cwd } : {}), ...(opts.input ? { input: opts.input } : {}) });
  }

  /** Starts dockerd in a new mount namespace with an empty /run; resolves once it answers. */
  async start(): Promise<number> {
    const started = Date.now();
    const fd = openSync(this.logFile, 'a');
    const dockerd = [
      'dockerd', '--iptables=false', '--ip6tables=false', '--bridge=none', '--storage-driver=overlay2',
      '--data-root', path.join(this.root, 'data'), '--exec-root', path.join(this.root, 'x'), '--pidfile', path.join(this.root, 'docker.pid'),
      // Inside the namespace, the path containers bind; outside, the one this script talks to.
      '-H', 'unix:///run/docker.sock', '-H', this.host,
    ].map((a) => `'${a}'`).join(' ');
    this.child = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', `mount -t tmpfs -o mode=755 soak-run /run && exec ${dockerd}`], { stdio: ['ignore', fd, fd] });
    closeSync(fd);
    const c = this.child;
    this.exited = new Promise((resolve) => c.once('exit', () => resolve()));
    for (;;) {
      if (!this.running()) throw new Error(`the private dockerd exited during start-up:\n${this.tail()}`);
      if ((await run('docker', ['-H', this.host, 'version', '--format', '{{.Server.Version}}'], { timeoutMs: 5_000 })).code === 0) return Date.now() - started;
      if (Date.now() - started > 60_000) throw new Error(`the private dockerd did not answer within 60 s:\n${this.tail()}`);
      await sleep(100);
    }
  }

  /** SIGTERM (the engine stops its containers), SIGKILL after `timeoutMs`. */
  async stop(timeoutMs = 60_000): Promise<void> {
    const c = this.child;
    if (!c || !this.running()) return;
    c.kill('SIGTERM');
    if (!(await Promise.race([this.exited.then(() => true), sleep(timeoutMs).then(() => false)]))) {
      c.kill('SIGKILL');
      await this.exited;
    }
    this.child = null;
  }

  async destroy(): Promise<void> {
    await this.stop();
    // The namespace's mounts went with it; anything mounted on the host under the root goes too.
    const mounts = (await run('findmnt', ['-rn', '-o', 'TARGET'])).stdout.split('\n').filter((m) => m.startsWith(`${this.root}/`));
    for (const m of mounts.sort((a, b) => b.length - a.length)) await run('umount', ['-l', m]);
    rmSync(this.root, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// The webhook receiver: counts what arrives, by key; fails one attempt in ten.

interface Hit { key: string; eventId: string; type: string; answered: number; at: number }

class Receiver {
  readonly hits: Hit[] = [];
  private server: Server | null = null;
  port = 0;

  async start(): Promise<void> {
    this.port = await freePort();
    this.server = createServer((req, res) => {
      let body = '';
      req.on('data', (d) => (body += d));
      req.on('end', () => {
        let eventId = '?';
        try {
          eventId = (JSON.parse(body) as { id: string }).id;
        } catch {
          /* recorded as '?' */
        }
        const answered = Math.random() < 0.1 ? 500 : 200;
        this.hits.push({ key: String(req.headers['x-installer-delivery']), eventId, type: String(req.headers['x-installer-event']), answered, at: Date.now() });
        res.statusCode = answered;
        res.end();
      });
    });
    await new Promise<void>((r) => this.server!.listen(this.port, '0.0.0.0', r));
  }

  stop(): void {
    this.server?.closeAllConnections();
    this.server?.close();
  }
}

// ---------------------------------------------------------------------------------------------
// The stack on the private engine

class Stack {
  readonly project = `soak-${randomBytes(3).toString('hex')}`;
  readonly workDir = mkdtempSync(path.join(tmpdir(), 'soak-stack-'));
  readonly composeFile = path.join(this.workDir, 'docker-compose.yml');
  baseUrl = '';
  token = '';

  constructor(private readonly engine: Engine, private readonly images: Images) {}

  compose(args: string[], timeoutMs = 10 * 60_000): Promise<string> {
    return this.engine.docker(['compose', '-p', this.project, '-f', this.composeFile, ...args], { cwd: this.workDir, timeoutMs });
  }

  async up(tag: string): Promise<void> {
    copyFileSync(path.join(ROOT, 'deploy/docker-compose.yml'), this.composeFile);
    const staging = path.join(this.workDir, 'staging');
    const published = path.join(staging, 'published');
    mkdirSync(published, { recursive: true });
    // The channel's compose file as a self-update fetches it (the file the stack runs).
    writeFileSync(path.join(published, 'docker-compose.yml'), readFileSync(this.composeFile, 'utf8'));
    const platformDir = path.join(this.workDir, 'platform');
    cpSync(path.join(ROOT, 'deploy/rig/demo-platform'), platformDir, { recursive: true });
    writeFileSync(path.join(platformDir, '.env'), `TZ=UTC\nWEB_PORT=${await freePort()}\n`);
    const port = await freePort();
    let httpsPort = await freePort();
    while (httpsPort === port) httpsPort = await freePort();
    const env: Record<string, string> = {
      TZ: 'UTC',
      COMPOSE_PROJECT_NAME: this.project,
      VERSION: tag,
      INSTALLER_REGISTRY: this.images.registry,
      POSTGRES_IMAGE: 'installer-rig/postgres:15',
      DATABASE_PASSWORD: randomBytes(12).toString('hex'),
      INSTALLER_BIND: '127.0.0.1',
      INSTALLER_PORT: String(httpsPort),
      INSTALLER_HTTP_PORT: String(port),
      INSTALLER_WORK_DIR: this.workDir,
      STAGING_ROOT: staging,
      PLATFORM_DIR: platformDir,
      PUBLISHED_COMPOSE_URL: `file://${path.join(published, 'docker-compose.yml')}`,
      // Builds are published and updated to at once: no observation of the channel is old enough.
      OBSERVED_CHANNEL_MAX_AGE_SECONDS: '0',
    };
    writeFileSync(path.join(this.workDir, '.env'), Object.entries(env).map(([k, v]) => `${k}=${v}\n`).join(''), { mode: 0o600 });
    this.baseUrl = `http://127.0.0.1:${port}`;
    await this.compose(['up', '-d', '--wait', '--wait-timeout', '180', 'backend']);
    const generated = (await this.engine.docker(['exec', 'installer-backend', 'cat', '/var/lib/installer/secrets/initial-admin-password'])).trim();
    this.token = await firstAdminToken(this.baseUrl, generated);
  }

  async call(method: string, p: string, body?: unknown, timeoutMs = 60_000): Promise<{ status: number; body: Record<string, unknown> }> {
    try {
      const res = await fetch(`${this.baseUrl}${p}`, {
        method,
        headers: { authorization: `Bearer ${this.token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(timeoutMs),
      });
      const text = await res.text();
      let parsed: Record<string, unknown> = {};
      try {
        parsed = JSON.parse(text) as Record<string, unknown>;
      } catch {
        parsed = { text };
      }
      return { status: res.status, body: parsed };
    } catch (err) {
      return { status: 0, body: { error: (err as Error).message } };
    }
  }

  async healthy(): Promise<boolean> {
    const r = await this.call('GET', '/api/health', undefined, 3_000);
    return r.status === 200;
  }

  /** Rows of a query, read with psql in the stack's Postgres container. */
  async query<T>(sql: string): Promise<T[]> {
    const text = await this.engine.docker(['exec', 'installer-postgres', 'psql', '-U', 'installer', '-d', 'installer', '-At', '-c', `select coalesce(json_agg(q), '[]') from (${sql}) q`]);
    return JSON.parse(text.trim()) as T[];
  }

  /** SIGKILL to the backend's node process (the container's init then exits and the engine restarts it). */
  async killBackend(): Promise<boolean> {
    const r = await run('docker', ['-H', this.engine.host, 'inspect', '--format', '{{.State.Pid}}', 'installer-backend']);
    const init = Number(r.stdout.trim());
    if (r.code !== 0 || !init) return false;
    let children: number[] = [];
    try {
      children = readFileSync(`/proc/${init}/task/${init}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
    } catch {
      return false;
    }
    let killed = false;
    for (const pid of children) {
      try {
        if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() !== 'node') continue;
        process.kill(pid, 'SIGKILL');
        killed = true;
      } catch {
        /* already gone */
      }
    }
    return killed;
  }

  async down(): Promise<void> {
    await run('docker', ['-H', this.engine.host, 'compose', '-p', this.project, '-f', this.composeFile, 'down', '-v', '--remove-orphans', '-t', '2'], { cwd: this.workDir, timeoutMs: 120_000 });
    await run('docker', ['-H', this.engine.host, 'rm', '-f', 'installer-self-updater']);
    await run('docker', ['-H', this.engine.host, 'compose', '-p', 'platform', '-f', path.join(this.workDir, 'platform/docker-compose.yml'), 'down', '-v', '-t', '1'], { cwd: path.join(this.workDir, 'platform'), timeoutMs: 120_000 });
    rmSync(this.workDir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// The run

interface Figures {
  iterations: number;
  jobsAccepted: number;
  jobsRefused409: number;
  jobsNotAnswered: number;
  updatesStarted: number;
  updatesNewest: number;
  updatesRefused409: number;
  updatesOther: number;
  testEvents: number;
  backendKills: number;
  postgresRestarts: number;
  engineRestarts: number;
  backendBackMs: number[];
}

async function main(): Promise<number> {
  const minutes = minutesArg(process.argv.slice(2));
  const startedAt = Date.now();
  const hardEnd = startedAt + minutes * 60_000;
  const chaosEnd = Math.max(startedAt + 60_000, hardEnd - FINAL_RESERVE_MS);
  out(`soak: ${minutes} min (chaos until ${new Date(chaosEnd).toISOString()}, everything over by ${new Date(hardEnd).toISOString()})`);

  const images = new Images();
  const engine = new Engine();
  const receiver = new Receiver();
  let stack: Stack | undefined;
  let cleaned = false;
  const cleanup = async () => {
    if (cleaned) return;
    cleaned = true;
    receiver.stop();
    if (stack && engine.running()) await stack.down().catch((err: unknown) => log(`stack down: ${(err as Error).message}`));
    await engine.destroy().catch((err: unknown) => log(`engine destroy: ${(err as Error).message}`));
    await images.cleanup().catch((err: unknown) => log(`image cleanup: ${(err as Error).message}`));
  };
  const onSignal = (sig: NodeJS.Signals) => {
    out(`soak: ${sig}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // The whole run is bounded: past the end, whatever is running is abandoned and cleaned up.
  const bound = setTimeout(() => {
    out(`soak: FAIL the run exceeded ${minutes} min; cleaning up`);
    void cleanup().finally(() => process.exit(1));
  }, hardEnd - startedAt + 2 * 60_000);
  bound.unref();

  const f: Figures = {
    iterations: 0, jobsAccepted: 0, jobsRefused409: 0, jobsNotAnswered: 0, updatesStarted: 0, updatesNewest: 0, updatesRefused409: 0, updatesOther: 0,
    testEvents: 0, backendKills: 0, postgresRestarts: 0, engineRestarts: 0, backendBackMs: [],
  };
  const checks: { name: string; ok: boolean; detail: string }[] = [];
  const check = (name: string, ok: boolean, detail: string) => {
    checks.push({ name, ok, detail });
    out(`check ${ok ? 'PASS' : 'FAIL'} ${name}: ${detail}`);
  };

  try {
    // Images: the installer built from this checkout, and newer builds to publish one by one.
    log('building the installer image and the builds to publish (host engine, local registry)');
    await images.buildBase('soak-base');
    await images.publish('soak-base', 'prod');
    const builds: string[] = [];
    const nextBuild = async () => {
      const tag = `soak-${builds.length + 1}`;
      await images.buildVariant('good', 'soak-base', tag);
      builds.push(tag);
      return tag;
    };
    for (let i = 0; i < 4; i++) await nextBuild();

    log('starting the private engine');
    await engine.start();
    await must('bash', ['-c', 'set -o pipefail; docker save installer-rig/postgres:15 installer-rig/busybox:latest | docker -H "$1" load', 'load', engine.host], { timeoutMs: 300_000 });
    await receiver.start();
    stack = new Stack(engine, images);
    log(`starting the stack ${stack.project} on it`);
    await stack.up('soak-base');
    const s = stack;
    const gateway = (await engine.docker(['network', 'inspect', '--format', '{{range .IPAM.Config}}{{.Gateway}}{{end}}', `${s.project}_default`])).trim();
    const hook = await s.call('POST', '/api/notifications/webhooks', { url: `http://${gateway}:${receiver.port}/hook`, allowPrivateNetwork: true });
    if (hook.status !== 201) throw new Error(`adding the webhook endpoint: ${hook.status} ${JSON.stringify(hook.body)}`);
    const endpointId = String(hook.body.id);
    // The platform up once, so that its jobs act on something.
    const first = await s.call('POST', '/api/deployment/jobs', { action: 'compose-up' });
    if (first.status !== 202) throw new Error(`the first platform job: ${first.status} ${JSON.stringify(first.body)}`);
    f.jobsAccepted++;

    /** Waits for the backend to answer again after a fault; false past the bound. */
    const back = async (what: string, boundMs = 4 * 60_000): Promise<boolean> => {
      const t0 = Date.now();
      while (Date.now() - t0 < boundMs) {
        if (await s.healthy()) {
          f.backendBackMs.push(Date.now() - t0);
          return true;
        }
        await sleep(250);
      }
      check(`the backend answers again after ${what}`, false, `no healthy answer within ${boundMs / 1000} s`);
      return false;
    };

    log('chaos');
    let published = 0;
    while (Date.now() < chaosEnd) {
      f.iterations++;
      const r = Math.random();
      if (r < 0.5) {
        const action = pick(['compose-up', 'restart', 'stop', 'compose-up'] as const);
        const res = await s.call('POST', '/api/deployment/jobs', { action });
        if (res.status === 202) f.jobsAccepted++;
        else if (res.status === 409) f.jobsRefused409++;
        else f.jobsNotAnswered++;
      } else if (r < 0.75) {
        if (published >= builds.length - 1) await nextBuild();
        await images.publish(builds[published++]!, 'prod');
        const res = await s.call('POST', '/api/system/self-update', undefined, 150_000);
        if ((res.status === 200 || res.status === 202) && res.body.started) f.updatesStarted++;
        else if (res.status === 200) f.updatesNewest++;
        else if (res.status === 409) f.updatesRefused409++;
        else f.updatesOther++;
        log(`self-update to ${builds[published - 1]}: ${res.status} ${String(res.body.message ?? res.body.error ?? '').slice(0, 120)}`);
      } else {
        const res = await s.call('POST', `/api/notifications/webhooks/${endpointId}/test`);
        if (res.status === 202) f.testEvents++;
      }
      await sleep(Math.random() * 4_000);
      const fault = Math.random();
      if (fault < 0.3) {
        if (await s.killBackend()) {
          f.backendKills++;
          log('backend killed (SIGKILL)');
          if (!(await back('a SIGKILL'))) break;
        }
      } else if (fault < 0.4) {
        await engine.docker(['restart', '-t', '5', 'installer-postgres']).catch((err: unknown) => log(`postgres restart: ${(err as Error).message}`));
        f.postgresRestarts++;
        log('postgres restarted');
        if (!(await back('a Postgres restart'))) break;
      } else if (fault < 0.46) {
        await engine.stop();
        await engine.start();
        f.engineRestarts++;
        log('engine restarted');
        if (!(await back('an engine restart'))) break;
      }
      await sleep(Math.random() * 3_000);
    }

    log('settling: waiting for everything to be idle');
    const inFlight = async () => {
      const [counts] = await s.query<{ jobs: number; updates: number; runs: number; owed: number }>(`
        select (select count(*) from deployment_job_status where phase in ('queued', 'running'))::int as jobs,
               (select count(*) from self_update_status where phase in ('requested', 'preflight', 'helper-running'))::int as updates,
               (select count(*) from reconcile_runs where finished_at is null)::int as runs,
               (select count(*) from notification_outbox where delivered_at is null and failed_at is null)::int as owed`);
      return counts!;
    };
    const idleBy = Date.now() + Math.min(3 * 60_000, Math.max(60_000, hardEnd - Date.now() - 90_000));
    let last = { jobs: -1, updates: -1, runs: -1, owed: -1 };
    while (Date.now() < idleBy) {
      last = await inFlight().catch(() => last);
      if (last.jobs === 0 && last.updates === 0 && last.runs === 0 && last.owed === 0) break;
      await sleep(1_000);
    }
    check('no row in flight once idle', last.jobs === 0 && last.updates === 0 && last.runs === 0, `jobs queued/running ${last.jobs}, self-updates in flight ${last.updates}, reconcile runs unfinished ${last.runs}`);

    // No 409 once idle: a new job and a new self-update are accepted.
    const job = await s.call('POST', '/api/deployment/jobs', { action: 'compose-up' });
    check('a new job is accepted (no 409)', job.status === 202, `${job.status} ${JSON.stringify(job.body).slice(0, 200)}`);
    if (job.status === 202) f.jobsAccepted++;
    const jobDone = async () => {
      for (let i = 0; i < 120; i++) {
        const [row] = await s.query<{ phase: string }>(`select phase from deployment_job_status where job_id = '${String(job.body.jobId)}'`).catch(() => []);
        if (row && (row.phase === 'completed' || row.phase === 'failed')) return row.phase;
        await sleep(1_000);
      }
      return 'still in flight';
    };
    if (job.status === 202) log(`the new job ended ${await jobDone()}`);
    if (published >= builds.length) await nextBuild();
    const target = builds[published++]!;
    const targetDigest = await images.publish(target, 'prod');
    const update = await s.call('POST', '/api/system/self-update', undefined, 150_000);
    check('a new self-update is accepted (no 409)', (update.status === 200 || update.status === 202) && update.body.started === true, `${update.status} ${JSON.stringify(update.body).slice(0, 200)}`);
    if (update.body.started === true) {
      f.updatesStarted++;
      let running = '';
      for (let i = 0; i < 180; i++) {
        const v = await s.call('GET', '/api/version', undefined, 3_000);
        const c = await s.call('GET', '/api/system/self-update-check', undefined, 10_000);
        running = String(v.body.digest ?? '');
        if (running === targetDigest && (c.body.lastUpdate as { status?: string } | undefined)?.status === 'completed') break;
        await sleep(1_000);
      }
      check('the new self-update completes', running === targetDigest, `running ${running || 'unknown'}, published ${targetDigest}`);
    }
    // Idle again before the counts.
    while (Date.now() < hardEnd - 30_000) {
      last = await inFlight().catch(() => last);
      if (last.jobs === 0 && last.updates === 0 && last.runs === 0 && last.owed === 0) break;
      await sleep(1_000);
    }
    check('still nothing in flight after them', last.jobs === 0 && last.updates === 0 && last.runs === 0, `jobs ${last.jobs}, self-updates ${last.updates}, reconcile runs ${last.runs}`);
    if (last.runs > 0) {
      const runs = await s.query<Record<string, unknown>>(`
        select worker, request_id, started_at, updated_at, snapshot->>'value' as state, snapshot->'context'->>'lastError' as last_error
        from reconcile_runs where finished_at is null order by started_at`);
      for (const r of runs) out(`  unfinished reconcile run: ${JSON.stringify(r)}`);
    }

    // Every action audited once, none left `started`.
    const jobsAudit = await s.query<{ job_id: string; kind: string; phase: string; audits: number }>(`
      select j.job_id, j.kind, s.phase, (select count(*) from deployment_actions a where a.job_id = j.job_id)::int as audits
      from deployment_jobs j join deployment_job_status s using (job_id) where j.kind <> 'cancel-job'`);
    const badJobs = jobsAudit.filter((j) => j.audits !== 1);
    check('every job audited once', badJobs.length === 0, `${jobsAudit.length} jobs; not once: ${JSON.stringify(badJobs.slice(0, 5))}`);
    const updatesAudit = await s.query<{ request_id: string; phase: string; audits: number }>(`
      select s.request_id, s.phase, (select count(*) from deployment_actions a where a.id = s.action_id)::int as audits
      from self_update_status s where s.phase not in ('newest', 'unresolved', 'aborted')`);
    const badUpdates = updatesAudit.filter((u) => u.audits !== 1);
    check('every self-update that ran audited once', badUpdates.length === 0, `${updatesAudit.length} updates; not once: ${JSON.stringify(badUpdates.slice(0, 5))}`);
    const [open] = await s.query<{ n: number }>(`select count(*)::int as n from deployment_actions where status = 'started'`);
    check('no audit row left started', open!.n === 0, `${open!.n} started`);

    // Job events: 1..n, no gap, no repeat, one `finished` for every ended job.
    const events = await s.query<{ job_id: string; kind: string; n: number; max: number; distinct_seq: number; finished: number; phase: string; missing: number[] }>(`
      select e.job_id, j.kind, count(*)::int as n, max(e.seq)::int as max, count(distinct e.seq)::int as distinct_seq,
             count(*) filter (where e.type = 'finished')::int as finished, s.phase,
             (select coalesce(json_agg(g), '[]') from generate_series(1, max(e.seq)) g where g not in (select seq from deployment_job_events x where x.job_id = e.job_id)) as missing
      from deployment_job_events e join deployment_job_status s using (job_id) join deployment_jobs j using (job_id) group by e.job_id, j.kind, s.phase`);
    const badEvents = events.filter((e) => e.n !== e.max || e.distinct_seq !== e.n || (['completed', 'failed'].includes(e.phase) && e.finished !== 1));
    check('job events contiguous, none repeated, one finished per ended job', badEvents.length === 0, `${events.length} jobs, ${events.reduce((a, e) => a + e.n, 0)} events; bad: ${JSON.stringify(badEvents.slice(0, 5))}`);

    // Webhooks: every event delivered, once by key, in order (of the bigint id: `order by id` would sort its text).
    const rows = await s.query<{ id: string; event_id: string; idempotency_key: string; delivered: boolean; failed: boolean }>(`
      select id::text, event_id, idempotency_key::text, delivered_at is not null as delivered, failed_at is not null as failed
      from notification_outbox where endpoint_id = '${endpointId}' order by notification_outbox.id`);
    const accepted = new Map<string, Hit>();
    for (const h of receiver.hits) if (h.answered === 200 && !accepted.has(h.key)) accepted.set(h.key, h);
    const notDelivered = rows.filter((r) => !r.delivered);
    const missing = rows.filter((r) => !accepted.has(r.idempotency_key));
    const keysOfEvent = new Map<string, Set<string>>();
    for (const h of receiver.hits) keysOfEvent.set(h.eventId, (keysOfEvent.get(h.eventId) ?? new Set()).add(h.key));
    const twoKeys = [...keysOfEvent].filter(([, keys]) => keys.size > 1);
    const rowKeys = new Set(rows.map((r) => r.idempotency_key));
    const unknown = [...accepted.keys()].filter((k) => !rowKeys.has(k));
    check('every webhook event delivered', notDelivered.length === 0, `${rows.length} events; not delivered: ${notDelivered.length}`);
    check('every webhook event received under its key', missing.length === 0 && unknown.length === 0, `${accepted.size} keys accepted, ${receiver.hits.length} requests; missing ${missing.length}, unknown ${unknown.length}`);
    check('no webhook event under two keys', twoKeys.length === 0, `${twoKeys.length} events with more than one key`);
    const firstArrival = rows.filter((r) => accepted.has(r.idempotency_key)).map((r) => ({ id: Number(r.id), at: accepted.get(r.idempotency_key)!.at }));
    const outOfOrder = firstArrival.filter((a, i) => i > 0 && a.at < firstArrival[i - 1]!.at);
    check('webhook events accepted in their order', outOfOrder.length === 0, `${outOfOrder.length} accepted before an earlier event`);
    if (outOfOrder.length) {
      const detail = await s.query<Record<string, unknown>>(`
        select id::text, event_id, created_at, delivered_at, attempts, last_error from notification_outbox where endpoint_id = '${endpointId}' order by notification_outbox.id`);
      for (const r of detail) {
        const key = rows.find((x) => x.id === r.id)?.idempotency_key;
        const hits = receiver.hits.filter((h) => h.key === key).map((h) => `${new Date(h.at).toISOString().slice(11, 23)} ${h.answered}`);
        out(`  outbox ${JSON.stringify(r)} received: ${hits.join(', ')}`);
      }
    }
    const byType = new Map<string, number>();
    for (const h of accepted.values()) byType.set(h.type, (byType.get(h.type) ?? 0) + 1);
    f.backendBackMs.sort((a, b) => a - b);
    out('');
    out('figures:');
    out(`  minutes ${((Date.now() - startedAt) / 60_000).toFixed(1)} (bound ${minutes}), iterations ${f.iterations}`);
    out(`  jobs: ${f.jobsAccepted} accepted, ${f.jobsRefused409} refused 409 during the chaos (one in flight), ${f.jobsNotAnswered} not answered (backend down)`);
    out(`  self-updates: ${f.updatesStarted} started, ${f.updatesNewest} newest already, ${f.updatesRefused409} refused 409 during the chaos, ${f.updatesOther} other answers`);
    out(`  faults: ${f.backendKills} backend SIGKILLs, ${f.postgresRestarts} Postgres restarts, ${f.engineRestarts} engine restarts`);
    out(`  backend back after a fault: median ${f.backendBackMs[Math.floor(f.backendBackMs.length / 2)] ?? 0} ms, max ${f.backendBackMs.at(-1) ?? 0} ms`);
    out(`  webhooks: ${rows.length} events (${[...byType].map(([t, n]) => `${t} ${n}`).join(', ')}), ${receiver.hits.length} requests, ${accepted.size} keys accepted`);
    const outcomes = await s.query<{ phase: string; n: number }>(`select phase, count(*)::int as n from self_update_status group by phase order by phase`);
    out(`  self-update outcomes: ${outcomes.map((o) => `${o.phase} ${o.n}`).join(', ')}`);
    const jobOutcomes = await s.query<{ phase: string; n: number }>(`select phase, count(*)::int as n from deployment_job_status group by phase order by phase`);
    out(`  job outcomes: ${jobOutcomes.map((o) => `${o.phase} ${o.n}`).join(', ')}`);
  } catch (err) {
    check('the soak ran to its end', false, (err as Error).stack ?? String(err));
    if (engine.running()) {
      const logs = await run('docker', ['-H', engine.host, 'logs', '--tail', '60', 'installer-backend']);
      out(`--- backend log ---\n${logs.stdout}${logs.stderr}`);
    }
  } finally {
    clearTimeout(bound);
    await cleanup();
  }
  const failed = checks.filter((c) => !c.ok);
  out(`soak: ${checks.length - failed.length} of ${checks.length} checks passed${failed.length ? `; FAILED: ${failed.map((c) => c.name).join('; ')}` : ''}`);
  return failed.length ? 1 : 0;
}

process.exit(await main());

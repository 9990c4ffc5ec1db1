// Postgres lost under load, then back: a real backend process on a Postgres container of its own,
// a steady stream of authenticated requests, and the database stopped (fast shutdown), killed
// (SIGKILL) and paused (connections stay open, nothing answers). Meanwhile /api/health answers
// 503 {status: error, db: down} and DB-backed requests answer 503 `unavailable` within a bound,
// never a 500 and never a hang; afterwards the same process answers 200 again, every LISTEN
// connection (job requests, job events, observation requests, self-update requests, user changes)
// is back and a new job runs (docs/adr/0012-dependency-faults.md). Measured figures are printed
// with the prefix `faults-db:`.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cpSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { runEntry, ROOT, type Running } from '../helpers/shared/process.ts';
import { uniqueName } from '../helpers/e2e/rig.ts';
import { startDedicatedPostgres, type DedicatedPostgres } from '../helpers/e2e/dedicated-postgres.ts';
import { requestJob, UNAVAILABLE_SHAPE, waitJob } from '../helpers/e2e/http-api.ts';
import { percentile, startLoad, type Answer, type Load } from '../helpers/e2e/request-load.ts';
import { DATABASE_UNAVAILABLE } from '../../src/errors.ts';
import { CONNECT_TIMEOUT_MS, QUERY_TIMEOUT_GRACE_MS, STATEMENT_TIMEOUT_MS } from '../../src/db/database.ts';
import { HEALTH_MAX_AGE_MS } from '../../src/state/health.ts';
import { AUDIT_CACHE_MS_DEFAULT } from '../../src/state/actions.ts';
import { firstAdminToken } from '../helpers/e2e/first-admin.ts';
import { eventually } from '../helpers/shared/eventually.ts';

type Fault = 'stop' | 'kill' | 'pause';
const FAULTS: Fault[] = ['stop', 'kill', 'pause'];
const silent = (f: Fault) => (f === 'pause' ? 'silent' : 'gone');

/** /api/health races its query against 2 s (docs/adr/0003-health-without-auth.md). */
const HEALTH_BOUND_MS = 2_500;
/**
 * A DB-backed request on a server that is gone (refused, reset) waits at most the connect
 * timeout, for a connection or a free pooled one; on a server that stopped answering (paused:
 * connections open, nothing comes back) at most the client's query timeout.
 */
const DB_REQUEST_BOUND_MS = { gone: CONNECT_TIMEOUT_MS + 1_000, silent: STATEMENT_TIMEOUT_MS + QUERY_TIMEOUT_GRACE_MS + 1_500 };
/** The outage is held this long under load; a paused server longer than the query timeout. */
const OUTAGE_MS = { gone: 6_000, silent: STATEMENT_TIMEOUT_MS + QUERY_TIMEOUT_GRACE_MS + 12_000 };
/** The first 503 from /api/health after the fault: a request sent just before it ends 2 s later. */
const DETECTION_BOUND_MS = 3_000;
/** After the database answers again, the backend must answer 200 within this. */
const RECOVERY_BOUND_MS = 5_000;
/** A lost LISTEN connection is retried with backoff of at most 5 s. */
const LISTEN_BOUND_MS = 12_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const PATHS = ['/api/health', '/api/deployment/actions?limit=20', '/api/deployment/jobs?limit=5'];

let pgc: DedicatedPostgres | undefined;
let proc: Running | undefined;
let load: Load | undefined;

afterAll(async () => {
  await load?.stop();
  await proc?.stop('SIGKILL');
  await pgc?.remove();
});

let base: string;
let token: string;
const project = uniqueName('faults-db');

beforeAll(async () => {
  pgc = await startDedicatedPostgres();
  const platformDir = mkdtempSync(path.join(tmpdir(), 'faults-db-platform-'));
  cpSync(path.join(ROOT, 'test/fixtures/stubborn/docker-compose.yml'), path.join(platformDir, 'docker-compose.yml'));
  const dataDir = mkdtempSync(path.join(tmpdir(), 'faults-db-data-'));
  proc = runEntry('src/main.ts', {
    DATABASE_URL: pgc.url,
    DATABASE_PASSWORD: pgc.password,
    DATA_DIR: dataDir,
    PORT: '0',
    HOST: '127.0.0.1',
    PLATFORM_DIR: platformDir,
    PLATFORM_PROJECT: project,
    LOG_LEVEL: 'info',
  });
  base = await proc.url;
  const adminPassword = readFileSync(path.join(dataDir, 'secrets/initial-admin-password'), 'utf8').trim();
  token = await firstAdminToken(base, adminPassword);
});

/** Every channel a backend listens on, each on a connection of its own. */
// One connection per channel (the reconcilers of one channel share it): writes of the audit trail
// (the API's pages of it, opened at its first read, which the load makes), job requests, user
// changes, stored job events (the API's streams), webhook deliveries owed, observation requests
// (the observer), observed rows written (the update policy), self-update requests, and the update
// policy and its quarantine.
const CHANNELS = [
  'LISTEN audit_changed', 'LISTEN deployment_jobs', 'LISTEN installer_users', 'LISTEN job_events', 'LISTEN notification_outbox', 'LISTEN observed_refresh',
  'LISTEN observed_written', 'LISTEN self_update_requests', 'LISTEN update_policy',
];

async function listeners(): Promise<string[]> {
  const rows = await pgc!.query<{ query: string }>("select query from pg_stat_activity where application_name = 'installer' and query ilike 'LISTEN %' order by query");
  return rows.map((r) => r.query);
}

async function waitListeners(): Promise<number> {
  const started = Date.now();
  let now: string[] = [];
  await eventually(async () => {
    now = await listeners();
    return CHANNELS.every((c) => now.includes(c));
  }, 'the LISTEN connections to come back', LISTEN_BOUND_MS, 100).catch((err: Error) => {
    throw new Error(`${err.message} (now: ${JSON.stringify(now)}; backend exit code ${proc!.child.exitCode}):\n${proc!.output().slice(-3000)}`);
  });
  return Date.now() - started;
}

const ended = (a: Answer) => a.at + a.ms;

/** One outage: the fault, OUTAGE_MS under load, `docker start`, recovery. Returns the measured figures. */
async function outage(kind: Fault) {
  const l = load!;
  const tFault = l.now();
  await (kind === 'stop' ? pgc!.stop() : kind === 'kill' ? pgc!.kill() : pgc!.pause());
  const tDown = l.now();
  await sleep(OUTAGE_MS[silent(kind)]);
  const tStart = l.now();
  await (kind === 'pause' ? pgc!.unpause() : pgc!.start());
  const dbReadyMs = await pgc!.ready();
  const tReady = l.now();
  // Recovered: every answer to a request sent in the last 2 s was a 200.
  let tRecovered = -1;
  for (;;) {
    const now = l.now();
    const recent = l.answers.filter((a) => a.at >= tReady && ended(a) >= now - 2_000);
    const firstOk = l.answers.find((a) => a.at >= tReady && a.status === 200);
    if (recent.length >= 10 && recent.every((a) => a.status === 200) && firstOk) {
      const lastBad = l.answers.filter((a) => a.at >= tReady && a.status !== 200).map(ended);
      tRecovered = Math.max(ended(firstOk), ...lastBad);
      break;
    }
    if (now - tReady > RECOVERY_BOUND_MS + 10_000) break;
    await sleep(100);
  }
  const listenMs = await waitListeners();

  const during = l.answers.filter((a) => a.at >= tDown && ended(a) <= tStart);
  // Health and the audit trail may reuse an answer from just before the fault for its lifetime.
  const health = during.filter((a) => a.path === '/api/health' && a.at >= tDown + HEALTH_MAX_AGE_MS);
  const dbBacked = during.filter((a) => a.path !== '/api/health' && (!a.path.startsWith('/api/deployment/actions') || a.at >= tDown + AUDIT_CACHE_MS_DEFAULT));
  const firstDown = l.answers.filter((a) => a.path === '/api/health' && a.at >= tFault && a.status === 503).map(ended).sort((a, b) => a - b)[0];
  const figures = {
    fault: `docker ${kind}`,
    faultCommandMs: tDown - tFault,
    healthDownDetectedMs: firstDown === undefined ? null : Math.max(0, firstDown - tDown),
    outageAnswers: during.length,
    health503: { n: health.length, p50: percentile(health.map((a) => a.ms), 50), p95: percentile(health.map((a) => a.ms), 95), max: Math.max(...health.map((a) => a.ms)) },
    dbBacked503: { n: dbBacked.length, p50: percentile(dbBacked.map((a) => a.ms), 50), p95: percentile(dbBacked.map((a) => a.ms), 95), max: Math.max(...dbBacked.map((a) => a.ms)) },
    postgresStartMs: dbReadyMs,
    recoveryAfterDbReadyMs: tRecovered < 0 ? null : Math.max(0, tRecovered - tReady),
    recoveryAfterStartMs: tRecovered < 0 ? null : tRecovered - tStart,
    listenBackAfterRecoveryMs: listenMs,
  };
  console.log(`faults-db: ${JSON.stringify(figures)}`);
  return { figures, during, health, dbBacked, tFault };
}

describe('Postgres stopped, killed and paused under load', () => {
  it('answers 503 meanwhile, within bounds, and recovers in the same process', async () => {
    const headers = { authorization: `Bearer ${token}` };
    // Before: everything answers, the controllers listen (the audit trail's pages once it was read), a job runs.
    expect((await fetch(`${base}/api/deployment/actions`, { headers })).status).toBe(200);
    await waitListeners();
    expect(await listeners()).toEqual(CHANNELS);
    expect(await waitJob(base, token, await requestJob(base, token, 'stop'))).toMatchObject({ phase: 'completed' });
    const pid = proc!.child.pid;

    load = startLoad(base, PATHS, headers, { workers: 9, pauseMs: 25, clientTimeoutMs: 90_000 });
    await sleep(2_000);
    expect(load.answers.length).toBeGreaterThan(20);
    expect(load.answers.filter((a) => a.status !== 200)).toEqual([]);

    for (const kind of FAULTS) {
      const { figures, health, dbBacked } = await outage(kind);
      // A steady load kept arriving during the outage (fewer answers from a silent server: each waits).
      expect(health.length).toBeGreaterThan(silent(kind) === 'gone' ? 20 : 10);
      expect(dbBacked.length).toBeGreaterThan(silent(kind) === 'gone' ? 20 : 5);
      for (const a of health) {
        expect({ status: a.status, body: a.body }).toEqual({ status: 503, body: { status: 'error', db: 'down' } });
        expect(a.ms).toBeLessThanOrEqual(HEALTH_BOUND_MS);
      }
      for (const a of dbBacked) {
        expect({ path: a.path, status: a.status, body: a.body }).toEqual({ path: a.path, status: 503, body: { ...UNAVAILABLE_SHAPE, message: DATABASE_UNAVAILABLE } });
        expect(a.ms).toBeLessThanOrEqual(DB_REQUEST_BOUND_MS[silent(kind)]);
      }
      expect(figures.healthDownDetectedMs).not.toBeNull();
      expect(figures.healthDownDetectedMs!).toBeLessThanOrEqual(DETECTION_BOUND_MS);
      expect(figures.recoveryAfterDbReadyMs).not.toBeNull();
      expect(figures.recoveryAfterDbReadyMs!).toBeLessThanOrEqual(RECOVERY_BOUND_MS);
    }
    await load.stop();

    // Over the whole run: no hang (no request without an answer) and no 500; only 200 or 503.
    const all = load.answers;
    expect(all.filter((a) => a.status === 0)).toEqual([]);
    expect(all.filter((a) => a.status !== 200 && a.status !== 503).map((a) => [a.path, a.status, a.body])).toEqual([]);
    const maxMs = Math.max(...all.map((a) => a.ms));
    console.log(`faults-db: ${JSON.stringify({ requests: all.length, ok: all.filter((a) => a.status === 200).length, unavailable: all.filter((a) => a.status === 503).length, slowestAnswerMs: maxMs })}`);
    expect(maxMs).toBeLessThanOrEqual(DB_REQUEST_BOUND_MS.silent);

    // The same process, not a restart, answers; the controllers claim and run a new job.
    expect(proc!.child.pid).toBe(pid);
    expect(proc!.child.exitCode).toBeNull();
    expect((await fetch(`${base}/api/health`)).status).toBe(200);
    const requested = Date.now();
    const job = await waitJob(base, token, await requestJob(base, token, 'stop'));
    expect(job).toMatchObject({ phase: 'completed' });
    console.log(`faults-db: ${JSON.stringify({ jobAfterRecoveryMs: Date.now() - requested })}`);
    expect(await listeners()).toEqual(CHANNELS);
    // The database password never reaches the output.
    expect(proc!.output()).not.toContain(pgc!.password);
    expect(proc!.output()).toContain('database unavailable');
  });
});

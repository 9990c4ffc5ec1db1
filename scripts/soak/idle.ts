// After the chaos: everything must go idle, and then a new job and a new self-update must be
// accepted (no 409) and run to their end.
import type { SoakRun } from './chaos.ts';
import { log, out, sleep } from './report.ts';
import type { Stack } from './stack.ts';

interface InFlight { jobs: number; updates: number; runs: number; owed: number }

const inFlight = async (s: Stack): Promise<InFlight> => {
  const [counts] = await s.query<InFlight>(`
    select (select count(*) from deployment_job_status where phase in ('queued', 'running'))::int as jobs,
           (select count(*) from self_update_status where phase in ('requested', 'preflight', 'helper-running'))::int as updates,
           (select count(*) from reconcile_runs where finished_at is null)::int as runs,
           (select count(*) from notification_outbox where delivered_at is null and failed_at is null)::int as owed`);
  return counts!;
};

/** Polls what is in flight until nothing is, or until `by`; returns the last counts read (or `last`, when none could be). */
async function untilIdle(s: Stack, by: number, last: InFlight): Promise<InFlight> {
  while (Date.now() < by) {
    last = await inFlight(s).catch(() => last);
    if (last.jobs === 0 && last.updates === 0 && last.runs === 0 && last.owed === 0) break;
    await sleep(1_000);
  }
  return last;
}

export async function idleThenAccepted(r: SoakRun, hardEnd: number): Promise<void> {
  const { stack: s, f, check } = r;
  log('settling: waiting for everything to be idle');
  const idleBy = Date.now() + Math.min(3 * 60_000, Math.max(60_000, hardEnd - Date.now() - 90_000));
  let last = await untilIdle(s, idleBy, { jobs: -1, updates: -1, runs: -1, owed: -1 });
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
  const { digest: targetDigest } = await r.builds.publishNext(0);
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
  last = await untilIdle(s, hardEnd - 30_000, last);
  check('still nothing in flight after them', last.jobs === 0 && last.updates === 0 && last.runs === 0, `jobs ${last.jobs}, self-updates ${last.updates}, reconcile runs ${last.runs}`);
  if (last.runs > 0) {
    const runs = await s.query<Record<string, unknown>>(`
      select worker, request_id, started_at, updated_at, snapshot->>'value' as state, snapshot->'context'->>'lastError' as last_error
      from reconcile_runs where finished_at is null order by started_at`);
    for (const run of runs) out(`  unfinished reconcile run: ${JSON.stringify(run)}`);
  }
}

// What the stack's records must show once the soak is idle: every action audited once, every job's
// events numbered 1..n with one `finished`, every webhook event delivered under one key in its
// endpoint's order; then the run's figures.
import type { SoakRun } from './chaos.ts';
import type { Hit } from './receiver.ts';
import { out } from './report.ts';

export async function recordsHold(soak: SoakRun): Promise<{ webhookEvents: number; accepted: Map<string, Hit> }> {
  const { stack: s, check, receiver, endpointId } = soak;
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
  return { webhookEvents: rows.length, accepted };
}

export async function printFigures(r: SoakRun, run: { startedAt: number; minutes: number; webhookEvents: number; accepted: Map<string, Hit> }): Promise<void> {
  const { stack: s, f, receiver } = r;
  const { startedAt, minutes, accepted } = run;
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
  out(`  webhooks: ${run.webhookEvents} events (${[...byType].map(([t, n]) => `${t} ${n}`).join(', ')}), ${receiver.hits.length} requests, ${accepted.size} keys accepted`);
  const outcomes = await s.query<{ phase: string; n: number }>(`select phase, count(*)::int as n from self_update_status group by phase order by phase`);
  out(`  self-update outcomes: ${outcomes.map((o) => `${o.phase} ${o.n}`).join(', ')}`);
  const jobOutcomes = await s.query<{ phase: string; n: number }>(`select phase, count(*)::int as n from deployment_job_status group by phase order by phase`);
  out(`  job outcomes: ${jobOutcomes.map((o) => `${o.phase} ${o.n}`).join(', ')}`);
}

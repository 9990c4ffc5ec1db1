// Prometheus metrics at GET /metrics (docs/adr/0013-observability.md). Request durations and SSE
// clients are measured in the process; jobs and self-updates are counted from their stored rows at
// scrape time, so the counts survive restarts and match the API.
import fp from 'fastify-plugin';
import type { FastifyInstance, preHandlerHookHandler } from 'fastify';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { ReadModels } from '../state/api-state.ts';

/** Bounds a scrape's database reads: a scrape during an outage answers at once with db_up 0. */
const SCRAPE_DB_TIMEOUT_MS = 2_000;
const JOB_DURATION_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];

export class InstallerMetrics {
  readonly registry = new Registry();
  readonly httpDuration = new Histogram({
    name: 'installer_http_request_duration_seconds',
    help: 'HTTP requests by method, route template and status code (event streams excluded: see installer_sse_clients)',
    labelNames: ['method', 'route', 'status_code'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });
  readonly sseClients = new Gauge({
    name: 'installer_sse_clients',
    help: 'Open server-sent event streams by kind (job, logs)',
    labelNames: ['stream'] as const,
    registers: [this.registry],
  });
  private readonly jobsTotal = new Counter({
    name: 'installer_jobs_total',
    help: 'Finished jobs by kind and outcome (completed, failed), counted from the stored jobs',
    labelNames: ['kind', 'outcome'] as const,
    registers: [this.registry],
  });
  private readonly jobsActive = new Gauge({
    name: 'installer_jobs',
    help: 'Jobs waiting or running, by kind and phase (queued, running)',
    labelNames: ['kind', 'phase'] as const,
    registers: [this.registry],
  });
  private readonly jobDuration = new Histogram({
    name: 'installer_job_duration_seconds',
    help: 'Run time of finished jobs by kind and outcome, from their start to their end',
    labelNames: ['kind', 'outcome'] as const,
    buckets: JOB_DURATION_BUCKETS,
    registers: [this.registry],
  });
  private readonly selfUpdates = new Gauge({
    name: 'installer_self_updates',
    help: 'Self-update requests by the phase they are in or ended in (completed, rolled-back, neither, undecided, aborted, newest, unresolved, or in flight)',
    labelNames: ['phase'] as const,
    registers: [this.registry],
  });
  private readonly selfUpdatesTotal = new Counter({
    name: 'installer_self_updates_total',
    help: 'Self-updates that ran their helper and ended, by outcome (completed, rolled-back, neither, undecided), counted from the stored updates',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  private readonly selfUpdateDowntime = new Gauge({
    name: 'installer_self_update_downtime_seconds',
    help: "Downtime of the last completed self-update as the installer measured it: the old backend's last answer to the new one's first readiness (absent when not measured; labelled with the update's requestId)",
    // Labelled: an unlabelled gauge always shows a value, and an unmeasured downtime is no 0.
    labelNames: ['request_id'] as const,
    registers: [this.registry],
  });
  private readonly dbUp = new Gauge({
    name: 'installer_database_up',
    help: '1 when the database answered this scrape, else 0 (job and update figures are then absent)',
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry, prefix: 'installer_' });
  }

  /** Reads the stored figures; on a database that does not answer, drops them and reports db_up 0. */
  async refresh(reads: Pick<ReadModels, 'health' | 'metrics'>): Promise<void> {
    this.jobsTotal.reset();
    this.jobsActive.reset();
    this.jobDuration.reset();
    this.selfUpdates.reset();
    this.selfUpdatesTotal.reset();
    this.selfUpdateDowntime.reset();
    if (!(await reads.health.up(SCRAPE_DB_TIMEOUT_MS))) {
      this.dbUp.set(0);
      return;
    }
    try {
      const [counts, durations, updates, history] = await Promise.all([reads.metrics.jobCounts(), reads.metrics.finishedJobDurations(), reads.metrics.selfUpdateCounts(), reads.metrics.updateHistoryFigures()]);
      for (const c of counts) {
        if (c.phase === 'completed' || c.phase === 'failed') this.jobsTotal.inc({ kind: c.kind, outcome: c.phase }, c.count);
        else this.jobsActive.set({ kind: c.kind, phase: c.phase }, c.count);
      }
      for (const d of durations) this.jobDuration.observe({ kind: d.kind, outcome: d.outcome }, d.seconds);
      for (const u of updates) this.selfUpdates.set({ phase: u.phase }, u.count);
      for (const o of history.outcomes) this.selfUpdatesTotal.inc({ outcome: o.outcome }, o.count);
      const last = history.lastCompleted;
      if (last && last.downtimeMs !== null) this.selfUpdateDowntime.set({ request_id: last.requestId }, last.downtimeMs / 1000);
      this.dbUp.set(1);
    } catch {
      this.jobsTotal.reset();
      this.jobsActive.reset();
      this.jobDuration.reset();
      this.selfUpdates.reset();
      this.selfUpdatesTotal.reset();
      this.selfUpdateDowntime.reset();
      this.dbUp.set(0);
    }
  }
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Set on event-stream routes: the kind counted in installer_sse_clients. */
    metricsStream?: string;
  }
}

/** Kind of an event stream route for the SSE gauge, from its registered pattern (never a request's path). */
function streamKind(routePattern: string): string {
  return routePattern.includes('/jobs/') ? 'job' : 'logs';
}

/**
 * Measures every routed request. Event-stream routes are counted as open clients instead: their
 * duration is how long someone watched, not how fast the server answered.
 */
export const metricsPlugin = fp(
  async (app: FastifyInstance, opts: { metrics: InstallerMetrics }) => {
    const { metrics } = opts;
    // Event-stream routes get their own hook and a mark in their config, decided once when the
    // route is added: every other request pays one property read.
    app.addHook('onRoute', (r) => {
      if (!(r as { sse?: unknown }).sse) return;
      const stream = streamKind(r.url);
      r.config = { ...r.config, metricsStream: stream };
      const countClient: preHandlerHookHandler = (req, reply, done) => {
        metrics.sseClients.inc({ stream });
        reply.raw.once('close', () => metrics.sseClients.dec({ stream }));
        done();
      };
      r.preHandler = [...[r.preHandler ?? []].flat(), countClient];
    });

    // One labelled child per method, route and status, instead of hashing the labels per request.
    const observers = new Map<string, Histogram.Internal<'method' | 'route' | 'status_code'>>();
    app.addHook('onResponse', (req, reply, done) => {
      // routeOptions is a getter that builds a new object: read it once.
      const routeOptions = req.routeOptions;
      if (!routeOptions.config?.metricsStream) {
        const route = routeOptions.url ?? 'unmatched';
        const key = `${req.method} ${reply.statusCode} ${route}`;
        let o = observers.get(key);
        if (!o) observers.set(key, (o = metrics.httpDuration.labels({ method: req.method, route, status_code: String(reply.statusCode) })));
        o.observe(reply.elapsedTime / 1000);
      }
      done();
    });
  },
  { name: 'metrics' },
);

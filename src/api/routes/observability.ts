// GET /metrics (Prometheus text) and GET /api/system/diagnostics (an admin's download of what
// support needs first). Neither ever carries a secret: settings are listed with secret values
// left out, URLs lose their passwords, and the whole bundle passes the secret scrubber last.
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { SECRET_SETTINGS, type Settings } from '../../config.ts';
import type { InstallerMetrics } from '../metrics.ts';
import { unavailable } from '../../errors.ts';
import { freshness } from '../observed-reads.ts';
import { ageOf } from '../../state/observed.ts';
import type { DiagnosticsPort } from '../../contracts/ports.ts';
import { printableUrl } from '../../contracts/trusted-source.ts';

const RECENT_JOBS = 50;
const RECENT_ACTIONS = 100;
const RECENT_UPDATES = 10;

/** The installer's version from its package.json, found upwards from here (source and built layouts differ). */
function packageVersion(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    try {
      const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'installer' && pkg.version) return pkg.version;
    } catch {
      // not here: look one level up
    }
    const up = path.dirname(dir);
    if (up === dir) return 'unknown';
    dir = up;
  }
}
const PACKAGE_VERSION = packageVersion();

/** A URL's password (and a query's secret-looking values) replaced by a marker; other text unchanged. */
function withoutCredentials(value: string): string {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return value;
  try {
    const u = new URL(value);
    if (u.password) u.password = 'REDACTED';
    return u.toString();
  } catch {
    return value;
  }
}

/** Settings as the process runs with them; secret values are replaced by where they came from. */
export function redactedSettings(settings: Settings): Record<string, unknown> {
  const { secrets, secretFiles, ...rest } = settings;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(rest)) out[k] = typeof v === 'string' ? withoutCredentials(v) : v;
  // Sources may carry an access token or a signature in the query string too (docs/adr/0041-trusted-sources-and-staging.md).
  for (const k of ['PUBLISHED_COMPOSE_URL', 'PLATFORM_TEMPLATES_URL'] as const) {
    const v = rest[k];
    if (v && /^[a-z][a-z0-9+.-]*:\/\//i.test(v)) out[k] = printableUrl(v);
  }
  for (const name of SECRET_SETTINGS) {
    out[name] = secretFiles[name] ? `[set from file ${secretFiles[name]}]` : secrets[name] !== undefined ? '[set in the environment]' : name === 'DATABASE_PASSWORD' ? '[not set]' : '[generated in SECRETS_DIR]';
  }
  return out;
}

async function settle<T>(p: Promise<T>): Promise<T | { error: string }> {
  try {
    return await p;
  } catch (err) {
    return { error: err instanceof Error ? err.message : String(err) };
  }
}

/** `diagnostics`: recent log lines and the scrubber; absent, the bundle answers 503. */
export const observabilityRoutes: FastifyPluginAsyncZod<{ metrics: InstallerMetrics; diagnostics?: DiagnosticsPort }> = async (app, { metrics, diagnostics }) => {
  const { reads, settings } = app;
  const { diagnostics: stored } = reads;

  app.get(
    '/metrics',
    {
      config: { access: 'viewer' },
      // Scraped every few seconds: only warnings and errors are worth a log line.
      logLevel: 'warn',
      schema: { tags: ['system'], summary: 'Prometheus metrics: HTTP request durations, SSE clients, jobs by kind and outcome, job durations, self-update outcomes', produces: ['text/plain'] },
    },
    async (_req, reply) => {
      await metrics.refresh(reads);
      return reply.type(metrics.registry.contentType).send(await metrics.registry.metrics());
    },
  );

  app.get(
    '/api/system/diagnostics',
    {
      config: { access: 'admin' },
      schema: {
        tags: ['system'],
        summary: 'Diagnostics bundle (JSON download): versions and digests, settings without secret values, container states, recent jobs, actions and updates, recent backend log lines',
        querystring: z.object({}).strict(),
      },
    },
    async (req, reply) => {
      const port = diagnostics;
      if (!port) throw unavailable('diagnostics are not available in this process');
      const generatedAt = new Date();
      const dbUp = await reads.health.up();
      const fromDb = <T>(read: () => Promise<T>) => (dbUp ? settle(read()) : Promise.resolve({ error: 'the database is unavailable' }));
      // Engine-side facts as the observer last saw them (docs/adr/0023-observed-state.md), each with its age.
      const observed = <K extends 'installer' | 'engine' | 'platform'>(key: K) =>
        fromDb(async () => {
          const row = await reads.observed.fresh(key, freshness(settings).fast);
          if (!row?.data) throw new Error(`not observed yet: no observer answered in time`);
          return { data: row.data, conditions: row.conditions, ...ageOf(row) };
        });
      const [installerRow, engineRow, platformRow, migration, jobs, queue, actions, updates, envKeys] = await Promise.all([
        observed('installer'),
        observed('engine'),
        observed('platform'),
        fromDb(() => stored.schemaMigration()),
        fromDb(() => stored.recentJobs(RECENT_JOBS)),
        fromDb(() => reads.jobs.queue()),
        fromDb(() => stored.recentActions(RECENT_ACTIONS)),
        fromDb(() => stored.recentSelfUpdates(RECENT_UPDATES)),
        // Keys only: platform settings may hold the customer's own secrets.
        fromDb(async () => {
          const row = await reads.observed.fresh('platformEnv', freshness(settings).fast);
          if (!row?.data) throw new Error('not observed yet: no observer answered in time');
          if (row.data.sealed === null) throw new Error(row.data.error ?? 'the platform .env could not be read');
          return row.data.keys;
        }),
      ]);
      const part = <T>(r: { data: T; conditions: unknown; observedAt: string | null; ageMs: number | null } | { error: string }, pick: (d: T) => unknown) =>
        'error' in r ? r : { ...(pick(r.data) as object), observedAt: r.observedAt, ageMs: r.ageMs, conditions: r.conditions };
      const runtimeInfo = part(installerRow, (d) => d);
      const engine = part(engineRow, (d) => (d.facts ?? { error: d.error ?? 'the engine did not answer' }));
      const platformContainers = 'error' in platformRow ? platformRow : platformRow.data.engineError ? { error: platformRow.data.engineError } : platformRow.data.containers;
      const swarmPart = 'error' in platformRow ? platformRow : (platformRow.data.swarm ?? { error: platformRow.data.swarmError ?? 'the Swarm has not been observed yet' });
      const installerContainers = 'error' in engineRow ? engineRow : engineRow.data.installerContainersError ? { error: engineRow.data.installerContainersError } : engineRow.data.installerContainers;
      const bundle = {
        bundle: { format: 1, generatedAt: generatedAt.toISOString(), generatedBy: req.actor().id },
        installer: { version: PACKAGE_VERSION, node: process.version, pid: process.pid, uptimeSeconds: Math.round(process.uptime()), rssBytes: process.memoryUsage().rss },
        runtime: runtimeInfo,
        engine,
        database: { kind: stored.databaseKind, up: dbUp, schemaMigration: migration },
        settings: redactedSettings(settings),
        // Which runtime the platform is on; on a Swarm, the nodes and the stack's services and tasks too.
        platformRuntime: settings.PLATFORM_RUNTIME,
        platform: { project: settings.PLATFORM_PROJECT, envKeys, containers: platformContainers, ...(settings.PLATFORM_RUNTIME === 'swarm' ? { swarm: swarmPart } : {}) },
        installerContainers,
        jobs: { running: queue, recent: jobs },
        actions,
        selfUpdates: updates,
        logs: port.recentLogLines(),
      };
      const text = JSON.stringify(bundle, null, 2);
      const safe = port.scrub(text);
      const stamp = generatedAt.toISOString().replace(/[:.]/g, '-');
      return reply
        .header('content-type', 'application/json; charset=utf-8')
        .header('content-disposition', `attachment; filename="installer-diagnostics-${stamp}.json"`)
        .header('cache-control', 'no-store')
        .send(safe);
    },
  );
};

// Builds the Fastify app: external plugins, then auth and error handling, then one plugin per
// resource inside a child context that owns the zod compilers.
import { randomUUID } from 'node:crypto';
import Fastify, { LogController, type FastifyInstance, type FastifyBaseLogger, type FastifyReply, type FastifyRequest } from 'fastify';
import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import { fastifySSE } from '@fastify/sse';
import { serializerCompiler, validatorCompiler, jsonSchemaTransform } from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import type { Settings } from '../config.ts';
import type { Database } from '../db/database.ts';
import type { ContainerLogsPort, DiagnosticsPort, MachinesPort, TlsView } from '../contracts/ports.ts';
import type { JobEventLog } from '../state/job-events.ts';
import type { Sealer } from '../state/platform-config.ts';
import { authPlugin, undeclaredAccess, type Access } from './auth.ts';
import { UserDirectory } from '../auth/user-directory.ts';
import { USERS_CHANNEL, userStandings } from '../state/users.ts';
import { errorBody, installErrorHandling } from './errors.ts';
import { healthRoutes } from './routes/health.ts';
import { versionRoutes } from './routes/version.ts';
import { authRoutes } from './routes/auth.ts';
import { userRoutes } from './routes/users.ts';
import { jobRoutes } from './routes/jobs.ts';
import { jobStreamRoutes } from './routes/job-stream.ts';
import { auditRoutes } from './routes/audit.ts';
import { statusRoutes } from './routes/status.ts';
import { platformConfigRoutes } from './routes/platform-config.ts';
import { migrateRoutes } from './routes/migrate.ts';
import { logRoutes } from './routes/logs.ts';
import { lazyRequestLogger } from './request-logger.ts';
import { machineRoutes } from './routes/machines.ts';
import { uiRoutes } from './ui.ts';
import { updateHistoryRoutes } from './routes/update-history.ts';
import { systemRoutes } from './routes/system.ts';
import { preflightReportRoutes } from './routes/preflight-report.ts';
import { updatePolicyRoutes } from './routes/update-policy.ts';
import { observabilityRoutes } from './routes/observability.ts';
import { tlsRoutes } from './routes/tls.ts';
import { notificationRoutes } from './routes/notifications.ts';
import { lastAnswerPlugin } from './last-answer.ts';
import { InstallerMetrics, metricsPlugin } from './metrics.ts';
import { fastifyConnectionOptions, limitConnections } from './connection-limits.ts';
import { streamLimitsPlugin } from './stream-limits.ts';
import { statePlugin } from './state-plugin.ts';

export interface AppDeps {
  settings: Settings;
  database: Database;
  logger: Logger;
  jwtSecret: string;
  /** The service tokens accepted now (re-read when their file is replaced). */
  serviceTokens: () => readonly string[];
  /** The job event log: the API reads and follows it (the controllers append). */
  events: Pick<JobEventLog, 'read' | 'subscribe'>;
  sealer: Sealer;
  /** The state charts and their actors' states (GET /api/machines); without it that route answers 503. */
  machines?: MachinesPort;
  /** The built operator UI served at `/` (default: src/ui/dist beside src/api). */
  uiDir?: string;
  /** Platform container logs; without it the log routes answer 503. */
  logs?: ContainerLogsPort;
  /** Recent log lines and the secret scrubber for the diagnostics bundle; without it that route answers 503. */
  diagnostics?: DiagnosticsPort;
  /** Users' standing for the token check; default: one of this app's own on the database. */
  users?: UserDirectory;
  /** The HTTPS listener's certificate; null or absent: the installer serves plain HTTP only. */
  tls?: TlsView | null;
  /**
   * Whether the process runs what its role runs (its controllers, the event follow); until it
   * does, GET /api/health answers 503 `starting` (docs/adr/0043-healthy-means-reconciling.md).
   * Absent: from the start.
   */
  reconciling?: () => boolean;
}

/** The users' standing read from the installer's database, with changes arriving by NOTIFY. */
export function userDirectory(database: Database): UserDirectory {
  return new UserDirectory({
    load: (username) => userStandings(database.db, username),
    listen: (onChange) => database.listen(USERS_CHANNEL, onChange),
  });
}

export interface RouteEntry {
  method: string;
  url: string;
  access: Access;
  sse: boolean;
  /** The route's schema summary, when it has one (docs/access.md shows it). */
  summary?: string;
}

/**
 * The access given to every route registered in a context (and the contexts inside it) that does
 * not declare its own: for a plugin of someone else's whose routes take no `config`, such as the
 * API document's viewer. Set with `declareAccess`.
 */
const CONTEXT_ACCESS = Symbol('context access');

/** Gives the routes a third-party plugin registers in `context` the access `access`. */
export function declareAccess(context: FastifyInstance, access: Access): void {
  (context as FastifyInstance & { [CONTEXT_ACCESS]?: Access })[CONTEXT_ACCESS] = access;
}

/**
 * Whether the API document (/api/docs) is served: API_DOCS when set, else only outside
 * production (docs/adr/0002-roles.md).
 */
export function apiDocsOn(settings: Pick<Settings, 'API_DOCS' | 'NODE_ENV'>): boolean {
  return settings.API_DOCS === undefined ? settings.NODE_ENV !== 'production' : settings.API_DOCS === 'on';
}

/**
 * The API document's viewer loads only its own files: no inline script, nothing from elsewhere.
 * Styles: swagger-ui adds a <style> element of its own, so inline styles are allowed; scripts
 * never (test/e2e/ui-api-docs.test.ts renders it in Chromium with no violation).
 */
export const API_DOCS_CSP =
  "default-src 'self'; script-src 'self'; script-src-attr 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; font-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'";

declare module 'fastify' {
  interface FastifyInstance {
    routeTable: RouteEntry[];
    users: UserDirectory;
    /** This process's id, sent as `x-installer-instance` (routes/health.ts): random, new at each start. */
    instance: string;
  }
}

/**
 * One log line per request, when it completes, instead of Fastify's two (received, completed).
 * A read that succeeds is logged at `debug`: the UI polls its pages every few seconds, and those
 * lines would bury the ones that matter, in the output and in the diagnostics bundle's recent
 * lines. Changes, refusals and failures stay at `info` and above (docs/adr/0015-access-log-levels.md).
 */
export class OneLinePerRequest extends LogController {
  override incomingRequest(): void {}

  override requestCompleted(error: Error | null | undefined, req: FastifyRequest, reply: FastifyReply): void {
    const log = reply.log;
    if (error) {
      log.error({ ...requestDetails(req, reply), err: error }, 'request errored');
      return;
    }
    const quietRead = reply.statusCode < 400 && (req.method === 'GET' || req.method === 'HEAD');
    if (quietRead) log.debug(requestDetails(req, reply), 'request completed');
    else log.info(requestDetails(req, reply), 'request completed');
  }
}

function requestDetails(req: FastifyRequest, reply: FastifyReply) {
  return { method: req.method, url: req.url, statusCode: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10 };
}

/**
 * How the router matches, stated: exact case, no trailing-slash or doubled-slash folding, `;` part
 * of the path. Access is read from the route matched (auth.ts), so these decide only what is
 * found, never what is allowed (docs/adr/0002-roles.md).
 */
export const ROUTER_OPTIONS = { caseSensitive: true, ignoreTrailingSlash: false, ignoreDuplicateSlashes: false, useSemicolonDelimiter: false };

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    bodyLimit: 1024 * 1024,
    requestIdHeader: false,
    trustProxy: false,
    routerOptions: ROUTER_OPTIONS,
    return503OnClosing: true,
    logController: new OneLinePerRequest(),
    // Header, request and keep-alive timeouts (docs/adr/0040-bounded-connections.md).
    ...fastifyConnectionOptions(deps.settings),
    childLoggerFactory: lazyRequestLogger,
    // The router's own refusals in the project's error shape. A path segment over the router's
    // limit (100 characters) can name no route: 404 like any unknown path, not Fastify's bare 414.
    frameworkErrors: (err, req, rawReply) => {
      const reply = rawReply as FastifyReply;
      const p = (req.url.split('?')[0] ?? '').slice(0, 200);
      if (err.code === 'FST_ERR_MAX_PARAM_LENGTH') {
        void reply.status(404).send(errorBody(404, `Route ${req.method} ${p} not found: a path segment is over 100 characters`, 'not_found'));
      } else {
        void reply.status(400).send(errorBody(400, `the path ${p} is not valid: ${err.message.includes('not a valid url component') ? 'bad percent-encoding' : err.code}`, 'bad_request'));
      }
    },
  });
  limitConnections(app.server, deps.settings.HTTP_MAX_CONNECTIONS, deps.logger as FastifyBaseLogger, 'http');
  app.decorate('instance', randomUUID());
  const users = deps.users ?? userDirectory(deps.database);
  app.decorate('users', users);
  // Every route with the access it declares, in the order registered: the access matrix, the
  // request-line test and docs/access.md are made from this table. A route that declares no access
  // (or an unknown one) stops the app here, naming the route: nothing is public by omission.
  const routeTable: RouteEntry[] = [];
  app.decorate('routeTable', routeTable);
  app.addHook('onRoute', function (r) {
    const contextual = (this as FastifyInstance & { [CONTEXT_ACCESS]?: Access })[CONTEXT_ACCESS];
    if (r.config?.access === undefined && contextual !== undefined) r.config = { ...r.config, access: contextual };
    const access = r.config?.access;
    for (const method of [r.method].flat()) {
      const refused = undeclaredAccess(method, r.url, access);
      if (refused) throw new Error(refused);
      if (method === 'HEAD') continue;
      const summary = (r.schema as { summary?: unknown } | undefined)?.summary;
      routeTable.push({ method, url: r.url, access: access!, sse: Boolean((r as { sse?: unknown }).sse), ...(typeof summary === 'string' ? { summary } : {}) });
    }
  });

  installErrorHandling(app);
  // Routes read and ask through this (src/state/api-state.ts): they never hold the database.
  await app.register(statePlugin, { database: deps.database, sealer: deps.sealer, events: deps.events, settings: deps.settings });
  const metrics = new InstallerMetrics();
  await app.register(metricsPlugin, { metrics });
  await app.register(lastAnswerPlugin);
  // Server-sent events for job and log streams; routes send their own heartbeats.
  await app.register(fastifySSE, { heartbeatInterval: 15_000 });
  await app.register(authPlugin, {
    jwtSecret: deps.jwtSecret,
    serviceTokens: deps.serviceTokens,
    serviceActorName: deps.settings.SERVICE_ACTOR_NAME,
    tokenTtlSeconds: deps.settings.TOKEN_TTL_SECONDS,
    users,
  });
  // Caps on live streams per caller and in all, checked after the caller is known.
  await app.register(streamLimitsPlugin, { perPrincipal: deps.settings.STREAMS_PER_PRINCIPAL, total: deps.settings.STREAMS_TOTAL });
  await app.register(fastifySwagger, {
    openapi: {
      info: { title: 'Installer API', version: '1' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT or service token' } } },
      security: [{ bearer: [] }],
    },
    transform: jsonSchemaTransform,
  });

  // A controllers-only process (INSTALLER_ROLE=controllers) answers only what its container's
  // healthcheck asks (docs/adr/0024-api-and-controllers-roles.md).
  if (deps.settings.INSTALLER_ROLE === 'controllers') {
    await app.register(async (api) => {
      api.setValidatorCompiler(validatorCompiler);
      api.setSerializerCompiler(serializerCompiler);
      await api.register(healthRoutes, { reconciling: deps.reconciling });
    });
    return app;
  }
  await app.register(async (api) => {
    api.setValidatorCompiler(validatorCompiler);
    api.setSerializerCompiler(serializerCompiler);
    await api.register(healthRoutes, { reconciling: deps.reconciling });
    await api.register(versionRoutes);
    await api.register(authRoutes, { jwtSecret: deps.jwtSecret });
    await api.register(userRoutes);
    await api.register(jobRoutes);
    await api.register(jobStreamRoutes);
    await api.register(auditRoutes);
    await api.register(statusRoutes);
    await api.register(platformConfigRoutes);
    await api.register(migrateRoutes);
    await api.register(logRoutes, { logs: deps.logs });
    await api.register(machineRoutes, { machines: deps.machines });
    await api.register(systemRoutes);
    await api.register(updateHistoryRoutes);
    await api.register(preflightReportRoutes);
    await api.register(updatePolicyRoutes);
    await api.register(observabilityRoutes, { metrics, diagnostics: deps.diagnostics });
    await api.register(tlsRoutes, { tls: deps.tls });
    await api.register(notificationRoutes);
  });
  // The API document (collected by @fastify/swagger above), public when served: it holds no data.
  // A context of its own gives the viewer's routes their declared access; its answers carry a CSP.
  if (apiDocsOn(deps.settings)) {
    await app.register(async (docs) => {
      declareAccess(docs, 'public');
      await docs.register(fastifySwaggerUi, { routePrefix: '/api/docs', staticCSP: API_DOCS_CSP, uiConfig: { validatorUrl: null } });
    });
  }
  // The operator UI, outside the /api context: its catch-all never answers for /api paths.
  await app.register(uiRoutes, deps.uiDir ? { root: deps.uiDir } : {});
  return app;
}

// The composition root: builds the adapters, the job event log and the controllers from booted
// settings, and the dependencies the API receives. main.ts and the tests wire through here alike.
import { hostname } from 'node:os';
import type { Booted } from './boot.ts';
import type { Settings } from './config.ts';
import type { Database } from './db/database.ts';
import { connectEngine, EngineRuntime, projectContainers, pruneDanglingImages, watchProjectEvents } from './adapters/docker-engine.ts';
import { installerEnvFor, PlatformFiles } from './adapters/platform-files.ts';
import { HostRunner } from './adapters/host-runner.ts';
import { ContainerLogs, SwarmServiceLogs } from './adapters/container-logs/index.ts';
import { JobEventLog } from './state/job-events.ts';
import { Sealer } from './state/platform-config.ts';
import { RecentLines } from './logger.ts';
import { ServiceTokens } from './adapters/secrets.ts';
import { engineFacts } from './adapters/diagnostics.ts';
import { readSwarmState } from './adapters/swarm-state.ts';
import { Controllers } from '../controllers/index.ts';
import { retentionQueue } from '../controllers/retention.ts';
import type { Observer } from '../controllers/observer.ts';
import { platformSignaturePolicy, resolveChannel, signaturePolicy } from './config.ts';
import { ImageSignatures } from './adapters/signatures.ts';
import { SwarmStack } from './adapters/swarm-stack.ts';
import { PlatformImageSignatures } from './adapters/platform-images.ts';
import { DockerSelfUpdateEngine, type SelfUpdateEngine } from './adapters/self-update.ts';
import { EmbeddedBackup, PostgresContainerBackup, type DatabaseBackup } from './adapters/database-backup.ts';
import { machineCharts } from './state/machine-instances.ts';
import { flattenChart, SPECS } from '../machines/catalog.ts';
import { userDirectory, type AppDeps } from './api/app.ts';
import { localSocketPath, serveLocalSocket } from './adapters/local-socket.ts';
import { runUserCommand, userCommandSchema } from './state/user-commands.ts';
import type { ContainerView, PlatformPort, RuntimePort } from './contracts/ports.ts';
import type { Kysely } from 'kysely';
import type { DB } from './db/schema.ts';
import type { Backoff } from '../controllers/runtime/reconcile.ts';

export interface Wired {
  deps: AppDeps;
  /** Every reconciler of this process (one per kind); `start` starts them all. */
  controllers: Controllers;
  /** Writes observed state (docs/adr/0023-observed-state.md); started with the controllers. */
  observer: Observer;
  /** Registry, compose files and helper of the self-update, as the controllers and the observer use them. */
  selfUpdateEngine: SelfUpdateEngine;
  events: JobEventLog;
  /** The host migration's runner, as the jobs controller uses it. */
  hostRunner: HostRunner;
  /** The retention passes; `start` starts them where the controllers run. */
  retention: { start(): Promise<void>; stop(): Promise<void>; idle(): Promise<void> };
  /** Closes what a restart interrupted (database only); before the API answers. `start` does it too. */
  prepare(): Promise<void>;
  /**
   * Starts the controllers and the retention passes (in the background: never awaited); call once
   * the database is migrated. Resolved: this process reconciles (its health says so).
   */
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** The runtime's retries and watchdog (tests shorten them), and the database the controllers see (tests put faults in it). */
export interface ReconcileOptions {
  backoff?: Backoff;
  watchdogMs?: number;
  db?: (db: Kysely<DB>) => Kysely<DB>;
}

export interface WireOptions {
  runtime?: RuntimePort;
  /** The platform's containers as the observer reads them; default: the engine's (tests whose log routes stand in for the engine give theirs). */
  platformContainers?: () => Promise<ContainerView[]>;
  selfUpdateEngine?: SelfUpdateEngine;
  tlsFingerprint256?: string | null;
  reconcile?: ReconcileOptions;
}

export function wire(b: Booted, opts: WireOptions = {}): Wired {
  const { settings, database } = b;
  const secrets = secretsInUse(b);
  const engine = engineAdapters(b, opts);
  // The controllers' database, and their job events' (the same, unless a test puts faults in it).
  const reconcileDb = opts.reconcile?.db?.(database.db) ?? database.db;
  const events = new JobEventLog(reconcileDb, { scrub: secrets.scrub, memoryRetentionMs: settings.JOB_MEMORY_RETENTION_MINUTES * 60_000 });
  const controllers = reconcilers(b, opts, { reconcileDb, events, secrets, engine });
  const retention = retentionPasses(b);
  const users = userDirectory(database);
  const deps = apiDeps(b, { events, secrets, engine, users });
  const socket = userSocket(b, users);
  let unfollow: (() => Promise<void>) | undefined;
  return {
    deps,
    controllers,
    observer: controllers.observer,
    selfUpdateEngine: engine.selfUpdateEngine,
    events,
    hostRunner: engine.hostRunner,
    retention,
    async prepare() {
      if (settings.INSTALLER_ROLE !== 'api') await controllers.prepare();
    },
    async start() {
      await Promise.all([
        settings.INSTALLER_ROLE !== 'api' ? retention.start() : undefined,
        // The API's streams hear of events stored by whichever process runs the controllers.
        settings.INSTALLER_ROLE !== 'controllers' ? events.follow((c, n) => database.listen(c, n)).then((u) => void (unfollow = u)) : undefined,
        // Every reconciler, the observer (the one writer of observed state) among them.
        settings.INSTALLER_ROLE !== 'api' ? controllers.start() : undefined,
      ]);
      await socket.open();
    },
    async stop() {
      await socket.close();
      await retention.stop();
      await retention.idle();
      await controllers.stop();
      // Nothing observes any more: what the engine keeps for this process goes.
      await engine.selfUpdateEngine.close?.();
      await unfollow?.();
      unfollow = undefined;
    },
  };
}

type Users = ReturnType<typeof userDirectory>;

interface SecretsInUse {
  /** Removes every known secret value from a text (one set for every scrubber, boot's included). */
  scrub: (text: string) => string;
  serviceTokens: ServiceTokens;
  sealer: Sealer;
}

/** The service token (watched for rotation), the sealer of stored secrets, and the scrubber that knows them all. */
function secretsInUse({ secrets, logger, secretSet }: Booted): SecretsInUse {
  const serviceTokens = new ServiceTokens({
    initial: secrets.serviceToken,
    file: secrets.serviceTokenWatchFile ?? null,
    // A rotated-in service token joins the scrubber's set before use.
    learn: (t) => secretSet.add(t),
    warn: (details, message) => logger.warn(details, message),
    info: (details, message) => logger.info(details, message),
  });
  return { scrub: secretSet.scrub, serviceTokens, sealer: new Sealer(secrets.encryptionKey) };
}

interface EngineAdapters {
  docker: ReturnType<typeof connectEngine>;
  runtime: RuntimePort;
  platformFiles: PlatformFiles;
  platform: PlatformPort;
  hostRunner: HostRunner;
  selfUpdateSettings: SelfUpdateSettings;
  selfUpdateEngine: SelfUpdateEngine;
}

type SelfUpdateSettings = ReturnType<typeof selfUpdateSettingsOf>;

/** The Docker engine and what acts through it: the installer's runtime, the platform's files, the host runner, the self-update. */
function engineAdapters({ settings, database }: Booted, opts: WireOptions): EngineAdapters {
  const docker = connectEngine(settings.DOCKER_SOCKET);
  const platformFiles = new PlatformFiles(settings.PLATFORM_DIR, settings.PLATFORM_PROJECT, settings.DOCKER_SOCKET, { pins: settings.PLATFORM_TEMPLATES_SHA256 });
  const runtime = opts.runtime ?? new EngineRuntime(docker, `${settings.INSTALLER_REGISTRY}/${settings.INSTALLER_IMAGE_NAME}`);
  const hostRunner = new HostRunner(docker, {
    image: async () => {
      if (settings.MIGRATE_RUNNER_IMAGE) return settings.MIGRATE_RUNNER_IMAGE;
      const v = await runtime.version();
      if (!v.imageId) throw new Error('the installer does not run in a container, so there is no installer image to run the migration from: set MIGRATE_RUNNER_IMAGE');
      return v.imageId;
    },
    privileged: settings.MIGRATE_RUNNER_PRIVILEGED,
    pidMode: settings.MIGRATE_RUNNER_PID_MODE,
    env: settings.MIGRATE_HOST_STOP_TIMEOUT ? { STOP_TIMEOUT: String(settings.MIGRATE_HOST_STOP_TIMEOUT) } : {},
  });
  const selfUpdateSettings = selfUpdateSettingsOf(settings);
  const selfUpdateEngine = opts.selfUpdateEngine ?? new DockerSelfUpdateEngine(docker, selfUpdateSettings, runtime, databaseBackupOf(database, docker, settings));
  const platform: PlatformPort = {
    project: settings.PLATFORM_PROJECT,
    runtime: settings.PLATFORM_RUNTIME,
    services: () => platformFiles.services(),
    containers: opts.platformContainers ?? (() => projectContainers(docker, settings.PLATFORM_PROJECT)),
    // The stack PLATFORM_PROJECT on the Swarm whose manager is the engine at DOCKER_SOCKET.
    swarm: () => readSwarmState(docker, settings.PLATFORM_PROJECT),
    readEnv: () => platformFiles.readEnv(),
  };
  return { docker, runtime, platformFiles, platform, hostRunner, selfUpdateSettings, selfUpdateEngine };
}

function selfUpdateSettingsOf(settings: Settings) {
  return {
    repository: `${settings.INSTALLER_REGISTRY}/${settings.INSTALLER_IMAGE_NAME}`,
    project: settings.INSTALLER_PROJECT,
    workDir: settings.INSTALLER_WORK_DIR,
    composeFile: settings.INSTALLER_COMPOSE_FILE,
    stagingRoot: settings.STAGING_ROOT,
    rollbackTag: settings.SELF_UPDATE_ROLLBACK_TAG,
    dockerSocket: settings.DOCKER_SOCKET,
    publishedComposeUrl: settings.PUBLISHED_COMPOSE_URL,
    publishedComposeSha256: settings.PUBLISHED_COMPOSE_SHA256,
    waitTimeoutSeconds: settings.SELF_UPDATE_WAIT_TIMEOUT_SECONDS,
    initTimeoutSeconds: settings.SELF_UPDATE_INIT_TIMEOUT_SECONDS,
    backupsKeep: settings.SELF_UPDATE_BACKUPS_KEEP,
  };
}

/** Every reconciler of this process, one per kind: jobs, self-update, notifications and the observer. */
function reconcilers(
  { settings, logger, database }: Booted,
  opts: WireOptions,
  { reconcileDb, events, secrets, engine }: { reconcileDb: Kysely<DB>; events: JobEventLog; secrets: SecretsInUse; engine: EngineAdapters },
): Controllers {
  const { docker, runtime, platform, selfUpdateEngine, selfUpdateSettings } = engine;
  // The same check in preflight and in the update check (docs/adr/0053-signed-builds.md).
  const endpoints = settings.SIGNATURE_REGISTRY_ENDPOINTS ? { endpoints: settings.SIGNATURE_REGISTRY_ENDPOINTS } : {};
  const signatures = new ImageSignatures(signaturePolicy(settings), settings.SIGNATURE_PUBLIC_KEYS_FILE, endpoints);
  // The platform's images, against the platform's own keys, in the jobs that pull or start them.
  const platformKeys = new ImageSignatures(platformSignaturePolicy(settings), settings.PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE, { ...endpoints, keysSetting: 'PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE' });
  const { scrub, sealer, serviceTokens } = secrets;
  return new Controllers({
    db: reconcileDb,
    ...(opts.reconcile?.backoff ? { backoff: opts.reconcile.backoff } : {}),
    ...(opts.reconcile?.watchdogMs !== undefined ? { watchdogMs: opts.reconcile.watchdogMs } : {}),
    listen: (c, n) => database.listen(c, n),
    events,
    logger,
    workerId: `${hostname()}:${process.pid}`,
    jobs: {
      platform: engine.platformFiles,
      sealer,
      pruneImages: () => pruneDanglingImages(docker),
      hungMinutes: settings.HUNG_JOB_MINUTES,
      templatesUrl: settings.PLATFORM_TEMPLATES_URL,
      installerEnv: () => installerEnvFor(settings.PLATFORM_INSTALLER_URL, serviceTokens.current(), opts.tlsFingerprint256 ?? null),
      hostRunner: engine.hostRunner,
      migrateHostScriptPath: settings.MIGRATE_HOST_SCRIPT_PATH,
      platformImages: new PlatformImageSignatures(docker, engine.platformFiles, platformKeys),
      swarm: settings.PLATFORM_RUNTIME === 'swarm'
        ? { db: reconcileDb, stack: new SwarmStack(docker, () => engine.platformFiles.target(), settings.PLATFORM_PROJECT, () => engine.platformFiles.readEnv()), target: () => engine.platformFiles.target(), convergeSeconds: settings.PLATFORM_CONVERGE_TIMEOUT_SECONDS }
        : undefined,
    },
    selfUpdate: { engine: selfUpdateEngine, runtime, settings: selfUpdateSettings, channel: settings.INSTALLER_CHANNEL, scrub, signatures },
    notifications: {
      timeoutMs: settings.WEBHOOK_TIMEOUT_MS,
      retry: { baseMs: settings.WEBHOOK_RETRY_BASE_MS, maxMs: settings.WEBHOOK_RETRY_MAX_MS, giveUpMs: settings.WEBHOOK_GIVE_UP_MINUTES * 60_000 },
      scrub,
    },
    observe: {
      runtime,
      platform,
      seal: (plain) => sealer.seal(plain),
      installerProject: settings.INSTALLER_PROJECT,
      engine: { facts: () => engineFacts(docker), installerContainers: () => projectContainers(docker, settings.INSTALLER_PROJECT) },
      selfUpdate: selfUpdateEngine,
      signatures,
      repository: selfUpdateSettings.repository,
      channelOf: (tag) => resolveChannel(settings, tag),
      slowMs: settings.OBSERVED_CHANNEL_MAX_AGE_SECONDS * 1000,
      // On a Swarm, the stack's service and node events wake the platform's observation too.
      watch: (projects, onEvent, onEnd) =>
        watchProjectEvents(docker, projects, onEvent, onEnd, settings.PLATFORM_RUNTIME === 'swarm' ? { stacks: [settings.PLATFORM_PROJECT] } : {}),
    },
  });
}

/** The retention passes; they run where the controllers do (docs/adr/0043-healthy-means-reconciling.md). */
function retentionPasses({ settings, logger, database }: Booted): Wired['retention'] {
  return retentionQueue({
    db: database.db,
    logger: logger.child({ controller: 'retention' }),
    limits: { jobEventDays: settings.JOB_EVENT_RETENTION_DAYS, batchRows: settings.RETENTION_BATCH_ROWS, batchTimeoutMs: settings.RETENTION_BATCH_TIMEOUT_MS },
    intervalMs: settings.RETENTION_INTERVAL_MINUTES * 60_000,
  });
}

/** What the API receives. */
function apiDeps(
  { settings, secrets: installerSecrets, logger, database, recentLogs }: Booted,
  { events, secrets, engine, users }: { events: JobEventLog; secrets: SecretsInUse; engine: EngineAdapters; users: Users },
): AppDeps {
  const { scrub, serviceTokens, sealer } = secrets;
  const recent = recentLogs ?? new RecentLines();
  return {
    users,
    // A Swarm stack's logs are its services' (every node's); a compose project's, its containers'.
    logs:
      settings.PLATFORM_RUNTIME === 'swarm'
        ? new SwarmServiceLogs(engine.docker, { scrub, warn: (details, message) => logger.warn(details, message) })
        : new ContainerLogs(engine.docker, { scrub, warn: (details, message) => logger.warn(details, message) }),
    settings,
    database,
    logger,
    jwtSecret: installerSecrets.jwtSecret,
    serviceTokens: () => serviceTokens.current(),
    events,
    sealer,
    // The graphs never change while the process runs: drawn once here.
    machines: machineCharts(database.db, SPECS.map((s) => ({ id: s.id, title: s.title, description: s.description, version: s.version, graph: flattenChart(s.machine) }))),
    diagnostics: {
      recentLogLines: () => recent.snapshot(),
      scrub,
    },
  };
}

/**
 * The local socket the `user` CLI hands its changes to, served where the database is embedded
 * (this process's alone); elsewhere the CLI writes to the database itself and this does nothing.
 */
function userSocket({ settings, logger, database }: Booted, users: Users): { open(): Promise<void>; close(): Promise<void> } {
  let close: (() => Promise<void>) | undefined;
  return {
    async open() {
      if (database.kind !== 'pglite') return;
      const log = logger.child({ component: 'local-socket' });
      close = await serveLocalSocket(
        localSocketPath(settings.DATA_DIR),
        async (raw) => {
          const parsed = userCommandSchema.safeParse(raw);
          if (!parsed.success) return { ok: false, output: 'the request is not a user command\n', exitCode: 2 };
          const cmd = parsed.data;
          const result = cmd.op === 'list' ? await runUserCommand(database.db, cmd) : await users.applying(cmd.username, () => runUserCommand(database.db, cmd));
          if (result.changed) {
            log.info({ actor: parsed.data.op === 'list' ? undefined : parsed.data.actor, ...result.changed }, 'user changed');
          }
          return result;
        },
        (err) => log.error({ err }, 'local socket request failed'),
      );
    },
    async close() {
      await close?.();
      close = undefined;
    },
  };
}

/**
 * The backup a self-update takes in preflight: pg_dump in the installer's Postgres container (as the
 * user and database of DATABASE_URL, over its local socket), or a copy of the embedded database.
 */
function databaseBackupOf(database: Database, docker: ReturnType<typeof connectEngine>, settings: Settings): DatabaseBackup | null {
  if (database.kind === 'pglite') return database.dumpDataDir ? new EmbeddedBackup(database.dumpDataDir, settings.SELF_UPDATE_BACKUPS_DIR) : null;
  if (!settings.DATABASE_URL) return null;
  const url = new URL(settings.DATABASE_URL);
  return new PostgresContainerBackup(docker, {
    project: settings.INSTALLER_PROJECT,
    user: decodeURIComponent(url.username) || 'postgres',
    database: decodeURIComponent(url.pathname.replace(/^\//, '')) || decodeURIComponent(url.username) || 'postgres',
  });
}

// What an update to the channel's newest build would do, read before it is started
// (docs/adr/0054-preflight-report.md): the facts the observer gathered about the running build and
// the target, and the checks made of them, each pass, warn or block with one sentence. One pure
// function makes the checks, so the API's report and anything else that reads it agree.
import { apiVersionAtLeast } from './engine-api.ts';
import { refusedBySignature, type SignatureObservation } from './signatures.ts';

export const CHECK_LEVELS = ['pass', 'warn', 'block'] as const;
export type CheckLevel = (typeof CHECK_LEVELS)[number];
export const REPORT_CHECKS = ['target', 'signature', 'compose', 'migrations', 'engine', 'disk', 'quarantine', 'policy'] as const;
export type ReportCheckId = (typeof REPORT_CHECKS)[number];

export interface ReportCheck {
  id: ReportCheckId;
  level: CheckLevel;
  sentence: string;
}

/** The label a build declares its version with, and the one naming the oldest engine API it runs on. */
export const VERSION_LABEL = 'org.opencontainers.image.version';
export const ENGINE_MIN_LABEL = 'io.installer.engine-api-min';

/** Free bytes where the next pre-switch backup goes, and its estimated size (null before there is anything to estimate from). */
export interface BackupRoom {
  free: number;
  estimate: { bytes: number; basis: string } | null;
}

/** What a build's image declares: its labels and the migrations it ships (contract steps marked). */
export interface BuildDeclaration {
  imageId: string;
  labels: Record<string, string>;
  /** By name (the file name without extension), in order. */
  migrations: { name: string; contract: boolean }[];
}

/** A migration the target would apply, as the migrations check names its steps. */
export interface PendingMigration {
  name: string;
  step: 'expand' | 'contract';
}

/** What the observer read of the target build (its image, once local). */
export interface TargetBuildFacts {
  version: string | null;
  /** The oldest engine API it declares (ENGINE_MIN_LABEL); null: it declares none. */
  engineApiMin: string | null;
  /** Its migrations not applied to this database, in order. */
  pendingMigrations: PendingMigration[];
}

/** What the observer gathers beside the channel for the report (the channel row's `preflight`). */
export interface ObservedPreflight {
  currentVersion: string | null;
  target: TargetBuildFacts | null;
  targetError: string | null;
  /** Unified, from the installed compose file to the target's published one; null when they are the same or could not be read. */
  composeDiff: string | null;
  disk: PreflightFacts['disk'];
}

/** The facts a report is made of; a fact that could not be read says why in its place. */
export interface PreflightFacts {
  channel: string | null;
  current: { digest: string | null; version: string | null };
  targetDigest: string | null;
  /** Null with `targetError` when the target build could not be read (not pulled yet, unreadable). */
  target: TargetBuildFacts | null;
  targetError: string | null;
  signature: SignatureObservation | null;
  compose: { changed: boolean | null; diff: string | null; error: string | null };
  /** The engine as observed, with the Compose CLI this build runs (reported, not checked: each build ships its own). */
  engine: { version: string; apiVersion: string; compose: string | null } | { error: string };
  /** Free bytes where the pre-switch backup goes, and its estimated size. */
  disk: { free: number; estimate: number | null; basis: string } | { error: string };
  quarantine: { reason: string; at: string } | null;
  policy: { mode: string; decision: string | null; detail: string | null } | null;
}

const mib = (n: number) => `${(n / 1024 / 1024).toFixed(n < 10 * 1024 * 1024 ? 1 : 0)} MiB`;

const named = (digest: string | null, version: string | null) => (digest ? `${version ? `${version} ` : ''}(${digest.slice(0, 19)}…)` : 'unknown');

/** The checks of an update from the facts, in REPORT_CHECKS order. */
export function preflightChecks(f: PreflightFacts): ReportCheck[] {
  const checks: ReportCheck[] = [];
  const add = (id: ReportCheckId, level: CheckLevel, sentence: string) => checks.push({ id, level, sentence });

  if (!f.targetDigest) add('target', 'warn', `the channel's newest build is not known${f.channel ? ` (${f.channel}-latest)` : ''}: a start cannot resolve what to install`);
  else if (f.targetDigest === f.current.digest) add('target', 'pass', `the installer already runs the newest build of ${f.channel}, ${named(f.current.digest, f.current.version)}: a start changes nothing`);
  else add('target', 'pass', `an update from ${named(f.current.digest, f.current.version)} to ${named(f.targetDigest, f.target?.version ?? null)}`);

  const sig = f.signature;
  if (!sig || sig.policy === 'off') add('signature', 'warn', 'the target build is not verified: no signing key is configured (SIGNATURE_PUBLIC_KEYS_FILE)');
  else if (!sig.verdict) add('signature', 'warn', 'nothing was verified: the target build is not known');
  else if (sig.verdict.result === 'verified') add('signature', 'pass', sig.verdict.detail);
  else if (refusedBySignature(sig)) add('signature', 'block', `not verified (${sig.verdict.result}): ${sig.verdict.detail}; SIGNATURE_POLICY=require refuses it`);
  else add('signature', 'warn', `not verified (${sig.verdict.result}): ${sig.verdict.detail}; SIGNATURE_POLICY=warn lets it through`);

  if (f.compose.changed === null) add('compose', 'warn', `the compose files could not be compared: ${f.compose.error ?? 'unknown'}`);
  else if (f.compose.changed) add('compose', 'pass', 'the update installs a changed compose file (the diff below)');
  else add('compose', 'pass', 'the compose file stays as it is');

  if (!f.target) add('migrations', 'warn', `the target's migrations are not known yet: ${f.targetError ?? 'its image is not read'}`);
  else {
    const m = f.target.pendingMigrations;
    const contract = m.filter((x) => x.step === 'contract');
    if (!m.length) add('migrations', 'pass', 'no schema migration to apply');
    else if (contract.length) add('migrations', 'warn', `${m.length} migration${m.length > 1 ? 's' : ''} to apply, ${contract.map((x) => x.name).join(', ')} a contract step: the build before it cannot serve the migrated schema, so a rollback needs the backup`);
    else add('migrations', 'pass', `${m.length} migration${m.length > 1 ? 's' : ''} to apply, each an expand step: the running build keeps serving while they run, and after a rollback`);
  }

  if ('error' in f.engine) add('engine', 'warn', `the Docker engine's version is not known: ${f.engine.error}`);
  else if (!f.target) add('engine', 'warn', `the engine is ${f.engine.version} (API ${f.engine.apiVersion}); the target's minimum is not known yet`);
  else if (!f.target.engineApiMin) add('engine', 'pass', `the engine is ${f.engine.version} (API ${f.engine.apiVersion}); the target declares no minimum`);
  else if (apiVersionAtLeast(f.engine.apiVersion, f.target.engineApiMin)) add('engine', 'pass', `the engine is ${f.engine.version} (API ${f.engine.apiVersion}); the target needs API ${f.target.engineApiMin} or newer`);
  else add('engine', 'block', `the engine is ${f.engine.version} (API ${f.engine.apiVersion}), below the API ${f.target.engineApiMin} the target needs: upgrade the engine first (docs/engines.md)`);

  if ('error' in f.disk) add('disk', 'warn', `the free space for the pre-switch backup is not known: ${f.disk.error}`);
  else if (f.disk.estimate === null) add('disk', 'pass', `${mib(f.disk.free)} is free for the pre-switch backup (${f.disk.basis})`);
  else if (f.disk.free < f.disk.estimate) add('disk', 'block', `the pre-switch backup needs about ${mib(f.disk.estimate)} (${f.disk.basis}) and ${mib(f.disk.free)} is free: free space or lower SELF_UPDATE_BACKUPS_KEEP`);
  else if (f.disk.free < 2 * f.disk.estimate) add('disk', 'warn', `${mib(f.disk.free)} is free for a pre-switch backup of about ${mib(f.disk.estimate)} (${f.disk.basis}): less than two backups' room`);
  else add('disk', 'pass', `${mib(f.disk.free)} is free for a pre-switch backup of about ${mib(f.disk.estimate)} (${f.disk.basis})`);

  if (f.quarantine) add('quarantine', 'warn', `the target build is quarantined (${f.quarantine.reason}, since ${f.quarantine.at}): the update policy never starts it; a start by hand still may`);
  else add('quarantine', 'pass', 'the target build is not quarantined');

  if (!f.policy) add('policy', 'pass', 'the update policy has not decided on this build yet');
  else if (f.policy.detail) add('policy', 'pass', `the update policy: ${f.policy.detail}`);
  else add('policy', 'pass', `the update policy (${f.policy.mode}) ${f.policy.decision ? `decided ${f.policy.decision}` : 'has not decided yet'}`);
  return checks;
}

// The self-update's preflight steps: the actors its chart (machines/self-update.machine.ts) invokes
// in order (target, preconditions, backup, pull, tags, staged compose file, audit row, helper), and
// the undo of what they changed. Each is one step on the engine, the registry or the database; the
// chart decides which runs next. A part of the self-update reconciler (controllers/self-update.ts
// runs the chart), which alone imports it.
import { fromPromise } from 'xstate';
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DB } from '../../src/db/schema.ts';
import type { RuntimePort } from '../../src/contracts/ports.ts';
import { NOT_VERIFIED, type SignaturePort } from '../../src/contracts/signatures.ts';
import { resolveChannel } from '../../src/config.ts';
import { currentMigration } from '../../src/db/migrate.ts';
import { recordFinished, recordStarted } from '../../src/state/actions.ts';
import { conflictOf } from '../../src/state/exclusion.ts';
import { reportBlocks } from '../../src/state/preflight.ts';
import { activeQuarantine, liftQuarantine } from '../../src/state/update-policy.ts';
import { POLICY_ACTOR } from '../../src/auth/actor.ts';
import { conflict } from '../../src/errors.ts';
import { getSelfUpdate, updateSelfUpdate, type SelfUpdateView } from '../../src/state/self-update.ts';
import type { NewJobEvent } from '../../src/state/job-events.ts';
import { type SelfUpdateEngine, type SelfUpdateSettings } from '../../src/adapters/self-update.ts';
import { BACKEND_SERVICE, helperSpec, HELPER_NAME } from '../../src/adapters/self-update-helper.ts';
import { sha256Of } from '../../src/adapters/compose-source.ts';
import type { PreflightChanges, RecordActionInput, RecordedAction, ResolvedTarget, RunningImage, UndoInput, UpdateTarget } from '../../machines/self-update.machine.ts';
import { alarmedBackups } from '../../src/state/backup-alarms.ts';
import { CHANGED_SCHEMA } from '../../machines/self-update-outcome.machine.ts';

export interface SelfUpdateDeps {
  db: Kysely<DB>;
  logger: Logger;
  engine: SelfUpdateEngine;
  runtime: RuntimePort;
  settings: SelfUpdateSettings;
  /** INSTALLER_CHANNEL; unset: the running tag's prefix. */
  channel: string | undefined;
  workerId: string;
  /** Aborted when the process stops: a running chart is stopped where it stands. */
  signal: AbortSignal;
  /** Added to the helper's two waits to get the time after which it is no longer waited for. */
  helperGraceMs?: number;
  /** Replaces secrets in the update's transcript (its job events). */
  scrub?: (text: string) => string;
  /** The chart's hung guard, in minutes (default 15); a step's deadline is one minute past it. */
  hungMinutes?: number;
  /** The target build's signature check (docs/adr/0053-signed-builds.md); absent: not checked. */
  signatures?: SignaturePort;
}

/** A transcript line: an `output` event as compose jobs write them. */
export const outputLine = (line: string, stream: 'stdout' | 'stderr' = 'stdout'): NewJobEvent => ({ type: 'output', payload: { line, stream } });

/** The update policy's own start. (A request from before actor kinds were recorded, by the policy's id, was the policy's.) */
const startedByPolicy = (req: SelfUpdateView): boolean => req.actor === POLICY_ACTOR.id && (req.actorKind ?? POLICY_ACTOR.kind) === POLICY_ACTOR.kind;

/** What the steps of one request's preflight share. */
export interface PreflightRun {
  req: SelfUpdateView;
  log: Logger;
  /** Appends to the update's transcript (its job events); a failure is logged, never thrown. */
  say: (...events: NewJobEvent[]) => Promise<void>;
  /** Notes a change before it is made, with what stood before (the undo puts it back). */
  noteChange: (key: keyof PreflightChanges, before: string | null) => Promise<void>;
}

/** The chart's actors for one request's preflight. */
export function preflightActors(d: SelfUpdateDeps, { req, log, say, noteChange }: PreflightRun) {
  const { db, engine, runtime, settings } = d;
  const id = req.requestId;
  const repository = settings.repository;
  return {
    resolveTarget: fromPromise<ResolvedTarget, undefined>(async () => {
      const v = await runtime.version();
      const channel = resolveChannel({ INSTALLER_CHANNEL: d.channel }, v.tag);
      if (!channel) throw new Error(`the channel is unknown: INSTALLER_CHANNEL is not set and the running tag (${v.tag ?? 'none'}) has no channel prefix`);
      const tag = `${channel}-latest`;
      const digest = await engine.remoteDigest(`${repository}:${tag}`, v.digest);
      await updateSelfUpdate(db, id, { channel, targetTag: tag, targetDigest: digest, previousReference: v.image, previousDigest: v.digest, previousImageId: v.imageId });
      const running: RunningImage = { inContainer: v.inContainer, reference: v.image, tag: v.tag, digest: v.digest, imageId: v.imageId };
      return { running, target: { channel, tag, digest } };
    }),
    checkPreconditions: fromPromise<void, { running: RunningImage | null; target: UpdateTarget | null }>(async ({ input }) => {
      const r = input.running;
      await checkDecided(d, req, input.target);
      if (input.target) {
        await checkSignature(d, input.target, say, log);
        // What the preflight report blocks (docs/adr/0054-preflight-report.md), as the last observation
        // of this build found it; its signature was checked live just above.
        const blocks = await reportBlocks(db, input.target.digest, ['signature']);
        if (blocks.length) throw conflict(`the preflight report blocks it: ${blocks.map((b) => `${b.id}: ${b.sentence}`).join('; ')}`);
      }
      if (!r?.inContainer || !r.imageId) throw new Error('the installer does not run in a container: there is no image to pin and no compose project to switch');
      const own = await engine.ownCompose();
      if (!own || own.project !== settings.project) {
        throw new Error(`this backend's container belongs to compose project ${own?.project ?? '(none)'}, not INSTALLER_PROJECT=${settings.project}: the helper would switch the wrong project`);
      }
      if (own.service !== BACKEND_SERVICE) throw new Error(`this backend runs as compose service ${own.service ?? '(none)'}, not ${BACKEND_SERVICE}`);
      const problem = await conflictOf(db, { kind: 'update', own: id });
      if (problem) throw conflict(problem);
    }),
    // PUBLISHED_COMPOSE_URL when set, else the file the target image (just pulled) ships.
    fetchPublishedCompose: fromPromise<string, { target: UpdateTarget; imageId: string }>(({ input }) => engine.publishedComposeOf(input.target.channel, input.imageId)),
    // Before anything is changed; the backup's name goes on the row for the schema alarm.
    backupDatabase: fromPromise<string, { running: RunningImage; target: UpdateTarget }>(async ({ input }) => {
      const from = input.running.digest ?? input.running.imageId;
      // Retention keeps the backups unresolved schema alarms name, whatever their age.
      const b = await engine.backupDatabase(from, settings.backupsKeep ?? 5, await alarmedBackups(db, CHANGED_SCHEMA));
      await updateSelfUpdate(db, id, { backupFile: b.file });
      log.info({ backup: b.file, removed: b.removed }, `database backed up before the update: ${b.file}`);
      if (b.pruneProblem) log.warn({ backup: b.file }, `older database backups could not be removed: ${b.pruneProblem}`);
      return b.file;
    }),
    pullTarget: fromPromise<string, { target: UpdateTarget }>(async ({ input }) => {
      const ref = `${repository}@${input.target.digest}`;
      log.info({ digest: input.target.digest }, `pulling ${ref}`);
      // The pull by digest reports no layers: the target's pull is one bar, begun and done (the
      // viewer shows `Pulled` as done, as the engine words a finished pull).
      await say({ type: 'progress', payload: { id: ref, status: 'Pulling' } }, outputLine(`pulling ${ref}`));
      const imageId = await engine.pullByDigest(repository, input.target.digest);
      await updateSelfUpdate(db, id, { targetImageId: imageId });
      await say({ type: 'progress', payload: { id: ref, status: 'Pulled' } }, outputLine(`pulled ${ref}: image ${imageId}`));
      return imageId;
    }),
    tagRollback: fromPromise<{ before: string | null }, { running: RunningImage }>(async ({ input }) => {
      const before = await engine.imageIdOf(`${repository}:${settings.rollbackTag}`);
      await noteChange('rollbackTag', before);
      await engine.tag(input.running.imageId!, repository, settings.rollbackTag);
      return { before };
    }),
    stageComposeFile: fromPromise<{ before: string | null }, { content: string }>(async ({ input }) => {
      const before = await engine.readStaged();
      await noteChange('stagedFile', before);
      // Recorded before the write: the helper installs the staged file only if it has this digest.
      await updateSelfUpdate(db, id, { stagedComposeSha256: sha256Of(input.content) });
      await engine.writeStaged(input.content);
      return { before };
    }),
    tagNew: fromPromise<{ before: string | null }, { target: UpdateTarget; imageId: string }>(async ({ input }) => {
      const before = await engine.imageIdOf(`${repository}:${input.target.tag}`);
      await noteChange('newTag', before);
      await engine.tag(input.imageId, repository, input.target.tag);
      return { before };
    }),
    recordAction: fromPromise<RecordedAction, RecordActionInput>(async ({ input }) => {
      const preUpdateMigration = await currentMigration(db);
      const from = input.running.digest ?? input.running.imageId ?? 'unknown';
      // One transaction: a restart between the two would leave an audit row `started` that no
      // request refers to, which nothing would ever finish.
      const recorded = await db.transaction().execute(async (tx) => {
        const action = await recordStarted(tx, {
          kind: 'self-update',
          actor: { id: req.actor, email: req.actorEmail, kind: req.actorKind },
          // The audit row links the update's transcript.
          jobId: req.jobId,
          targetDigest: input.target.digest,
          schemaMigration: preUpdateMigration,
          detail: `from ${input.running.reference ?? 'unknown'} (${from}) to ${repository}:${input.target.tag} (${input.target.digest})`,
        });
        const actionId = String(action.id);
        await updateSelfUpdate(tx, id, { actionId, preUpdateMigration });
        // Someone started this build by hand, past preflight: its quarantine is lifted, by them
        // (docs/update-policy.md). The policy's own start never lifts one.
        if (!startedByPolicy(req) && (await liftQuarantine(tx, input.target.digest, { id: req.actor, email: req.actorEmail }))) {
          log.info({ digest: input.target.digest, by: req.actor }, 'quarantine lifted by a manual self-update');
        }
        return { actionId, preUpdateMigration };
      });
      return recorded;
    }),
    removeLeftoverHelper: fromPromise<void, undefined>(async () => {
      if (await engine.removeHelper()) log.info(`removed a leftover ${HELPER_NAME}`);
    }),
    spawnHelper: fromPromise<string, { target: UpdateTarget }>(async ({ input }) => {
      // The digest recorded when the file was staged, read back from the row: the helper checks it.
      const staged = (await getSelfUpdate(db, id))?.stagedComposeSha256 ?? null;
      if (!staged) throw new Error('no digest of the staged compose file is recorded: the helper would have nothing to check it against');
      const spec = helperSpec(settings, input.target, id, staged);
      const containerId = await engine.spawnHelper(spec);
      log.info({ containerId, image: spec.image, cmd: spec.cmd }, `started ${HELPER_NAME}`);
      await say(
        { type: 'phase', payload: { phase: 'helper-started', container: HELPER_NAME, containerId, image: spec.image } },
        outputLine(`started ${HELPER_NAME} (${containerId.slice(0, 12)}) from ${spec.image}: ${spec.cmd.join(' ')}`),
        outputLine(`the installer restarts now; the helper's output follows once the new backend has read it`),
      );
      return containerId;
    }),
    undoPreflight: fromPromise<void, UndoInput>(({ input }) => undoPreflight(d, input)),
  };
}

/** Puts back what preflight changed, newest change first; finishes the audit row if one was written. */
export async function undoPreflight(d: SelfUpdateDeps, input: UndoInput): Promise<void> {
  const { engine } = d;
  const repository = d.settings.repository;
  const { changes, target } = input;
  const problems: string[] = [];
  const attempt = async (what: string, fn: () => Promise<void>) => {
    try {
      await fn();
    } catch (err) {
      problems.push(`${what}: ${(err as Error).message}`);
    }
  };
  if (changes.newTag && target) {
    const before = changes.newTag.before;
    await attempt(`restoring ${repository}:${target.tag}`, () => (before ? engine.tag(before, repository, target.tag) : engine.untag(`${repository}:${target.tag}`)));
  }
  if (changes.stagedFile) {
    const before = changes.stagedFile.before;
    await attempt('restoring the staged compose file', () => (before !== null ? engine.writeStaged(before) : engine.removeStaged()));
  }
  if (changes.rollbackTag) {
    const before = changes.rollbackTag.before;
    const tag = d.settings.rollbackTag;
    await attempt(`restoring ${repository}:${tag}`, () => (before ? engine.tag(before, repository, tag) : engine.untag(`${repository}:${tag}`)));
  }
  if (input.actionId) {
    await attempt('finishing the audit row', async () => {
      await recordFinished(d.db, input.actionId!, { status: 'failed', exitCode: null, detail: `aborted before the helper ran: ${input.detail ?? 'preflight failed'}` });
    });
  }
  if (problems.length) throw new Error(problems.join('; '));
}


/**
 * A start the update policy decided installs the digest it decided on, never a build the tag was
 * moved to since, and never a quarantined one (docs/adr/0044-restore-and-decided-digest.md).
 */
/**
 * The target build's signature, before anything changes (docs/adr/0053-signed-builds.md): under
 * `require` an unverified build aborts preflight naming the cause; under `warn` it goes on, with the
 * verdict in the transcript and the log; with no key the transcript says updates are not verified.
 */
async function checkSignature(d: SelfUpdateDeps, target: UpdateTarget, say: PreflightRun['say'], log: Logger): Promise<void> {
  const check = (await d.signatures?.check(`${d.settings.repository}:${target.tag}`, target.digest)) ?? { policy: 'off' as const };
  if (check.policy === 'off') {
    await say(outputLine(`signature: not checked: ${NOT_VERIFIED}`));
    return;
  }
  const v = check.verdict;
  await say(outputLine(`signature: ${v.result}: ${v.detail}`, v.result === 'verified' ? 'stdout' : 'stderr'));
  if (v.result === 'verified') return;
  // A block of the preflight report: refused as a conflict (409), as every block is.
  if (check.policy === 'require') throw conflict(`the target build is not verified (${v.result}): ${v.detail}; SIGNATURE_POLICY=require refuses it`);
  log.warn({ result: v.result, digest: target.digest }, `the target build is not verified, and SIGNATURE_POLICY=warn lets the update go on: ${v.detail}`);
}

async function checkDecided(d: SelfUpdateDeps, req: SelfUpdateView, target: UpdateTarget | null): Promise<void> {
  const repository = d.settings.repository;
  if (!target || (!req.decidedDigest && !startedByPolicy(req))) return;
  const problems: string[] = [];
  if (req.decidedDigest && req.decidedDigest !== target.digest) {
    problems.push(`the update policy decided on ${req.decidedDigest}, but ${repository}:${target.tag} now names ${target.digest}`);
  }
  const q = await activeQuarantine(d.db, target.digest);
  if (q) {
    const update = q.requestId ? `its update ${q.requestId}` : 'its update';
    problems.push(`${target.digest} is quarantined (${update} ended ${q.outcome} at ${q.since.toISOString()}): the update policy never starts it; an update started by hand lifts it`);
  }
  if (problems.length) throw new Error(problems.join('; '));
}

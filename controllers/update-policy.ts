// Reconciles the update policy (docs/update-policy.md): reads the policy row, the channel as the
// observer last saw it, the quarantine and what runs, asks the update-policy chart what to do, and
// does it: start a self-update through the same request the API's POST writes (so the same 409
// rules hold, decided in the database), or record that an update is available. Level-based: every
// wake reads everything again; it holds no state of its own but the clock.
import type { Kysely } from 'kysely';
import type { Logger } from 'pino';
import type { DB } from '../src/db/schema.ts';
import { POLICY_ACTOR } from '../src/auth/actor.ts';
import { AppError } from '../src/errors.ts';
import { refusedBySignature } from '../src/contracts/signatures.ts';
import { conflictOf } from '../src/state/exclusion.ts';
import { readObserved, requestRefresh } from '../src/state/observed.ts';
import { lastUpdate, requestSelfUpdate } from '../src/state/self-update.ts';
import {
  clearUpdateAvailable, dayNumbers, getUpdatePolicy, markUpdateAvailable, quarantinedDigests, recordPolicyAttempt, recordPolicyDecision,
} from '../src/state/update-policy.ts';
import { done, requeueAfter, type ReconcileResult, type Reconciler } from './runtime/reconcile.ts';
import { announcementOf, decide, nextWindowOpening, type PolicyDecision, type PolicyFacts } from '../machines/update-policy.machine.ts';

export interface UpdatePolicyDeps {
  db: Kysely<DB>;
  logger: Logger;
  signal: AbortSignal;
  /** The clock the window is read on (tests move it). */
  now?: () => Date;
  /**
   * Called once per new build the policy may announce (modes `notify` and `auto`), after the row
   * and NOTIFY `update_available` are written: where notifications plug in.
   */
  onUpdateAvailable?: (digest: string) => void | Promise<void>;
}

/** setTimeout's longest delay; a window always opens within a week, well below it. */
const MAX_TIMER_MS = 2 ** 31 - 1;

const DETAIL: Record<PolicyDecision, string> = {
  idle: 'not evaluated yet',
  manual: 'mode manual: updates are started by hand only',
  upToDate: 'the installer runs the newest build of its channel (or the channel is not known yet)',
  quarantined: 'the newest build is quarantined: its update rolled back or failed; only a manual update starts it',
  unverified: 'the newest build is not verified, and SIGNATURE_POLICY=require refuses it: nothing is started or announced',
  notifying: 'mode notify: an update is available; nothing is started automatically',
  outsideWindow: 'an update is available; it starts in the next maintenance window',
  busy: 'an update is available; a deployment job or a self-update runs: waiting for it to end',
  triedThisWindow: 'the policy already started this build in this window; it tries again in the next one',
  starting: 'starting a self-update to the newest build',
};

export class UpdatePolicyReconciler implements Reconciler<null> {
  readonly name = 'update-policy';
  private running: Promise<ReconcileResult> | null = null;

  constructor(private readonly d: UpdatePolicyDeps) {}

  /** In auto mode, how long until the window next opens: the runtime looks again then. */
  private untilOpening(facts: PolicyFacts): number | null {
    if (facts.mode !== 'auto') return null;
    const now = new Date(facts.now);
    const next = nextWindowOpening(now, facts.window);
    return next ? Math.min(MAX_TIMER_MS, next.getTime() - now.getTime() + 1_000) : null;
  }

  /** Single flight: a call during a run returns that run. A throw is the runtime's to retry. */
  reconcile(): Promise<ReconcileResult> {
    if (this.d.signal.aborted) return Promise.resolve(done());
    this.running ??= this.run().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  /** The facts the chart decides on, read from the rows. */
  private async facts(): Promise<{ facts: PolicyFacts; generation: number }> {
    const { db } = this.d;
    const [policy, channel, last, quarantined, conflict] = await Promise.all([
      getUpdatePolicy(db), readObserved(db, 'channel'), lastUpdate(db), quarantinedDigests(db), conflictOf(db, { kind: 'update' }),
    ]);
    // A channel row observed before the last update ended compares a build that no longer runs:
    // ask for a fresh one and decide nothing on this one.
    let currentDigest = channel?.data?.currentDigest ?? null;
    let remoteDigest = channel?.data?.remoteDigest ?? null;
    if (channel?.observedAt && last.at && last.status !== 'started' && channel.observedAt.getTime() < Date.parse(last.at)) {
      currentDigest = remoteDigest = null;
      await requestRefresh(db, 'channel');
    }
    const attempt = policy.status.lastAttempt;
    return {
      generation: policy.generation,
      facts: {
        now: (this.d.now?.() ?? new Date()).toISOString(),
        mode: policy.mode,
        window: { days: dayNumbers(policy.window.days), startHour: policy.window.startHour, endHour: policy.window.endHour },
        currentDigest,
        remoteDigest,
        quarantined,
        refused: refusedBySignature(channel?.data?.signature),
        jobRunning: conflict !== null,
        lastAttempt: attempt ? { digest: attempt.digest, at: attempt.at.toISOString() } : null,
      },
    };
  }

  private async run(): Promise<ReconcileResult> {
    const { db, logger } = this.d;
    const { facts, generation } = await this.facts();
    const untilOpening = this.untilOpening(facts);
    let decision = decide(facts);
    let detail = DETAIL[decision];
    const digest = facts.remoteDigest;
    if (decision === 'starting' && digest) {
      try {
        // The start carries the digest decided on: preflight installs that build or none, so a tag
        // moved since the observer's read cannot bring in another (docs/adr/0044-restore-and-decided-digest.md).
        // The attempt is recorded with the request or not at all: a throw between the two would
        // leave a request no attempt names, and the window would start another after it.
        const requestId = await requestSelfUpdate(db, POLICY_ACTOR, { decidedDigest: digest, withRequest: (tx, id) => recordPolicyAttempt(tx, digest, id) });
        detail = `started self-update request ${requestId} to ${digest}`;
        logger.info({ requestId, digest }, 'update policy started a self-update inside its maintenance window');
      } catch (err) {
        // A job or an update began between the look and the request: the database said no (409).
        if (!(err instanceof AppError) || err.code !== 'conflict') throw err;
        decision = 'busy';
        detail = `${DETAIL.busy} (${err.message})`;
      }
    }
    const announcement = announcementOf(decision);
    if (announcement === 'announce' && digest) {
      if (await markUpdateAvailable(db, digest)) {
        logger.info({ digest, decision }, 'update policy: a new installer build is available');
        await this.d.onUpdateAvailable?.(digest);
      }
    } else if (announcement === 'withdraw') {
      await clearUpdateAvailable(db);
    }
    await recordPolicyDecision(db, { generation, decision, detail });
    // The window's opening is a wake like the others, so a start does not wait for the slow poll.
    return untilOpening === null ? done() : requeueAfter(untilOpening, 'the maintenance window opens');
  }
}

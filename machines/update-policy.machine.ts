// The self-update policy's decision: given the policy, the channel's digests, the quarantine, the
// clock and what runs, whether to start an update now. Pure: the reconciler gathers the facts, sends
// them as EVALUATE, and acts on the state the chart lands in (docs/update-policy.md). The chart is
// the one statement of the rules: `decide` runs it as a pure transition, with no actor started.
import { assign, initialTransition, not, setup, transition, type SnapshotFrom } from 'xstate';

export const UPDATE_POLICY_CHART_VERSION = '3';

export type PolicyMode = 'manual' | 'notify' | 'auto';

/**
 * A weekly window in UTC. `days` are the days it opens on (0 = Sunday … 6 = Saturday); it is open
 * from `startHour`:00 to `endHour`:00 (exclusive). An end at or before the start means it closes on
 * the next day (22 → 2 opens on the day named and closes at 02:00 the day after).
 */
export interface PolicyWindow {
  days: readonly number[];
  startHour: number;
  endHour: number;
}

export interface PolicyFacts {
  /** The instant of the decision (ISO 8601). */
  now: string;
  mode: PolicyMode;
  window: PolicyWindow;
  /** What runs now, and what the channel offers, as the observer last saw them. */
  currentDigest: string | null;
  remoteDigest: string | null;
  /** Digests whose update rolled back or failed and that nobody lifted. */
  quarantined: readonly string[];
  /** The channel's newest build did not verify, and SIGNATURE_POLICY=require would refuse it (docs/adr/0053-signed-builds.md). */
  refused: boolean;
  /** A deployment job queued or running, or a self-update in flight. */
  jobRunning: boolean;
  /** The policy's own last start, whatever became of it. */
  lastAttempt: { digest: string; at: string } | null;
}

export const DECISIONS = ['idle', 'manual', 'upToDate', 'quarantined', 'unverified', 'notifying', 'outsideWindow', 'busy', 'triedThisWindow', 'starting'] as const;
export type PolicyDecision = (typeof DECISIONS)[number];

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** The instant the occurrence of the window that contains `now` opened, or null outside the window. */
export function windowOpenedAt(now: Date, w: PolicyWindow): Date | null {
  if (w.days.length === 0 || w.startHour === w.endHour) return null;
  const midnight = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  const length = ((w.endHour - w.startHour + 24) % 24) * HOUR || DAY;
  // The occurrence that opened today, or (crossing midnight) yesterday.
  for (const dayStart of [midnight, midnight - DAY]) {
    const opens = dayStart + w.startHour * HOUR;
    const day = new Date(dayStart).getUTCDay();
    if (w.days.includes(day) && now.getTime() >= opens && now.getTime() < opens + length) return new Date(opens);
  }
  return null;
}

export const inWindowAt = (now: Date, w: PolicyWindow): boolean => windowOpenedAt(now, w) !== null;

/** The next instant after `now` the window opens, or null when it never does (no day). */
export function nextWindowOpening(now: Date, w: PolicyWindow): Date | null {
  if (w.days.length === 0 || w.startHour === w.endHour) return null;
  const midnight = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  for (let d = 0; d <= 7; d++) {
    const dayStart = midnight + d * DAY;
    const opens = dayStart + w.startHour * HOUR;
    if (w.days.includes(new Date(dayStart).getUTCDay()) && opens > now.getTime()) return new Date(opens);
  }
  return null;
}

export type PolicyEvent = { type: 'EVALUATE'; facts: PolicyFacts };

export interface PolicyContext {
  facts: PolicyFacts | null;
}

const hasNewDigest = (f: PolicyFacts) => f.remoteDigest !== null && f.currentDigest !== null && f.remoteDigest !== f.currentDigest;

type Guarded = { context: PolicyContext };
const factsOf = ({ context }: Guarded): PolicyFacts => {
  if (!context.facts) throw new Error('update policy chart: no facts to decide on');
  return context.facts;
};

export const updatePolicyMachine = setup({
  types: { context: {} as PolicyContext, events: {} as PolicyEvent, tags: {} as 'announces' | 'withdraws' },
  actions: {
    remember: assign({ facts: ({ event }) => event.facts }),
  },
  guards: {
    manual: (a) => factsOf(a).mode === 'manual',
    notify: (a) => factsOf(a).mode === 'notify',
    newDigest: (a) => hasNewDigest(factsOf(a)),
    quarantined: (a) => {
      const f = factsOf(a);
      return f.remoteDigest !== null && f.quarantined.includes(f.remoteDigest);
    },
    refused: (a) => factsOf(a).refused,
    inWindow: (a) => inWindowAt(new Date(factsOf(a).now), factsOf(a).window),
    jobRunning: (a) => factsOf(a).jobRunning,
    // One automatic start per digest per opening of the window: a start whose preflight did not pass
    // (nothing changed) waits for the next window rather than being retried every wake.
    triedThisWindow: (a) => {
      const f = factsOf(a);
      const opened = windowOpenedAt(new Date(f.now), f.window);
      return !!f.lastAttempt && opened !== null && f.lastAttempt.digest === f.remoteDigest && Date.parse(f.lastAttempt.at) >= opened.getTime();
    },
  },
}).createMachine({
  id: 'updatePolicy',
  context: { facts: null },
  initial: 'idle',
  // Every evaluation decides again, from its facts alone, whatever was decided before.
  on: { EVALUATE: { target: '.deciding', actions: 'remember' } },
  states: {
    idle: {},
    // Transient: the first guard that holds names the decision.
    deciding: {
      always: [
        { guard: 'manual', target: 'manual' },
        { guard: not('newDigest'), target: 'upToDate' },
        // A build that did not stick is never started again, nor announced, until someone lifts it.
        { guard: 'quarantined', target: 'quarantined' },
        // Nor a build whose signature does not verify under `require`: preflight would refuse it.
        { guard: 'refused', target: 'unverified' },
        // `notify` only says an update is available; it never starts one.
        { guard: 'notify', target: 'notifying' },
        { guard: not('inWindow'), target: 'outsideWindow' },
        // The spec's 409: no update while a job is queued or running, nor a second one in flight.
        { guard: 'jobRunning', target: 'busy' },
        { guard: 'triedThisWindow', target: 'triedThisWindow' },
        { target: 'starting' },
      ],
    },
    // The decisions: each rests until the next evaluation. A new build is announced while one is
    // due (now or later); the announcement is withdrawn when none is, or the build is quarantined.
    manual: { tags: 'withdraws' },
    upToDate: { tags: 'withdraws' },
    quarantined: { tags: 'withdraws' },
    unverified: { tags: 'withdraws' },
    notifying: { tags: 'announces' },
    outsideWindow: { tags: 'announces' },
    busy: { tags: 'announces' },
    triedThisWindow: { tags: 'announces' },
    starting: { tags: 'announces' },
  },
});

/** The decision a snapshot of the chart rests in. */
function decisionOf(snapshot: SnapshotFrom<typeof updatePolicyMachine>): PolicyDecision {
  const value = snapshot.value;
  if (value === 'deciding') throw new Error('update policy chart: stopped while deciding');
  return value;
}

/** What a decision does to the announcement of the channel's newest build, as the chart tags it. */
export function announcementOf(decision: PolicyDecision): 'announce' | 'withdraw' | null {
  const { tags } = updatePolicyMachine.getStateNodeById(`updatePolicy.${decision}`);
  return tags.includes('announces') ? 'announce' : tags.includes('withdraws') ? 'withdraw' : null;
}

/** The decision for these facts: the chart's transition on EVALUATE from rest, pure (no actor). */
export function decide(f: PolicyFacts): PolicyDecision {
  const [rest] = initialTransition(updatePolicyMachine);
  const [decided] = transition(updatePolicyMachine, rest, { type: 'EVALUATE', facts: f });
  return decisionOf(decided);
}

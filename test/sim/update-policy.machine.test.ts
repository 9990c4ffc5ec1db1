// Simulation of the update policy's decision chart: generated paths check every decision against a
// model of the rules, and a week on a SimulatedClock (a wake every 5 minutes) shows a build that
// fails being attempted exactly once, a good one published later being attempted in the next window,
// nothing outside the window or while a job runs, and nothing at all in modes manual and notify.
import { describe, expect, it } from 'vitest';
import { createActor, SimulatedClock } from 'xstate';
import { getAdjacencyMap, getShortestPaths } from 'xstate/graph';
import {
  announcementOf, decide, DECISIONS, inWindowAt, nextWindowOpening, updatePolicyMachine, windowOpenedAt,
  type PolicyDecision, type PolicyEvent, type PolicyFacts, type PolicyMode, type PolicyWindow,
} from '../../machines/update-policy.machine.ts';
import { declaredEdges, edgeKey, enabledEdges, stateIds } from '../helpers/sim/chart.ts';

const MON = 1;
const WED = 3;
const FRI = 5;
/** Monday 23 November 2026, 00:00 UTC. */
const WEEK_START = Date.UTC(2026, 10, 23);
const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const at = (day: number, hour: number, minute = 0) => new Date(WEEK_START + (day - MON) * 24 * HOUR + hour * HOUR + minute * MINUTE);

const WINDOW: PolicyWindow = { days: [MON, WED, FRI], startHour: 2, endHour: 4 };
const base: PolicyFacts = {
  now: at(MON, 2, 30).toISOString(), mode: 'auto', window: WINDOW, currentDigest: 'sha256:v1', remoteDigest: 'sha256:v2',
  quarantined: [], refused: false, jobRunning: false, lastAttempt: null,
};
const evaluate = (patch: Partial<PolicyFacts>): PolicyEvent => ({ type: 'EVALUATE', facts: { ...base, ...patch } });

const EVENTS: PolicyEvent[] = [
  evaluate({}),
  evaluate({ mode: 'manual' }),
  evaluate({ mode: 'notify' }),
  evaluate({ remoteDigest: 'sha256:v1' }),
  evaluate({ remoteDigest: null }),
  evaluate({ quarantined: ['sha256:v2'] }),
  evaluate({ refused: true }),
  evaluate({ refused: true, mode: 'notify' }),
  evaluate({ now: at(MON, 4).toISOString() }),
  evaluate({ now: at(1 + MON, 2, 30).toISOString() }),
  evaluate({ jobRunning: true }),
  evaluate({ lastAttempt: { digest: 'sha256:v2', at: at(MON, 2, 5).toISOString() } }),
  // Tried in an earlier window, or another build: a new window, a new attempt.
  evaluate({ lastAttempt: { digest: 'sha256:v2', at: at(MON - 2, 3).toISOString() } }),
  evaluate({ lastAttempt: { digest: 'sha256:v1', at: at(MON, 2, 5).toISOString() } }),
];

/** The rules, in the order docs/update-policy.md gives them. */
function model(f: PolicyFacts): PolicyDecision {
  if (f.mode === 'manual') return 'manual';
  if (!f.remoteDigest || !f.currentDigest || f.remoteDigest === f.currentDigest) return 'upToDate';
  if (f.quarantined.includes(f.remoteDigest)) return 'quarantined';
  if (f.refused) return 'unverified';
  if (f.mode === 'notify') return 'notifying';
  const opened = windowOpenedAt(new Date(f.now), f.window);
  if (!opened) return 'outsideWindow';
  if (f.jobRunning) return 'busy';
  if (f.lastAttempt?.digest === f.remoteDigest && Date.parse(f.lastAttempt.at) >= opened.getTime()) return 'triedThisWindow';
  return 'starting';
}

describe('update policy chart', () => {
  it('reaches every decision and takes every declared transition', () => {
    const states = Object.values(getAdjacencyMap(updatePolicyMachine, { events: EVENTS })).map((v) => v.state);
    const reached = new Set<string>();
    for (const s of states) for (const n of s._nodes) reached.add(n.id);
    const taken = enabledEdges(states, EVENTS);
    // `deciding` is transient: each of its eventless branches ends in a decision, every one of which
    // is asserted reached (here and on the generated paths below).
    reached.add('updatePolicy.deciding');
    taken.add(edgeKey({ from: 'updatePolicy.deciding', event: '(always)' }));
    expect(reached).toEqual(new Set(stateIds(updatePolicyMachine)));
    expect(declaredEdges(updatePolicyMachine).map(edgeKey).filter((k) => !taken.has(k))).toEqual([]);
  });

  it('agrees with the model on every generated path, replayed on a live actor', () => {
    const paths = getShortestPaths(updatePolicyMachine, { events: EVENTS });
    const ends = new Set<string>();
    for (const p of paths) {
      const events = p.steps.map((s) => s.event).filter((e): e is PolicyEvent => e.type === 'EVALUATE');
      const actor = createActor(updatePolicyMachine).start();
      for (const e of events) actor.send(e);
      const last = events.at(-1);
      expect(actor.getSnapshot().value, JSON.stringify(last?.facts ?? 'start')).toBe(last ? model(last.facts) : 'idle');
      ends.add(String(actor.getSnapshot().value));
      actor.stop();
    }
    expect([...ends].sort()).toEqual(['busy', 'idle', 'manual', 'notifying', 'outsideWindow', 'quarantined', 'starting', 'triedThisWindow', 'unverified', 'upToDate']);
    // From every decision, every evaluation lands where the facts alone say.
    for (const from of EVENTS) {
      for (const e of EVENTS) {
        const actor = createActor(updatePolicyMachine).start();
        actor.send(from);
        actor.send(e);
        expect(actor.getSnapshot().value).toBe(model(e.facts));
        actor.stop();
      }
    }
  });

  it('declares the evaluation once, on the chart itself: every decision rests until the next one', () => {
    expect(declaredEdges(updatePolicyMachine).filter((e) => e.event === 'EVALUATE')).toEqual([{ from: 'updatePolicy', event: 'EVALUATE' }]);
  });

  it('tags each decision with what it does to the announcement of the newest build', () => {
    expect(Object.fromEntries(DECISIONS.map((d) => [d, announcementOf(d)]))).toEqual({
      idle: null, manual: 'withdraw', upToDate: 'withdraw', quarantined: 'withdraw', unverified: 'withdraw',
      notifying: 'announce', outsideWindow: 'announce', busy: 'announce', triedThisWindow: 'announce', starting: 'announce',
    });
  });

  it('reads the window in UTC, including one that crosses midnight', () => {
    expect(inWindowAt(at(MON, 1, 59), WINDOW)).toBe(false);
    expect(inWindowAt(at(MON, 2), WINDOW)).toBe(true);
    expect(inWindowAt(at(MON, 3, 59), WINDOW)).toBe(true);
    expect(inWindowAt(at(MON, 4), WINDOW)).toBe(false);
    expect(inWindowAt(at(MON + 1, 2, 30), WINDOW)).toBe(false);
    const night: PolicyWindow = { days: [FRI], startHour: 22, endHour: 3 };
    expect(windowOpenedAt(at(FRI, 23), night)).toEqual(at(FRI, 22));
    expect(windowOpenedAt(at(FRI + 1, 2, 59), night)).toEqual(at(FRI, 22));
    expect(windowOpenedAt(at(FRI + 1, 3), night)).toBeNull();
    expect(windowOpenedAt(at(FRI, 21, 59), night)).toBeNull();
    expect(windowOpenedAt(at(FRI, 2), night)).toBeNull(); // Thursday did not open it
    const allDay: PolicyWindow = { days: [WED], startHour: 0, endHour: 24 };
    expect(windowOpenedAt(at(WED, 23, 59), allDay)).toEqual(at(WED, 0));
    expect(windowOpenedAt(at(WED + 1, 0), allDay)).toBeNull();
    expect(inWindowAt(at(MON, 2), { ...WINDOW, days: [] })).toBe(false);
  });

  it('knows when the window opens next (the reconciler sets its timer to it)', () => {
    expect(nextWindowOpening(at(MON, 1), WINDOW)).toEqual(at(MON, 2));
    // Open now: the next opening is the next occurrence, not this one.
    expect(nextWindowOpening(at(MON, 2), WINDOW)).toEqual(at(WED, 2));
    expect(nextWindowOpening(at(FRI, 3), WINDOW)).toEqual(at(MON + 7, 2));
    expect(nextWindowOpening(at(FRI, 23), { days: [FRI], startHour: 22, endHour: 3 })).toEqual(at(FRI + 7, 22));
    expect(nextWindowOpening(at(MON, 1), { ...WINDOW, days: [] })).toBeNull();
  });
});

interface Attempt {
  digest: string;
  at: Date;
  jobRunning: boolean;
}

/**
 * One week, a wake every 5 minutes. The channel offers `sha256:bad` from Monday 01:00 (its update
 * rolls back after 20 minutes, and is quarantined), and `sha256:good` from Wednesday 12:00 (its
 * update completes after 20 minutes). A deployment job runs Friday 01:50–02:30. `preflightFails`
 * makes every start of `sha256:good` abort in preflight (nothing changed, nothing quarantined).
 */
function simulateWeek(mode: PolicyMode, opts: { preflightFails?: boolean } = {}) {
  const clock = new SimulatedClock();
  clock.set(WEEK_START);
  const world = {
    current: 'sha256:v1',
    remote: 'sha256:v1' as string,
    quarantined: [] as string[],
    jobRunning: false,
    updateInFlight: false,
    lastAttempt: null as { digest: string; at: string } | null,
  };
  const schedule = (when: Date, fn: () => void) => clock.setTimeout(fn, when.getTime() - clock.now());
  schedule(at(MON, 1), () => (world.remote = 'sha256:bad'));
  schedule(at(WED, 12), () => (world.remote = 'sha256:good'));
  schedule(at(FRI, 1, 50), () => (world.jobRunning = true));
  schedule(at(FRI, 2, 30), () => (world.jobRunning = false));

  const attempts: Attempt[] = [];
  const decisions = new Map<PolicyDecision, number>();
  const actor = createActor(updatePolicyMachine, { clock }).start();
  const end = WEEK_START + 7 * 24 * HOUR;
  while (clock.now() < end) {
    const facts: PolicyFacts = {
      now: new Date(clock.now()).toISOString(), mode, window: WINDOW, currentDigest: world.current, remoteDigest: world.remote,
      quarantined: [...world.quarantined], refused: false, jobRunning: world.jobRunning || world.updateInFlight, lastAttempt: world.lastAttempt,
    };
    actor.send({ type: 'EVALUATE', facts });
    const decision = actor.getSnapshot().value as PolicyDecision;
    decisions.set(decision, (decisions.get(decision) ?? 0) + 1);
    if (decision === 'starting') {
      const digest = world.remote;
      attempts.push({ digest, at: new Date(clock.now()), jobRunning: world.jobRunning || world.updateInFlight });
      world.lastAttempt = { digest, at: new Date(clock.now()).toISOString() };
      if (opts.preflightFails && digest === 'sha256:good') {
        // Aborted in preflight: nothing changed, nothing in flight, nothing quarantined.
      } else {
        world.updateInFlight = true;
        clock.setTimeout(() => {
          world.updateInFlight = false;
          if (digest === 'sha256:bad') world.quarantined.push(digest);
          else world.current = digest;
        }, 20 * MINUTE);
      }
    }
    clock.increment(5 * MINUTE);
  }
  actor.stop();
  return { attempts, decisions, world };
}

describe('a week of the policy on a simulated clock', () => {
  it('auto: the failing build is attempted exactly once; the good one in the next window; none outside it or during a job', () => {
    const { attempts, decisions, world } = simulateWeek('auto');
    expect(attempts.map((a) => [a.digest, a.at.toISOString()])).toEqual([
      ['sha256:bad', at(MON, 2).toISOString()],
      // Wednesday's window was over when it was published; Friday's opened during a job.
      ['sha256:good', at(FRI, 2, 30).toISOString()],
    ]);
    for (const a of attempts) {
      expect(inWindowAt(a.at, WINDOW)).toBe(true);
      expect(a.jobRunning).toBe(false);
    }
    expect(world.quarantined).toEqual(['sha256:bad']);
    expect(world.current).toBe('sha256:good');
    // Wednesday's window passed the quarantined build by, many times, without starting it.
    expect(decisions.get('quarantined')).toBeGreaterThan(24 * 12);
    expect(decisions.get('busy')).toBeGreaterThan(0);
  });

  it('auto: a start whose preflight aborts is not retried every wake, only once in each later window', () => {
    const { attempts } = simulateWeek('auto', { preflightFails: true });
    expect(attempts.filter((a) => a.digest === 'sha256:good').map((a) => a.at.toISOString())).toEqual([at(FRI, 2, 30).toISOString()]);
    expect(attempts.filter((a) => a.digest === 'sha256:bad')).toHaveLength(1);
  });

  it('manual and notify never start one; notify says an update is available', () => {
    for (const mode of ['manual', 'notify'] as const) {
      const { attempts, decisions } = simulateWeek(mode);
      expect(attempts, mode).toEqual([]);
      if (mode === 'notify') expect(decisions.get('notifying')).toBeGreaterThan(0);
      else expect([...decisions.keys()]).toEqual(['manual']);
    }
  });

  it('decide() is the chart: the same decision for the same facts', () => {
    for (const e of EVENTS) expect(decide(e.facts)).toBe(model(e.facts));
  });
});

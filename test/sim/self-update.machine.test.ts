// Simulation of the self-update chart with fake actors: xstate/graph generates paths that take every
// transition, each is replayed on a live actor and checked against a small model; then the actors are
// implemented over an in-memory engine to prove that a failure at any preflight step leaves the
// rollback tag and the staged compose file exactly as they were.
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, waitFor, type AnyStateMachine, type EventObject } from 'xstate';
import { getAdjacencyMap, getShortestPaths, getSimplePaths } from 'xstate/graph';
import {
  abortDetail, phaseOfState, selfUpdateMachine,
  type PreflightChanges, type RecordActionInput, type ResolvedTarget, type RunningImage, type SelfUpdateOutput, type UndoInput, type UpdateTarget,
} from '../../machines/self-update.machine.ts';
import { declaredEdges, edgeKey, enabledEdges, stateIds } from '../helpers/sim/chart.ts';

const running: RunningImage = { inContainer: true, reference: 'reg/installer:dev-41', tag: 'dev-41', digest: 'sha256:old', imageId: 'img-old' };
const newer: UpdateTarget = { channel: 'dev', tag: 'dev-latest', digest: 'sha256:new' };
const same: UpdateTarget = { channel: 'dev', tag: 'dev-latest', digest: 'sha256:old' };

const done = (id: string, output?: unknown) => ({ type: `xstate.done.actor.${id}`, output }) as unknown as EventObject;
const fail = (id: string, error: unknown) => ({ type: `xstate.error.actor.${id}`, error }) as unknown as EventObject;
const conflictError = Object.assign(new Error('1 deployment job is queued or running'), { code: 'conflict' });

/** The linear preflight: state, its invoke, where success leads, where failure leads. */
const STEPS: [state: string, invoke: string, next: string, onFail: 'aborted' | 'undoing', output: unknown][] = [
  ['checking', 'checkPreconditions', 'pulling', 'aborted', undefined],
  ['pulling', 'pullTarget', 'fetchingCompose', 'aborted', 'img-new'],
  ['fetchingCompose', 'fetchPublishedCompose', 'backingUp', 'aborted', 'services:\n  backend: {}\n'],
  ['backingUp', 'backupDatabase', 'taggingRollback', 'aborted', 'installer-20261125T001500000Z-sha256-000000000old.dump'],
  ['taggingRollback', 'tagRollback', 'staging', 'undoing', { before: 'img-older' }],
  ['staging', 'stageComposeFile', 'taggingNew', 'undoing', { before: null }],
  ['taggingNew', 'tagNew', 'recording', 'undoing', { before: 'img-stale' }],
  ['recording', 'recordAction', 'removingLeftover', 'undoing', { actionId: '7', preUpdateMigration: '0002_self_update' }],
  ['removingLeftover', 'removeLeftoverHelper', 'spawning', 'undoing', undefined],
  ['spawning', 'spawnHelper', 'helperRunning', 'undoing', 'helper-container-id'],
];

const EVENTS: EventObject[] = [
  done('resolveTarget', { running, target: newer }),
  done('resolveTarget', { running, target: same }),
  fail('resolveTarget', new Error('registry unreachable')),
  fail('checkPreconditions', conflictError),
  ...STEPS.flatMap(([state, id, , , output]) => [done(id, output), fail(id, new Error(`${state} broke`))]),
  done('undoPreflight'),
  fail('undoPreflight', new Error('engine gone')),
  // The hung guard of every waiting state.
  ...['resolving', ...STEPS.map(([state]) => state), 'undoing'].map((state) => ({ type: `xstate.after.hungTimeout.selfUpdate.${state}` }) as EventObject),
];
const HUNG = 'No output for 15 minutes — aborted as hung';

interface Expected {
  state: string;
  failedStep: string | null;
  abortCode: 'conflict' | 'preflight' | null;
  changes: string[];
  undoFailed: string | null;
  backup: string | null;
}

/** What the chart must conclude from a sequence of events. */
function model(events: readonly EventObject[]): Expected {
  let state = 'resolving';
  let failedStep: string | null = null;
  let abortCode: Expected['abortCode'] = null;
  let changes: string[] = [];
  let undoFailed: string | null = null;
  let backup: string | null = null;
  const changeOf: Record<string, string> = { tagRollback: 'rollbackTag', stageComposeFile: 'stagedFile', tagNew: 'newTag' };
  for (const e of events) {
    if (['unresolved', 'newest', 'aborted', 'helperRunning'].includes(state)) break;
    const kind = e.type.startsWith('xstate.done.actor.') ? 'done' : e.type.startsWith('xstate.error.actor.') ? 'error' : 'other';
    const id = e.type.replace(/^xstate\.(done|error)\.actor\./, '');
    const hungIn = e.type.startsWith('xstate.after.hungTimeout.selfUpdate.') ? e.type.slice('xstate.after.hungTimeout.selfUpdate.'.length) : null;
    if (hungIn !== null) {
      // A step that does not finish in time fails like one that errs; a stalled undo is reported.
      if (hungIn !== state) continue;
      if (state === 'resolving') [state, failedStep] = ['unresolved', 'resolving'];
      else if (state === 'undoing') [state, abortCode, undoFailed] = ['aborted', 'preflight', HUNG];
      else {
        const step = STEPS.find(([s]) => s === state)!;
        [failedStep, state] = [state, step[3]];
        if (state === 'aborted') abortCode = 'preflight';
      }
      continue;
    }
    if (state === 'resolving' && id === 'resolveTarget') {
      if (kind === 'error') [state, failedStep] = ['unresolved', 'resolving'];
      else state = (e as unknown as { output: ResolvedTarget }).output.target.digest === running.digest ? 'newest' : 'checking';
      continue;
    }
    if (state === 'undoing' && id === 'undoPreflight') {
      state = 'aborted';
      abortCode = 'preflight';
      if (kind === 'done') changes = [];
      else undoFailed = 'engine gone';
      continue;
    }
    const step = STEPS.find(([s, invoke]) => s === state && invoke === id);
    if (!step) continue;
    if (kind === 'done') {
      if (changeOf[id]) changes.push(changeOf[id]);
      if (id === 'backupDatabase') backup = (e as unknown as { output: string }).output;
      state = step[2];
    } else {
      failedStep = state;
      state = step[3];
      if (state === 'aborted') abortCode = (e as unknown as { error: unknown }).error === conflictError ? 'conflict' : 'preflight';
    }
  }
  return { state, failedStep, abortCode, changes, undoFailed, backup };
}

const quiet = () => fromPromise(() => new Promise<never>(() => {}));
const simulated = (): AnyStateMachine =>
  selfUpdateMachine.provide({
    actors: Object.fromEntries(['resolveTarget', ...STEPS.map((s) => s[1]), 'undoPreflight'].map((id) => [id, quiet()])) as never,
  });

const INPUT = { requestId: 'r-1' };

/** A generated path replayed on a live actor: where it ends, and what the model says of it. */
function replayed(p: { steps: readonly { event: EventObject }[] }) {
  const events = p.steps.map((s) => s.event).filter((e) => e.type !== 'xstate.init');
  const actor = createActor(simulated(), { input: INPUT }).start();
  for (const e of events) actor.send(e);
  const snap = actor.getSnapshot();
  actor.stop();
  return { events, snap, want: model(events), label: events.map((e) => e.type.replace('xstate.', '')).join(' > ') };
}

describe('self-update chart', () => {
  const paths = [...getShortestPaths(simulated(), { input: INPUT, events: EVENTS }), ...getSimplePaths(simulated(), { input: INPUT, events: EVENTS })];

  it('reaches every state and takes every declared transition', () => {
    const states = Object.values(getAdjacencyMap(simulated(), { input: INPUT, events: EVENTS })).map((v) => v.state);
    const reached = new Set<string>();
    for (const s of states) for (const n of s._nodes) reached.add(n.id);
    const taken = enabledEdges(states, EVENTS);
    // `deciding` is transient: its eventless transitions are taken on every resolution (checked below).
    reached.add('selfUpdate.deciding');
    taken.add(edgeKey({ from: 'selfUpdate.deciding', event: '(always)' }));
    expect(reached).toEqual(new Set(stateIds(selfUpdateMachine)));
    expect(declaredEdges(selfUpdateMachine).map(edgeKey).filter((k) => !taken.has(k))).toEqual([]);
    expect(paths.length).toBeGreaterThan(20);
  });

  it('agrees with the model on every generated path, replayed on a live actor', () => {
    for (const p of paths) {
      const { snap, want, label } = replayed(p);
      expect(snap.value, label).toBe(want.state);
      expect(snap.context.failedStep, label).toBe(want.failedStep);
      expect(snap.context.abortCode, label).toBe(want.abortCode);
      expect(Object.keys(snap.context.changes).sort(), label).toEqual([...want.changes].sort());
      expect(snap.context.undoFailed, label).toBe(want.undoFailed);
      expect(snap.context.backup, label).toBe(want.backup);
      if (want.state === 'helperRunning') {
        expect(snap.context.helperId).toBe('helper-container-id');
        expect(snap.context.actionId).toBe('7');
        expect(snap.context.preUpdateMigration).toBe('0002_self_update');
      }
    }
  });

  it('outputs how the request ends on every path that ends, and nothing on one that does not', () => {
    const ends = new Set<string>();
    for (const p of paths) {
      const { events, snap, want, label } = replayed(p);
      const output = snap.output as SelfUpdateOutput | undefined;
      if (want.state === 'helperRunning') expect(output, label).toEqual({ phase: 'helper-running', target: newer, helperId: 'helper-container-id', preUpdateMigration: '0002_self_update' });
      else if (want.state === 'newest') expect(output, label).toEqual({ phase: 'newest', target: same, detail: 'already on the newest build of channel dev (sha256:old)' });
      else if (want.state === 'unresolved') expect(output, label).toEqual({ phase: 'unresolved', detail: `the target digest cannot be resolved: ${want.failedStep && events.at(-1)!.type.startsWith('xstate.after') ? HUNG : 'registry unreachable'}` });
      else if (want.state === 'aborted') expect(output, label).toEqual({ phase: 'aborted', detail: abortDetail(snap.context), abortCode: want.abortCode, failedStep: want.failedStep });
      else expect(output, label).toBeUndefined();
      if (output) ends.add(output.phase);
    }
    expect([...ends].sort()).toEqual(['aborted', 'helper-running', 'newest', 'unresolved']);
  });

  it('stops at `newest` when the running digest is the target, before any preflight step', () => {
    const actor = createActor(simulated(), { input: INPUT }).start();
    actor.send(done('resolveTarget', { running, target: same }));
    expect(actor.getSnapshot().value).toBe('newest');
    expect(phaseOfState('newest')).toBe('newest');
  });

  it('a running build without a registry digest is never newest: the update goes ahead', () => {
    const actor = createActor(simulated(), { input: INPUT }).start();
    actor.send(done('resolveTarget', { running: { ...running, digest: null }, target: same }));
    expect(actor.getSnapshot().value).toBe('checking');
  });

  it('maps states to request phases and words an abort', () => {
    expect(phaseOfState('pulling')).toBe('preflight');
    expect(phaseOfState('helperRunning')).toBe('helper-running');
    expect(abortDetail({ failedStep: 'staging', detail: 'disk full', undoFailed: null })).toBe('staging: disk full; nothing was changed');
    expect(abortDetail({ failedStep: 'spawning', detail: 'no image', undoFailed: 'engine gone' })).toContain('undoing the preflight failed too (engine gone)');
  });
});

/** An engine and host held in memory: tags, the staged file, the audit trail and helpers. */
class World {
  tags = new Map<string, string>([['reg/installer:rollback', 'img-older'], ['reg/installer:dev-latest', 'img-stale'], ['reg/installer:dev-41', 'img-old']]);
  staged: string | null = 'services:\n  previous: {}\n';
  audit: { id: string; status: string; detail: string | null }[] = [];
  helpers: string[] = [];
  /** The database backups in the backups volume (not part of what an abort puts back). */
  backups: string[] = [];
  snapshot() {
    return { tags: new Map(this.tags), staged: this.staged, helpers: [...this.helpers] };
  }
}

function realActors(world: World, failAt: string | null, undoBreaks = false) {
  const step = async <T>(name: string, fn: () => T | Promise<T>): Promise<T> => {
    if (failAt === name) throw new Error(`${name} failed`);
    return fn();
  };
  return {
    resolveTarget: fromPromise<ResolvedTarget, undefined>(() => step('resolveTarget', () => ({ running, target: newer }))),
    checkPreconditions: fromPromise<void, { running: RunningImage | null; target: UpdateTarget | null }>(() => step('checkPreconditions', () => {})),
    pullTarget: fromPromise<string, { target: UpdateTarget }>(() => step('pullTarget', () => 'img-new')),
    // Reads the file out of the image the pull brought in (or PUBLISHED_COMPOSE_URL).
    fetchPublishedCompose: fromPromise<string, { target: UpdateTarget; imageId: string }>(({ input }) =>
      step('fetchPublishedCompose', () => {
        if (input.imageId !== 'img-new' || input.target.channel !== 'dev') throw new Error(`read from ${input.imageId} for ${input.target.channel}: not the pulled target`);
        return 'services:\n  backend: {}\n';
      }),
    ),
    backupDatabase: fromPromise<string, { running: RunningImage; target: UpdateTarget }>(({ input }) =>
      step('backupDatabase', () => {
        // Nothing is changed yet: the rollback tag still names what it named before.
        if (world.tags.get('reg/installer:rollback') !== 'img-older' || world.staged !== 'services:\n  previous: {}\n') throw new Error('backed up after a change');
        const file = `installer-20261125T001500000Z-${input.running.digest!.replace(':', '-')}.dump`;
        world.backups.push(file);
        return file;
      }),
    ),
    tagRollback: fromPromise<{ before: string | null }, { running: RunningImage }>(({ input }) =>
      step('tagRollback', () => {
        const before = world.tags.get('reg/installer:rollback') ?? null;
        world.tags.set('reg/installer:rollback', input.running.imageId!);
        return { before };
      }),
    ),
    stageComposeFile: fromPromise<{ before: string | null }, { content: string }>(({ input }) =>
      step('stageComposeFile', () => {
        const before = world.staged;
        world.staged = input.content;
        return { before };
      }),
    ),
    tagNew: fromPromise<{ before: string | null }, { target: UpdateTarget; imageId: string }>(({ input }) =>
      step('tagNew', () => {
        const before = world.tags.get(`reg/installer:${input.target.tag}`) ?? null;
        world.tags.set(`reg/installer:${input.target.tag}`, input.imageId);
        return { before };
      }),
    ),
    recordAction: fromPromise<{ actionId: string; preUpdateMigration: string | null }, RecordActionInput>(() =>
      step('recordAction', () => {
        world.audit.push({ id: '1', status: 'started', detail: null });
        return { actionId: '1', preUpdateMigration: '0002_self_update' };
      }),
    ),
    removeLeftoverHelper: fromPromise<void, undefined>(() => step('removeLeftoverHelper', () => {})),
    spawnHelper: fromPromise<string, { target: UpdateTarget }>(() =>
      step('spawnHelper', () => {
        world.helpers.push('installer-self-updater');
        return 'cid';
      }),
    ),
    undoPreflight: fromPromise<void, UndoInput>(async ({ input }) => {
      if (undoBreaks) throw new Error('engine gone');
      const c: PreflightChanges = input.changes;
      const put = (ref: string, before: string | null) => (before === null ? world.tags.delete(ref) : world.tags.set(ref, before));
      if (c.newTag) put(`reg/installer:${input.target!.tag}`, c.newTag.before);
      if (c.stagedFile) world.staged = c.stagedFile.before;
      if (c.rollbackTag) put('reg/installer:rollback', c.rollbackTag.before);
      for (const a of world.audit) if (a.id === input.actionId) Object.assign(a, { status: 'failed', detail: input.detail });
    }),
  };
}

describe('self-update preflight over an in-memory engine', () => {
  const run = async (failAt: string | null, undoBreaks = false) => {
    const world = new World();
    const before = world.snapshot();
    const actor = createActor(selfUpdateMachine.provide({ actors: realActors(world, failAt, undoBreaks) }), { input: INPUT }).start();
    const snap = await waitFor(actor, (s) => s.status === 'done', { timeout: 2_000 });
    return { world, before, snap };
  };

  it('a successful preflight pins rollback to the running image, stages the file, moves the new tag and spawns the helper', async () => {
    const { world, snap } = await run(null);
    expect(snap.value).toBe('helperRunning');
    expect(world.tags.get('reg/installer:rollback')).toBe('img-old');
    expect(world.tags.get('reg/installer:dev-latest')).toBe('img-new');
    expect(world.staged).toBe('services:\n  backend: {}\n');
    expect(world.helpers).toEqual(['installer-self-updater']);
    expect(world.audit).toEqual([{ id: '1', status: 'started', detail: null }]);
    expect(world.backups).toEqual(['installer-20261125T001500000Z-sha256-old.dump']);
    expect(snap.context.backup).toBe('installer-20261125T001500000Z-sha256-old.dump');
  });

  it('a failed dump aborts before anything is changed, naming the backup as the cause', async () => {
    const { world, before, snap } = await run('backupDatabase');
    expect(snap.value).toBe('aborted');
    expect(snap.context.changes).toEqual({});
    expect(world.snapshot()).toEqual(before);
    expect(world.audit).toEqual([]);
    expect(world.backups).toEqual([]);
    expect(abortDetail(snap.context)).toBe('backingUp: the database backup failed: backupDatabase failed; nothing was changed');
  });

  it('a dump that hangs aborts on the hung guard with nothing changed', () => {
    const actor = createActor(simulated(), { input: INPUT }).start();
    actor.send(done('resolveTarget', { running, target: newer }));
    for (const [state, id, , , output] of STEPS) {
      if (state === 'backingUp') break;
      actor.send(done(id, output));
    }
    expect(actor.getSnapshot().value).toBe('backingUp');
    actor.send({ type: 'xstate.after.hungTimeout.selfUpdate.backingUp' } as EventObject);
    const snap = actor.getSnapshot();
    expect(snap.value).toBe('aborted');
    expect(snap.context.changes).toEqual({});
    expect(abortDetail(snap.context)).toBe(`backingUp: ${HUNG}; nothing was changed`);
  });

  for (const failAt of ['checkPreconditions', 'pullTarget', 'fetchPublishedCompose', 'backupDatabase', 'tagRollback', 'stageComposeFile', 'tagNew', 'recordAction', 'removeLeftoverHelper', 'spawnHelper']) {
    it(`a failure at ${failAt} aborts with the rollback tag and the staged file as they were`, async () => {
      const { world, before, snap } = await run(failAt);
      expect(snap.value).toBe('aborted');
      expect(world.snapshot()).toEqual(before);
      expect(world.audit.every((a) => a.status === 'failed')).toBe(true);
      expect(abortDetail(snap.context)).toMatch(/; nothing was changed$/);
    });
  }

  it('a failure while undoing is reported, not hidden', async () => {
    const { snap } = await run('spawnHelper', true);
    expect(snap.value).toBe('aborted');
    expect(snap.context.undoFailed).toBe('engine gone');
    expect(abortDetail(snap.context)).toContain('check the rollback tag and the staged compose file');
  });

  it('an unresolvable target changes nothing and ends unresolved', async () => {
    const { world, before, snap } = await run('resolveTarget');
    expect(snap.value).toBe('unresolved');
    expect(world.snapshot()).toEqual(before);
  });
});

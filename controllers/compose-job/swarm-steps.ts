// The job chart's steps on a Swarm (docs/adr/0056-platform-on-a-swarm.md): what each compose step
// becomes when the platform is a stack, run with the real docker CLI against the manager. A step
// is one or more CLI runs, each waiting for the services to converge (`--detach=false`) within a
// bound; a step ends failed, with a message that names the cause, when the services did not
// converge in time (a task that never starts), or when the Swarm rolled an update back (its own
// `failure_action`), which the CLI reports as converged.
import type { Kysely } from 'kysely';
import type { DB } from '../../src/db/schema.ts';
import { runDocker, type ComposeRun, type ComposeTarget, type Stream } from '../../src/adapters/compose-cli.ts';
import type { LostUpdate, StackService, SwarmStack } from '../../src/adapters/swarm-stack.ts';
import { clearStopped, recordStopped, stoppedServices } from '../../src/state/stopped-services.ts';

export interface SwarmStepDeps {
  db: Kysely<DB>;
  stack: SwarmStack;
  target: () => ComposeTarget;
  /** How long a step waits for the services to converge before it fails. */
  convergeSeconds: number;
}

/** A step's run on the Swarm: its exit code, and, when it failed, why in a sentence. */
export interface SwarmRun extends ComposeRun {
  failure(): string | null;
}

/** The Swarm steps: the compose steps of src/contracts/job-kinds.ts, each on the stack. */
export const SWARM_STEPS = new Set(['up', 'up-pulled', 'recreate', 'restart', 'stop', 'kill']);

/** A placement constraint no node meets: a stopped global service runs nowhere until the next deploy. */
export const HELD_OFF = 'node.labels.io.installer.stopped==true';

/** How long the CLI must have brought no news before the manager's own view is asked. */
const QUIET_MS = 4_000;

/** Whether the docker CLI's `stack deploy` can wait for convergence (`--detach`, CLI 26.0 and newer): asked once. */
let deployWaits: Promise<boolean> | undefined;
function stackDeployWaits(target: ComposeTarget): Promise<boolean> {
  deployWaits ??= (async () => {
    const help: string[] = [];
    await runDocker(target, ['stack', 'deploy', '--help'], (_stream, line) => help.push(line)).exited;
    return help.some((l) => /--detach\b/.test(l));
  })();
  return deployWaits;
}

/** The command a step's phase event names (what an operator would type for it). */
export function swarmCommand(step: string, stack: string, services: readonly string[]): string {
  const named = services.length ? services.map((s) => `${stack}_${s}`).join(' ') : `<every service of ${stack}>`;
  switch (step) {
    case 'up':
      return `docker stack deploy --detach=false --prune --resolve-image never --with-registry-auth -c - ${stack}`;
    case 'up-pulled':
    case 'recreate':
      return `docker stack deploy --detach=false --resolve-image never --with-registry-auth -c - ${stack}`;
    case 'restart':
      return `docker service update --force --detach=false ${named}`;
    case 'stop':
      return `docker service scale --detach=false ${named}=0`;
    case 'kill':
      return `docker service update --replicas 0 --stop-grace-period 0s --detach=false ${named}`;
    default:
      throw new Error(`${step} is not a Swarm step`);
  }
}

/** `onCli` hears the pid of each docker CLI the step starts (one step may run several in turn). */
export function runSwarmStep(
  d: SwarmStepDeps,
  step: string,
  services: readonly string[],
  jobId: string,
  onLine: (stream: Stream, line: string) => void,
  onCli: (pid: number | undefined) => void = () => {},
): SwarmRun {
  let current: ComposeRun | undefined;
  let cancelled = false;
  let failure: string | null = null;
  const say = (line: string) => onLine('stdout', line);
  const stack = d.stack.stack;

  // The CLI redraws its progress several times a second, and while a task waits it cycles through
  // the same few lines: a line already seen since the last service converged is no news, and only
  // news is written and counts as progress for the bound.
  const seen = new Set<string>();
  let progressed = () => {};
  const output = (stream: Stream, line: string) => {
    if (seen.has(line)) return;
    seen.add(line);
    if (/^verify: Service .* converged$/.test(line)) seen.clear();
    progressed();
    onLine(stream, line);
  };
  const bound = d.convergeSeconds;

  /**
   * One CLI run within the convergence bound; false when it failed (`failure` says why). The bound
   * is on progress, not on the whole run: a rolling update of many replicas, one service after
   * another, takes as long as it takes while its tasks move, and a task that never starts stops
   * the news.
   */
  const cli = async (given: string[], what: string, input?: string, waitsFor: readonly string[] | null = null, again = false): Promise<boolean> => {
    if (cancelled) return false;
    seen.clear();
    // A CLI older than 26.0 has no `stack deploy --detach`: it only submits, and the step waits itself.
    const waitsItself = given[0] === 'stack' && given.includes('--detach=false') && !(await stackDeployWaits(d.target()));
    const args = waitsItself ? given.filter((a) => a !== '--detach=false') : given;
    if (waitsItself) say(`this docker CLI's stack deploy cannot wait (--detach came with CLI 26.0): the step waits for the services to converge itself, with the same bound`);
    const run = runDocker(d.target(), args, output, input === undefined ? {} : { input });
    current = run;
    onCli(run.pid);
    let timedOut = false;
    let timer: NodeJS.Timeout | undefined;
    let quietSince = Date.now();
    progressed = () => {
      quietSince = Date.now();
      clearTimeout(timer);
      timer = setTimeout(() => {
        timedOut = true;
        run.cancel(2_000);
      }, bound * 1000);
    };
    progressed();
    // The manager's own view while the CLI is quiet: converged twice in a row ends the wait; a
    // node lost under an update in progress ends it too, and the update starts again (below).
    let endedConverged = false;
    let lost: LostUpdate[] = [];
    let exited = false;
    const watch = waitsFor === null ? Promise.resolve() : (async () => {
      let agreed = 0;
      while (!exited && !cancelled) {
        await new Promise((r) => setTimeout(r, 2_000));
        if (exited || Date.now() - quietSince < QUIET_MS) continue;
        if (!again) lost = await d.stack.lostMidUpdate(waitsFor).catch(() => []);
        if (lost.length) return run.cancel(2_000);
        agreed = (await d.stack.converged(waitsFor).catch(() => false)) ? agreed + 1 : 0;
        if (agreed >= 2 && !exited) {
          endedConverged = true;
          say(`the manager reports ${waitsFor.length ? waitsFor.join(', ') : 'every service'} converged; the CLI, still counting, is stopped`);
          return run.cancel(2_000);
        }
      }
    })();
    const code = await run.exited.finally(() => {
      exited = true;
      clearTimeout(timer);
    });
    await watch;
    if (endedConverged) return true;
    if (lost.length && !cancelled) return updateAgain(lost, waitsFor ?? []);
    if (timedOut) {
      failure = `${step} failed: ${what} did not converge: no progress within ${bound} s`;
      return false;
    }
    if (code !== 0) {
      failure = cancelled ? null : `${step} failed: ${what} exited with code ${code}`;
      return false;
    }
    return waitsItself && waitsFor !== null ? converge(waitsFor, what) : true;
  };

  /**
   * What `--detach=false` does, for a CLI that only submitted the stack: the services converge as
   * the manager sees them (twice in a row), with the same bound on progress and the same failure.
   * The news is each service's running count, written when it changes.
   */
  const converge = async (waitsFor: readonly string[], what: string): Promise<boolean> => {
    let last: string[] = [];
    let quietSince = Date.now();
    let agreed = 0;
    while (!cancelled) {
      const now = await d.stack.progress(waitsFor).catch(() => last);
      const news = now.filter((l) => !last.includes(l));
      if (news.length) {
        for (const l of news) onLine('stdout', l);
        quietSince = Date.now();
      }
      last = now;
      const lost = await d.stack.lostMidUpdate(waitsFor).catch(() => []);
      if (lost.length) return updateAgain(lost, waitsFor);
      agreed = (await d.stack.converged(waitsFor).catch(() => false)) ? agreed + 1 : 0;
      if (agreed >= 2) return true;
      if (Date.now() - quietSince >= bound * 1000) {
        failure = `${step} failed: ${what} did not converge: no progress within ${bound} s`;
        return false;
      }
      await new Promise((r) => setTimeout(r, 2_000));
    }
    return false;
  };

  /**
   * A node lost while a service was updating can leave the Swarm's updater waiting for ever for the
   * task it had started there (measured on 26.1: a start-first restart kept a slot's old and new
   * tasks both running). Updating the service once more starts its update over on the nodes left;
   * then every service the step waited for must converge, within the same bound.
   */
  const updateAgain = async (lost: LostUpdate[], waitsFor: readonly string[]): Promise<boolean> => {
    for (const l of lost) {
      say(`node ${l.nodes.join(', ')} was lost while ${l.name} was updating: its update starts again on the nodes left`);
      if (!(await cli(['service', 'update', '--force', '--detach=false', l.name], `the service ${l.name}`, undefined, [l.service], true))) return false;
    }
    const until = Date.now() + bound * 1000;
    let agreed = 0;
    while (!cancelled) {
      agreed = (await d.stack.converged(waitsFor).catch(() => false)) ? agreed + 1 : 0;
      if (agreed >= 2) return true;
      if (Date.now() > until) {
        failure = `${step} failed: ${waitsFor.length ? waitsFor.join(', ') : `the stack ${stack}`} did not converge within ${bound} s after node ${lost.flatMap((l) => l.nodes).join(', ')} was lost`;
        return false;
      }
      await new Promise((r) => setTimeout(r, 2_000));
    }
    return false;
  };

  /** Reads back how the services' last updates ended: a rollback or a pause since `since` fails the step. */
  const updatesHeld = async (names: readonly string[], since: number): Promise<boolean> => {
    const after = (await d.stack.services()).filter((s) => !names.length || names.includes(s.service));
    for (const s of after) {
      const u = s.update;
      if (!u || !u.startedAt || Date.parse(u.startedAt) < since - 1_000) continue;
      if (u.state.startsWith('rollback') || u.state === 'paused') {
        failure = `${step} failed: the Swarm ${u.state.startsWith('rollback') ? 'rolled back' : 'paused'} the update of ${s.name} (${u.state}): ${u.message}`;
        return false;
      }
    }
    return true;
  };

  /** Names the tasks' errors of services that did not converge, so a task that never started says why. */
  const explain = async (names: readonly string[]) => {
    const all = await d.stack.services().catch(() => [] as StackService[]);
    for (const s of all.filter((x) => !names.length || names.includes(x.service))) {
      for (const e of await d.stack.taskErrors(s.name).catch(() => [])) {
        onLine('stderr', `${s.name}: ${e}`);
        if (failure && !failure.includes(': task ')) failure += `; ${s.name}: ${e}`;
      }
    }
  };

  const deploy = async (mode: 'all' | 'chosen' | 'recreate'): Promise<boolean> => {
    const saved = await stoppedServices(d.db, stack);
    const replicas = new Map([...saved.values()].filter((s) => s.replicas !== null).map((s) => [s.service, s.replicas!]));
    // An older CLI reads a stack file as version 1 unless it says otherwise; 3.9 is the newest 20.10 knows.
    const olderCli = !(await stackDeployWaits(d.target()));
    const rendered = await d.stack.render({
      ...(olderCli ? { fileVersion: '3.9' } : {}),
      services: mode === 'all' ? [] : services,
      replicas,
      ...(mode === 'recreate' ? { recreateLabel: { key: 'io.installer.applied', value: jobId } } : {}),
    });
    const since = Date.now();
    // The manager's registry credentials go with the tasks, so every node can pull a private image.
    const args = ['stack', 'deploy', '--detach=false', ...(mode === 'all' ? ['--prune'] : []), '--resolve-image', 'never', '--with-registry-auth', '-c', '-', stack];
    if (!(await cli(args, `the stack ${stack}`, rendered.file, mode === 'all' ? [] : rendered.services))) return false;
    // Every service the deploy rendered runs as its file says again: a stop's counts are spent.
    await clearStopped(d.db, stack, mode === 'all' ? null : rendered.services);
    if (!(await updatesHeld(rendered.services, since))) return false;
    const pruned = await d.stack.pruneObjects().catch(() => []);
    if (pruned.length) say(`removed the secrets and configs no service uses any more: ${pruned.join(', ')}`);
    return true;
  };

  const each = async (chosen: StackService[], argsOf: (s: StackService) => string[]): Promise<boolean> => {
    for (const s of chosen) {
      const since = Date.now();
      if (!(await cli(argsOf(s), `the service ${s.name}`, undefined, [s.service]))) return false;
      if (!(await updatesHeld([s.service], since))) return false;
    }
    return true;
  };

  const stop = async (kill: boolean): Promise<boolean> => {
    const chosen = await d.stack.chosen(services);
    await recordStopped(d.db, stack, jobId, chosen.filter((s) => s.mode === 'global' || (s.replicas ?? 0) > 0).map((s) => ({ service: s.service, replicas: s.replicas })));
    const grace = kill ? ['--stop-grace-period', '0s'] : [];
    const replicated = chosen.filter((s) => s.mode === 'replicated');
    const scale = ['service', 'scale', '--detach=false', ...replicated.map((s) => `${s.name}=0`)];
    if (replicated.length && !kill && !(await cli(scale, `scaling ${replicated.map((s) => s.name).join(', ')} to zero`, undefined, replicated.map((s) => s.service)))) return false;
    if (kill && !(await each(replicated, (s) => ['service', 'update', '--detach=false', '--replicas', '0', ...grace, s.name]))) return false;
    // A global service held off every node has no task to wait for, and the CLI would wait for
    // one forever: its tasks are watched until none runs, within the same bound.
    for (const s of chosen.filter((x) => x.mode === 'global')) {
      if (!(await cli(['service', 'update', '--detach=true', '--constraint-add', HELD_OFF, ...grace, s.name], `the service ${s.name}`))) return false;
      if (!(await noTaskRuns(s))) return false;
    }
    return true;
  };

  /** Waits until none of the service's tasks runs; the bound counts from the last task that stopped. */
  const noTaskRuns = async (s: StackService): Promise<boolean> => {
    let left = Infinity;
    let since = Date.now();
    while (!cancelled) {
      const n = await d.stack.runningTasks(s.name);
      if (n === 0) {
        say(`${s.name}: no task runs`);
        return true;
      }
      if (n < left) {
        say(`${s.name}: ${n} tasks still running`);
        left = n;
        since = Date.now();
      }
      if (Date.now() - since > bound * 1000) {
        failure = `${step} failed: the service ${s.name} did not converge: no progress within ${bound} s`;
        return false;
      }
      await new Promise((r) => setTimeout(r, 500));
    }
    return false;
  };

  const steps: Record<string, () => Promise<boolean>> = {
    up: () => deploy('all'),
    'up-pulled': () => deploy('chosen'),
    recreate: () => deploy('recreate'),
    restart: async () => {
      const chosen = await d.stack.chosen(services);
      const orders = await d.stack.restartOrders(chosen);
      const why = (s: StackService, order: string) =>
        order === 'start-first' ? 'each new task runs before its old one stops' : s.sharesNode ? 'two of its tasks cannot run at once on a node' : 'its compose file says so';
      for (const s of chosen) say(`restarting ${s.name} ${orders.get(s.service)} (${why(s, orders.get(s.service)!)})`);
      return each(chosen, (s) => ['service', 'update', '--force', '--update-order', orders.get(s.service)!, '--detach=false', s.name]);
    },
    stop: () => stop(false),
    kill: () => stop(true),
  };

  const exited = (async () => {
    const body = steps[step];
    if (!body) throw new Error(`${step} is not a Swarm step`);
    try {
      if (await body()) return 0;
    } catch (err) {
      failure = `${step} failed: ${(err as Error).message}`;
      return 1;
    }
    if (cancelled) return 130;
    await explain(services);
    return 1;
  })();

  return {
    get pid() {
      return current?.pid;
    },
    exited,
    cancel(graceMs?: number) {
      cancelled = true;
      current?.cancel(graceMs);
    },
    failure: () => failure,
  };
}

/**
 * After a pull on the manager (and its signature check): the same images pulled on every other node
 * that runs a task of the services, so a later start finds them there. Null, or why it failed.
 */
export async function pullOnNodes(d: SwarmStepDeps, services: readonly string[], say: (line: string) => void): Promise<string | null> {
  try {
    const images = await d.stack.images(services);
    const running = (await d.stack.services()).filter((s) => images.has(s.service));
    for (const s of running) {
      const failed = await d.stack.pullOnNodes(s, images.get(s.service)!, say, d.convergeSeconds * 1000);
      if (failed) return `pull failed: ${failed}`;
    }
    return null;
  } catch (err) {
    return `pull failed: ${(err as Error).message}`;
  }
}

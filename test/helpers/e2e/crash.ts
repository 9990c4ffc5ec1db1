// Crash injection helpers: the states of a chart (read from its definition, so that a new state
// cannot be skipped), waiting for an actor to reach a state through GET /api/machines, holding the
// database from outside (a lock taken by another session, so that the backend's next write waits),
// and a tally of crash points injected and converged.
import pg from 'pg';
import type { AnyStateMachine } from 'xstate';
import { eventually } from '../shared/eventually.ts';

export interface ChartState {
  /** Dotted path below the root, e.g. `running.watching`. */
  path: string;
  final: boolean;
  /** Eventless (only `always` transitions, nothing invoked, no delays): never at rest, so never persisted. */
  transient: boolean;
}

interface Node {
  path: string[];
  type: string;
  states: Record<string, Node>;
  always?: unknown[];
  invoke: unknown[];
  after: unknown[];
  on: Record<string, unknown>;
}

/** The leaf states of a chart, from its state nodes. */
export function chartLeaves(machine: AnyStateMachine): ChartState[] {
  const out: ChartState[] = [];
  const walk = (n: Node) => {
    const children = Object.values(n.states ?? {});
    if (children.length === 0) {
      out.push({
        path: n.path.join('.'),
        final: n.type === 'final',
        transient: (n.always?.length ?? 0) > 0 && n.invoke.length === 0 && n.after.length === 0 && Object.keys(n.on).length === 0,
      });
      return;
    }
    for (const c of children) walk(c);
  };
  walk(machine.root as unknown as Node);
  return out;
}

/**
 * Checks that every non-final, non-transient state of the chart has a crash point, and that no
 * crash point names a state the chart does not have. Returns the states that need one.
 */
export function requireCrashPoints(machine: AnyStateMachine, covered: Iterable<string>): string[] {
  const leaves = chartLeaves(machine);
  const need = leaves.filter((s) => !s.final && !s.transient).map((s) => s.path);
  const have = new Set(covered);
  const missing = need.filter((s) => !have.has(s));
  const unknown = [...have].filter((s) => !leaves.some((l) => l.path === s));
  if (missing.length || unknown.length) {
    throw new Error(`crash points do not match chart ${machine.id}: missing ${JSON.stringify(missing)}, unknown ${JSON.stringify(unknown)}`);
  }
  return need;
}

export interface MachinesInstance {
  id: string;
  phase: string;
  state: string | null;
}

/** The ids of a chart's actors GET /api/machines lists now. */
export async function chartInstanceIds(base: string, token: string, chart: string): Promise<Set<string>> {
  const res = await fetch(`${base}/api/machines`, { headers: { authorization: `Bearer ${token}` } });
  if (!res.ok) throw new Error(`GET /api/machines answered ${res.status}`);
  const { charts } = (await res.json()) as { charts: { id: string; instances: MachinesInstance[] }[] };
  return new Set((charts.find((c) => c.id === chart)?.instances ?? []).map((i) => i.id));
}

/**
 * Polls GET /api/machines until the actor `id` of chart `chart` is in `state`; returns its id.
 * `id` may instead be the set of actors known before: then the newest actor not among them.
 */
export async function waitForChartState(base: string, token: string, chart: string, id: string | Set<string>, state: string, timeoutMs = 60_000): Promise<string> {
  let last: MachinesInstance | undefined;
  return eventually(async () => {
    const res = await fetch(`${base}/api/machines`, { headers: { authorization: `Bearer ${token}` } }).catch(() => null);
    if (!res?.ok) return null;
    const { charts } = (await res.json()) as { charts: { id: string; instances: MachinesInstance[] }[] };
    const instances = charts.find((c) => c.id === chart)?.instances ?? [];
    last = typeof id === 'string' ? instances.find((i) => i.id === id) : instances.find((i) => !id.has(i.id));
    return last?.state === state ? last.id : null;
  }, `${chart} actor ${typeof id === 'string' ? id : '(new)'} to reach ${state}`, timeoutMs, 100).catch((err: Error) => {
    throw new Error(`${err.message} (last seen: ${JSON.stringify(last)})`);
  });
}

export interface DbHold {
  /** Waits until another session waits on a lock with a query matching `pattern`. */
  waiting(pattern: RegExp, timeoutMs?: number): Promise<string>;
  query(text: string, values?: unknown[]): Promise<pg.QueryResult>;
  /**
   * Rolls the holding transaction back. Statements still waiting on its locks are ended first
   * (the write is lost, as when the database notices the dead client), unless `landInFlight`.
   */
  release(opts?: { landInFlight?: boolean }): Promise<void>;
}

/** Opens a transaction on `url` that runs `statements` (taking locks) and keeps them until released. */
export async function holdDatabase(url: string, statements: string[], values: unknown[][] = []): Promise<DbHold> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query('BEGIN');
  for (const [i, s] of statements.entries()) await c.query(s, values[i] ?? []);
  const watcher = new pg.Client({ connectionString: url });
  await watcher.connect();
  let released = false;
  return {
    async waiting(pattern, timeoutMs = 30_000) {
      return eventually(async () => {
        const r = await watcher.query<{ query: string }>(`select query from pg_stat_activity where wait_event_type = 'Lock' and pid <> pg_backend_pid() and datname = current_database()`);
        return r.rows.find((row) => pattern.test(row.query))?.query;
      }, `a session waiting on a lock with a query matching ${pattern}`, timeoutMs, 50);
    },
    query: (text, v) => watcher.query(text, v),
    async release(opts = {}) {
      if (released) return;
      released = true;
      if (opts.landInFlight !== true) {
        // A killed client's statement that waits on a lock is not cancelled by Postgres until it
        // next talks to the client: once the lock goes it would still run. Unless asked to let it
        // land, end those sessions first, as if the database had seen the connection drop.
        await watcher.query(
          `select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and pid <> pg_backend_pid() and pid <> $1`,
          [(c as unknown as { processID: number }).processID],
        );
      }
      await c.query('ROLLBACK').catch(() => {});
      await c.end().catch(() => {});
      await watcher.end().catch(() => {});
    },
  };
}

/** Counts crash points and how many converged; prints the tally. */
export class CrashTally {
  readonly points: { name: string; converged: boolean; error?: string }[] = [];

  constructor(private readonly chart: string) {}

  /** Runs one crash point and records whether it converged; a point that did not is rethrown. */
  async point(name: string, fn: () => Promise<void>): Promise<void> {
    const started = Date.now();
    try {
      await fn();
      this.points.push({ name, converged: true });
      console.log(`[crash ${this.chart}] ${name}: converged (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    } catch (err) {
      this.points.push({ name, converged: false, error: (err as Error).message });
      console.log(`[crash ${this.chart}] ${name}: DID NOT CONVERGE: ${(err as Error).message}`);
      throw err;
    }
  }

  get injected(): number {
    return this.points.length;
  }

  get converged(): number {
    return this.points.filter((p) => p.converged).length;
  }

  summary(): string {
    return `crash points (${this.chart}): ${this.injected} injected, ${this.converged} converged`;
  }
}

// Throws injected into the real database: a Kysely plugin that fails chosen statements (by kind
// and the table they touch, the Nth such one, so many times) before they are sent. Everything
// else goes through to Postgres untouched; a statement it fails never reaches the database.
import type { Kysely, KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryResult, RootOperationNode, UnknownRow } from 'kysely';
import type { DB } from '../../../src/db/schema.ts';

export type StatementKind = 'select' | 'insert' | 'update' | 'delete' | 'raw';

export interface Fault {
  kind: StatementKind;
  /** A table the statement names (or, for raw SQL, text it contains). */
  table: string;
  /** Which matching statement fails first (1-based, counted from `arm`); default 1. */
  nth?: number;
  /** How many matching statements fail from there on; default 1. */
  times?: number;
  /** Further narrows the match on the statement's operation tree, as JSON. */
  where?: (json: string) => boolean;
}

const KIND: Record<string, StatementKind> = {
  SelectQueryNode: 'select', InsertQueryNode: 'insert', UpdateQueryNode: 'update', DeleteQueryNode: 'delete', RawNode: 'raw',
};

export interface Armed {
  /** Statements failed so far. */
  readonly fired: number;
  /** Matching statements seen so far. */
  readonly seen: number;
  disarm(): void;
}

export class StatementFaults implements KyselyPlugin {
  private armed: { fault: Fault; seen: number; fired: number; on: boolean }[] = [];

  /** The database with this plugin on it: every statement through it is looked at. */
  wrap(db: Kysely<DB>): Kysely<DB> {
    return db.withPlugin(this);
  }

  arm(fault: Fault): Armed {
    const a = { fault, seen: 0, fired: 0, on: true };
    this.armed.push(a);
    return {
      get fired() {
        return a.fired;
      },
      get seen() {
        return a.seen;
      },
      disarm: () => {
        a.on = false;
      },
    };
  }

  disarmAll(): void {
    for (const a of this.armed) a.on = false;
    this.armed = [];
  }

  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    const kind = KIND[args.node.kind];
    if (!kind || !this.armed.some((a) => a.on)) return args.node;
    const json = JSON.stringify(args.node);
    for (const a of this.armed) {
      // A write inside a CTE (`with stored as (insert …) select …`) counts as that write.
      const nested = a.fault.kind !== 'select' && a.fault.kind !== 'raw' && json.includes(`"kind":"${Object.keys(KIND).find((k) => KIND[k] === a.fault.kind)}"`);
      if (!a.on || (a.fault.kind !== kind && !nested)) continue;
      const names = kind === 'raw' ? json.includes(a.fault.table) : json.includes(`"name":"${a.fault.table}"`);
      if (!names || (a.fault.where && !a.fault.where(json))) continue;
      a.seen += 1;
      const first = a.fault.nth ?? 1;
      if (a.seen >= first && a.seen < first + (a.fault.times ?? 1)) {
        a.fired += 1;
        throw new Error(`injected fault: ${kind} on ${a.fault.table} (#${a.seen})`);
      }
    }
    return args.node;
  }

  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    return args.result;
  }
}

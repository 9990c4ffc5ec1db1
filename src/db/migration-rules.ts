// The expand-only rule for schema migrations (docs/adr/0045-migrations-checked-for-the-old-build.md):
// the old build keeps serving on the migrated schema during every switch, so a migration may add
// but not drop, rename, change a type, set NOT NULL, narrow with a constraint, or rewrite rows,
// unless it says it is the contract step of a later release. Each migration's `up` runs against a
// recorder, not a database: the statements it would send are what is checked, whether written with
// the schema builder or as raw SQL.
import {
  Kysely, PostgresAdapter, PostgresIntrospector, PostgresQueryCompiler,
  type CompiledQuery, type DatabaseConnection, type Driver, type QueryResult,
} from 'kysely';
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

export type Breach = 'drop' | 'rename' | 'type-change' | 'set-not-null' | 'narrowing-constraint' | 'backfill';

export const BREACH_TEXT: Record<Breach, string> = {
  drop: 'drops a table, column, constraint or index',
  rename: 'renames a table, column or index',
  'type-change': "changes a column's type",
  'set-not-null': 'makes an existing column NOT NULL, or adds one without a default',
  'narrowing-constraint': 'adds a check, unique or foreign-key constraint to an existing table',
  backfill: 'rewrites or deletes existing rows (UPDATE, DELETE, TRUNCATE)',
};

/**
 * Migrations shipped before the rule was checked that a literal reading refuses, with why each
 * leaves the build before it working. Never extended: a new migration that breaks the rule is a
 * contract step, marked in its own file.
 */
export const GRANDFATHERED: Readonly<Record<string, string>> = {
  '0004_self_update_undecided':
    'drops and re-adds the phase check of self_update_status with one more value: every phase the build before it writes still passes',
};

/** What a migration exports to be a contract step: `step = 'contract'`, the release it ships in, and why the old build is unaffected. */
export interface ContractMark {
  step?: unknown;
  release?: unknown;
  reason?: unknown;
}

export interface Finding {
  migration: string;
  breach: Breach;
  statement: string;
}

export interface MigrationCheck {
  /** Migrations read, by name. */
  checked: string[];
  /** Breaches of migrations neither marked as contract steps nor grandfathered. */
  refused: Finding[];
  /** Malformed contract marks (missing release or reason). */
  problems: string[];
}

/** A driver that answers every statement with no rows and keeps its SQL. */
class RecordingDriver implements Driver {
  constructor(private readonly into: string[]) {}
  async init(): Promise<void> {}
  async acquireConnection(): Promise<DatabaseConnection> {
    const into = this.into;
    return {
      async executeQuery<R>(q: CompiledQuery): Promise<QueryResult<R>> {
        into.push(q.sql);
        return { rows: [] };
      },
      async *streamQuery() {
        return;
      },
    };
  }
  async beginTransaction(): Promise<void> {}
  async commitTransaction(): Promise<void> {}
  async rollbackTransaction(): Promise<void> {}
  async releaseConnection(): Promise<void> {}
  async destroy(): Promise<void> {}
}

/** The SQL statements a migration's `up` sends, in order. */
export async function statementsOf(up: (db: Kysely<any>) => Promise<void>): Promise<string[]> {
  const into: string[] = [];
  const db = new Kysely<any>({
    dialect: {
      createAdapter: () => new PostgresAdapter(),
      createDriver: () => new RecordingDriver(into),
      createIntrospector: (d) => new PostgresIntrospector(d),
      createQueryCompiler: () => new PostgresQueryCompiler(),
    },
  });
  try {
    await up(db);
  } finally {
    await db.destroy();
  }
  return into;
}

/** Lower case, string literals and comments blanked, whitespace collapsed: what the patterns read. */
function normalise(statement: string): string {
  return statement
    .replace(/--[^\n]*/g, ' ')
    .replace(/\/\*[\s\S]*?\*\//g, ' ')
    .replace(/'(?:[^']|'')*'/g, "''")
    .replace(/\s+/g, ' ')
    .trim()
    .toLowerCase();
}

const NAME = String.raw`"?([a-z_][a-z0-9_$.]*)"?`;

/** The rule's breaches in one statement; `created` holds the tables made earlier in the same migration (anything goes on those). */
export function breachesOf(statement: string, created: Set<string>): Breach[] {
  const s = normalise(statement);
  const made = new RegExp(`^create (?:unlogged )?table (?:if not exists )?${NAME}`).exec(s);
  if (made) {
    created.add(bare(made[1]!));
    return [];
  }
  const unique = new RegExp(`^create unique index .* on (?:only )?${NAME}`).exec(s);
  if (unique) return created.has(bare(unique[1]!)) ? [] : ['narrowing-constraint'];
  const altered = new RegExp(`^alter table (?:if exists )?(?:only )?${NAME}`).exec(s);
  const onNew = altered ? created.has(bare(altered[1]!)) : false;
  const out = new Set<Breach>();
  if (/^drop /.test(s)) out.add('drop');
  if (/^(?:update|delete from|truncate|merge into) /.test(s)) out.add('backfill');
  if (/^alter (?:table|index|sequence|view|type) .* rename /.test(s)) out.add('rename');
  if (altered && !onNew) {
    if (/ drop (?:column|constraint) /.test(s)) out.add('drop');
    if (/ alter (?:column )?[^ ]+ (?:set data )?type /.test(s)) out.add('type-change');
    if (/ alter (?:column )?[^ ]+ set not null/.test(s)) out.add('set-not-null');
    // A new NOT NULL column without a default fails every insert of a build that does not know it.
    for (const col of s.split(/ add (?:column )?/).slice(1)) {
      if (/^constraint /.test(col) || /^(?:check|unique|foreign key|primary key) /.test(col)) continue;
      if (/ not null/.test(col) && !/ default /.test(col) && !/ generated /.test(col)) out.add('set-not-null');
    }
    // NOT VALID skips the rows there are, not the old build's next writes.
    if (/ add (?:constraint [^ ]+ )?(?:check|unique|foreign key|exclude)\b/.test(s)) out.add('narrowing-constraint');
  }
  return [...out];
}

const bare = (name: string) => name.replace(/^.*\./, '');

/** Why a migration's contract mark is not usable, or null when it is a well-formed contract step (or no contract step at all). */
export function markProblem(name: string, mark: ContractMark): string | null {
  if (mark.step === undefined) return null;
  if (mark.step !== 'contract') return `${name}: \`step\` must be 'contract' (the only step that may break the rule), not ${JSON.stringify(mark.step)}`;
  if (typeof mark.release !== 'string' || !/^\d+\.\d+\.\d+$/.test(mark.release)) {
    return `${name}: a contract step names the release it ships in (\`export const release = 'x.y.z'\`), later than the one whose build stopped using what it removes`;
  }
  if (typeof mark.reason !== 'string' || mark.reason.trim().length < 10) return `${name}: a contract step says why the build before it no longer needs what it changes (\`export const reason = '...'\`)`;
  return null;
}

type MigrationModule = ContractMark & { up: (db: Kysely<any>) => Promise<void> };

/** Checks every migration file in `dir` (`NNNN_name.ts`) against the rule. */
export async function checkMigrations(dir: string, grandfathered: Readonly<Record<string, string>> = GRANDFATHERED): Promise<MigrationCheck> {
  const files = (await readdir(dir)).filter((f) => /^\d{4}_[a-z0-9_]+\.(ts|js)$/.test(f)).sort();
  const result: MigrationCheck = { checked: [], refused: [], problems: [] };
  for (const f of files) {
    const name = f.replace(/\.(ts|js)$/, '');
    const mod = (await import(pathToFileURL(path.join(dir, f)).href)) as MigrationModule;
    result.checked.push(name);
    const problem = markProblem(name, mod);
    if (problem) result.problems.push(problem);
    if (mod.step === 'contract' && !problem) continue;
    if (grandfathered[name]) continue;
    const created = new Set<string>();
    for (const statement of await statementsOf(mod.up)) {
      for (const breach of breachesOf(statement, created)) result.refused.push({ migration: name, breach, statement });
    }
  }
  return result;
}

/** The check's verdict as lines for a person: empty when every migration keeps the rule. */
export function describeCheck(c: MigrationCheck): string[] {
  const lines = [...c.problems];
  for (const f of c.refused) lines.push(`${f.migration} ${BREACH_TEXT[f.breach]}: ${f.statement.replace(/\s+/g, ' ').slice(0, 200)}`);
  if (c.refused.length) {
    lines.push(
      'the build before a migration keeps serving on the migrated schema during the switch: expand only, and move the contract part to a later release ' +
        "as its own migration exporting step = 'contract', release and reason (docs/adr/0045-migrations-checked-for-the-old-build.md)",
    );
  }
  return lines;
}

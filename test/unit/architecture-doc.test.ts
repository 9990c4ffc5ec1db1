// docs/architecture.md drawn from the code: its table of rooms says which rooms each imports, its
// table of libraries which rooms import each library, its drawing which reconcilers there are, and
// every table it names is one the migrations make and every file it names exists. Read from the
// page and from the tree on every run, so the page cannot drift from the code.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/shared/process.ts';
import { importGraph, sourceFiles } from '../helpers/shared/imports.ts';

const RAW = readFileSync(path.join(ROOT, 'docs/architecture.md'), 'utf8');
// Fenced blocks (the drawing) hold no inline code: left out, so that backticks pair up.
const PAGE = RAW.replace(/^```[\s\S]*?^```$/gm, '');
const SOURCE_DIRS = ['src', 'controllers', 'machines', 'migrations'];
const ticked = (text: string) => [...text.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);

interface Row { rooms: string[]; imports: string[]; holds: string }

/** The text of the page's section `## <title>`, up to the next section. */
function section(page: string, title: string): string {
  const start = page.indexOf(`## ${title}\n`);
  if (start < 0) throw new Error(`docs/architecture.md has no section ${title}`);
  const end = page.indexOf('\n## ', start + 1);
  return page.slice(start, end < 0 ? undefined : end);
}

/** The cells of a section's table rows (those whose first cell is code). */
function tableRows(text: string): string[][] {
  return text
    .split('\n')
    .filter((l) => l.startsWith('| `'))
    .map((l) => l.split('|').slice(1, -1));
}

/** The rows of the page's table of rooms: the rooms of the first column, the imports of the last. */
export function roomRows(page: string): Row[] {
  return tableRows(section(page, 'Rooms')).map((cells) => ({
    rooms: ticked(cells[0]!),
    holds: cells[1]!.trim(),
    imports: cells.at(-1)!.trim() === 'none' ? [] : ticked(cells.at(-1)!),
  }));
}

/** The page's table of libraries: each library and the rooms it lists as importing it. */
export function libraryRows(page: string): { libraries: string[]; rooms: string[] }[] {
  return tableRows(section(page, 'Libraries')).map((cells) => ({ libraries: ticked(cells[0]!), rooms: ticked(cells[1]!) }));
}

/** A file's imports of libraries: the package (with its scope) of every import that is not relative. */
export function librariesOf(file: string): string[] {
  const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
  const names = importedFiles.map((i) => i.fileName).filter((n) => !n.startsWith('.'));
  return [...new Set(names.map((n) => n.split('/').slice(0, n.startsWith('@') ? 2 : 1).join('/')))];
}

/** For each library, the rooms whose files import it. */
export function libraryImporters(rooms: string[], libs: Map<string, string[]>): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const [file, names] of libs) {
    const room = roomOf(rooms, path.relative(ROOT, file));
    if (!room) continue;
    for (const n of names) out.set(n, (out.get(n) ?? new Set()).add(room));
  }
  return out;
}

/** The tables the migrations leave, in their order: every createTable, less every dropTable, renames followed. */
export function migratedTables(sources: string[]): string[] {
  const tables = new Set<string>();
  const visit = (node: ts.Node) => {
    ts.forEachChild(node, visit);
    if (!ts.isCallExpression(node) || !ts.isPropertyAccessExpression(node.expression)) return;
    const method = node.expression.name.text;
    const arg = node.arguments[0];
    const name = arg && ts.isStringLiteral(arg) ? arg.text : undefined;
    if (method === 'createTable' && name) tables.add(name);
    if (method === 'dropTable' && name) tables.delete(name);
    // alterTable('a').renameTo('b')
    const inner = node.expression.expression;
    if (method === 'renameTo' && name && ts.isCallExpression(inner) && ts.isPropertyAccessExpression(inner.expression) && inner.expression.name.text === 'alterTable') {
      const from = inner.arguments[0];
      if (from && ts.isStringLiteral(from)) tables.delete(from.text);
      tables.add(name);
    }
  };
  for (const text of sources) {
    visit(ts.createSourceFile('migration.ts', text, ts.ScriptTarget.Latest));
    // Raw SQL, should a migration make or drop a table through it.
    for (const m of text.matchAll(/\bcreate table (?:if not exists )?"?(\w+)"?/gi)) tables.add(m[1]!);
    for (const m of text.matchAll(/\bdrop table (?:if exists )?"?(\w+)"?/gi)) tables.delete(m[1]!);
  }
  return [...tables].sort();
}

/** The names in the drawing's controllers box, below its first line (the runtime's own). */
export function drawnReconcilers(raw: string): string[] {
  const drawing = /^```\n([\s\S]*?)^```$/m.exec(raw)?.[1] ?? '';
  const lines = drawing.split('\n');
  const top = lines.findIndex((l) => /┌─+ controllers ─+┐/.test(l));
  if (top < 0) return [];
  const left = lines[top]!.indexOf('┌');
  const right = lines[top]!.indexOf('┐', left);
  const inside: string[] = [];
  for (const l of lines.slice(top + 2)) {
    if (l[left] !== '│') break;
    inside.push(l.slice(left + 1, right));
  }
  return inside.flatMap((l) => l.trim().split(/\s+/)).filter(Boolean);
}

/** The room a file is in: the longest room that is the file or a folder holding it. */
function roomOf(rooms: string[], rel: string): string | undefined {
  return rooms.filter((r) => (r.endsWith('/') ? rel.startsWith(r) : rel === r)).sort((a, b) => b.length - a.length)[0];
}

/** What each row's rooms import of the other rows' rooms, from the code. */
export function importedRooms(rows: Row[], graph: Map<string, string[]>): Map<Row, Set<string>> {
  const rooms = rows.flatMap((r) => r.rooms);
  const rowOf = new Map(rows.flatMap((row) => row.rooms.map((room) => [room, row] as const)));
  const out = new Map(rows.map((r) => [r, new Set<string>()]));
  for (const [file, targets] of graph) {
    const from = roomOf(rooms, path.relative(ROOT, file));
    if (!from) continue;
    const row = rowOf.get(from)!;
    for (const t of targets) {
      const to = roomOf(rooms, path.relative(ROOT, t));
      if (to && !row.rooms.includes(to)) out.get(row)!.add(to);
    }
  }
  return out;
}

describe('docs/architecture.md', () => {
  const files = SOURCE_DIRS.flatMap((d) => sourceFiles(path.join(ROOT, d)));
  const rows = roomRows(PAGE);
  const rooms = rows.flatMap((r) => r.rooms);

  it('every source file is in a room of the table', () => {
    expect(rows.length).toBeGreaterThan(10);
    expect(files.map((f) => path.relative(ROOT, f)).filter((f) => !roomOf(rooms, f))).toEqual([]);
    for (const r of rooms) expect(existsSync(path.join(ROOT, r)), r).toBe(true);
  });

  it("each room's imports are exactly the ones the table lists", () => {
    const actual = importedRooms(rows, importGraph(files));
    for (const row of rows) expect([...actual.get(row)!].sort(), row.rooms.join(' ')).toEqual([...row.imports].sort());
  });

  it('a room that imports one the table does not list is found (and one listed but unused)', () => {
    const a = path.join(ROOT, 'src/state/x.ts');
    const b = path.join(ROOT, 'controllers/y.ts');
    const rows2: Row[] = [{ rooms: ['src/state/'], imports: [], holds: '' }, { rooms: ['controllers/'], imports: ['src/state/'], holds: '' }];
    const found = importedRooms(rows2, new Map([[a, [b]], [b, []]]));
    expect([...found.get(rows2[0]!)!]).toEqual(['controllers/']);
    expect([...found.get(rows2[1]!)!]).toEqual([]);
  });

  it('each library of its table is imported by exactly the rooms it lists', () => {
    const libs = libraryRows(PAGE);
    expect(libs.length).toBeGreaterThan(5);
    const importers = libraryImporters(rooms, new Map(files.map((f) => [f, librariesOf(f)])));
    for (const row of libs) {
      for (const lib of row.libraries) expect([...(importers.get(lib) ?? [])].sort(), lib).toEqual([...row.rooms].sort());
    }
  });

  it('a room whose holds end in "<library> only" imports that library alone', () => {
    const only = rows.flatMap((r) => {
      const m = /\(?([\w@:/.-]+) only\)?$/.exec(r.holds);
      return m ? [{ rooms: r.rooms, library: m[1]! }] : [];
    });
    expect(only.map((o) => o.library).sort()).toEqual(['kysely', 'xstate']);
    for (const o of only) {
      const others = files.filter((f) => o.rooms.includes(roomOf(rooms, path.relative(ROOT, f)) ?? '')).flatMap((f) => librariesOf(f).filter((l) => l !== o.library).map((l) => `${path.relative(ROOT, f)}: ${l}`));
      expect(others, o.rooms.join(' ')).toEqual([]);
    }
  });

  it('a library imported by a room its row does not list is found', () => {
    const found = libraryImporters(['src/api/', 'src/adapters/'], new Map([[path.join(ROOT, 'src/api/x.ts'), ['dockerode']], [path.join(ROOT, 'src/adapters/y.ts'), ['dockerode']]]));
    expect([...found.get('dockerode')!].sort()).toEqual(['src/adapters/', 'src/api/']);
  });

  it('queries outside the repositories are in the files it lists, and in no other', () => {
    const line = PAGE.split('\n\n').find((p) => p.startsWith('Queries outside '));
    expect(line).toBeDefined();
    const listed = ticked(line!.slice(line!.indexOf(':'))).filter((t) => t.endsWith('.ts'));
    const exempt = ['src/state/', 'src/db/', 'migrations/'];
    const querying = files
      .map((f) => path.relative(ROOT, f))
      .filter((f) => !exempt.some((e) => f.startsWith(e)))
      .filter((f) => /\.(selectFrom|insertInto|updateTable|deleteFrom|replaceInto|mergeInto)\(|\bsql`/.test(readFileSync(path.join(ROOT, f), 'utf8')));
    expect(querying.sort()).toEqual([...listed].sort());
  });

  it('the controllers it draws are the reconcilers in controllers/', () => {
    const drawn = drawnReconcilers(RAW);
    const reconcilers = sourceFiles(path.join(ROOT, 'controllers'))
      .map((f) => path.relative(path.join(ROOT, 'controllers'), f))
      .filter((f) => !f.includes('/') && f !== 'index.ts')
      .map((f) => f.replace(/\.ts$/, ''));
    expect(reconcilers.length).toBeGreaterThan(5);
    expect([...drawn].sort()).toEqual(reconcilers.sort());
  });

  it('the tables the migrations make are the schema\'s', () => {
    const sources = readdirSync(path.join(ROOT, 'migrations')).filter((f) => f.endsWith('.ts')).sort().map((f) => readFileSync(path.join(ROOT, 'migrations', f), 'utf8'));
    const schema = ts.createSourceFile('schema.ts', readFileSync(path.join(ROOT, 'src/db/schema.ts'), 'utf8'), ts.ScriptTarget.Latest);
    const db = schema.statements.find((s): s is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(s) && s.name.text === 'DB')!;
    expect(migratedTables(sources)).toEqual(db.members.map((m) => (m.name as ts.Identifier).text).sort());
    // And the reading of the migrations follows drops and renames.
    expect(migratedTables([`db.schema.createTable('a'); db.schema.createTable('b'); db.schema.alterTable('b').renameTo('c')`, `db.schema.dropTable('a').execute(); sql\`create table d (x int)\``])).toEqual(['c', 'd']);
  });

  it('every table it names is a table of the schema, and it names every table', () => {
    const schema = ts.createSourceFile('schema.ts', readFileSync(path.join(ROOT, 'src/db/schema.ts'), 'utf8'), ts.ScriptTarget.Latest);
    const db = schema.statements.find((s): s is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(s) && s.name.text === 'DB')!;
    const tables = db.members.map((m) => (m.name as ts.Identifier).text).sort();
    expect(tables.length).toBeGreaterThan(10);
    const words = new Set(ticked(PAGE));
    // A snake_case name in code quotes is a table name (the page names no columns).
    expect([...words].filter((t) => /^[a-z]+(_[a-z]+)+$/.test(t) && !tables.includes(t))).toEqual([]);
    expect(tables.filter((t) => !words.has(t))).toEqual([]);
  });

  it('every file it names exists', () => {
    const all = [...SOURCE_DIRS, 'docs', 'test', 'scripts', 'deploy'].flatMap((d) => (d === 'docs' || d === 'deploy' ? [] : sourceFiles(path.join(ROOT, d)))).map((f) => path.relative(ROOT, f));
    const paths = [...new Set(ticked(PAGE).flatMap((t) => t.split(/\s+/)).filter((t) => /^[\w./-]+\.(ts|md|tsx)$/.test(t)))];
    expect(paths.length).toBeGreaterThan(10);
    const missing = paths.filter((p) => !existsSync(path.join(ROOT, p)) && !all.some((f) => f.endsWith(`/${p}`)) && !existsSync(path.join(ROOT, 'docs', p)));
    expect(missing).toEqual([]);
  });
});

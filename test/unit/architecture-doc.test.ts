// docs/architecture.md drawn from the code: its table of rooms says which rooms each imports, and
// every table and file it names exists. Read from the page and from the tree on every run, so the
// page cannot drift from the code.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/shared/process.ts';
import { importGraph, sourceFiles } from '../helpers/shared/imports.ts';

// Fenced blocks (the drawing) hold no inline code: left out, so that backticks pair up.
const PAGE = readFileSync(path.join(ROOT, 'docs/architecture.md'), 'utf8').replace(/^```[\s\S]*?^```$/gm, '');
const SOURCE_DIRS = ['src', 'controllers', 'machines', 'migrations'];
const ticked = (text: string) => [...text.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);

interface Row { rooms: string[]; imports: string[] }

/** The rows of the page's table of rooms: the rooms of the first column, the imports of the last. */
export function roomRows(page: string): Row[] {
  const section = page.slice(page.indexOf('## Rooms'), page.indexOf('\n## ', page.indexOf('## Rooms') + 1));
  return section
    .split('\n')
    .filter((l) => l.startsWith('| `'))
    .map((l) => {
      const cells = l.split('|').slice(1, -1);
      return { rooms: ticked(cells[0]!), imports: cells.at(-1)!.trim() === 'none' ? [] : ticked(cells.at(-1)!) };
    });
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
    const rows2: Row[] = [{ rooms: ['src/state/'], imports: [] }, { rooms: ['controllers/'], imports: ['src/state/'] }];
    const found = importedRooms(rows2, new Map([[a, [b]], [b, []]]));
    expect([...found.get(rows2[0]!)!]).toEqual(['controllers/']);
    expect([...found.get(rows2[1]!)!]).toEqual([]);
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

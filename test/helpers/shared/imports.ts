// The project's import graph as TypeScript's own pre-parser reads it: every relative import and
// re-export of every source file, resolved to the file it names.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

/** Every .ts/.tsx file under `dir` (not declarations, not node_modules or build output). */
export function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name === 'node_modules' || e.name === 'dist') continue;
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...sourceFiles(p));
    else if (/\.tsx?$/.test(e.name) && !e.name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

/** Each file's relative imports (and re-exports) that resolve to one of `files`. */
export function importGraph(files: string[]): Map<string, string[]> {
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const f of files) {
    const { importedFiles } = ts.preProcessFile(readFileSync(f, 'utf8'), true, true);
    graph.set(f, importedFiles.map((i) => i.fileName).filter((n) => n.startsWith('.')).map((n) => path.resolve(path.dirname(f), n)).filter((p) => known.has(p)));
  }
  return graph;
}

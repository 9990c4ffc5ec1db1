// No module imports itself through others: every import in the tree (source, charts, controllers,
// the UI, tests, benches, scripts) read by TypeScript's own pre-parser, and the graph searched for a
// circle. A circle means two rooms that cannot be understood (or loaded) one without the other.
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/shared/process.ts';
import { importGraph, sourceFiles } from '../helpers/shared/imports.ts';

const DIRS = ['src', 'controllers', 'machines', 'migrations', 'test', 'bench', 'scripts'];

/** The strongly connected components with more than one file, or a file importing itself (Tarjan). */
export function circles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

describe('import circles', () => {
  it('finds a circle when there is one (and only then)', () => {
    expect(circles(new Map([['a', ['b']], ['b', ['c']], ['c', ['a']], ['d', ['a']]]))).toEqual([['a', 'b', 'c']]);
    expect(circles(new Map([['a', ['a']]]))).toEqual([['a']]);
    expect(circles(new Map([['a', ['b']], ['b', []], ['c', ['a', 'b']]]))).toEqual([]);
  });

  it('the tree has none', () => {
    const files = DIRS.flatMap((d) => sourceFiles(path.join(ROOT, d)));
    const graph = importGraph(files);
    // The walk reads the tree: the UI's pages import the shell's context, the controllers the runtime.
    expect(graph.get(path.join(ROOT, 'src/ui/src/pages/status.tsx'))).toContain(path.join(ROOT, 'src/ui/src/app-context.ts'));
    expect(files.length).toBeGreaterThan(200);
    expect(circles(graph).map((c) => c.map((f) => path.relative(ROOT, f)))).toEqual([]);
  });
});

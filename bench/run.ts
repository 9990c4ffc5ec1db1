// `npm run bench [name...]`: runs every bench/*.bench.ts (or the named ones) against the real
// components on this machine and prints each figure with its goal. Benchmarks, not tests: they
// report numbers, they do not fail a build.
import { readdir } from 'node:fs/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import path from 'node:path';

export interface Figure {
  name: string;
  value: number;
  unit: string;
  goal?: string;
  /** Whether the goal is met, when the bench decides it: printed as a mark after the goal. */
  ok?: boolean;
}

export type Bench = (log: (msg: string) => void) => Promise<Figure[]>;

const dir = fileURLToPath(new URL('.', import.meta.url));
const wanted = process.argv.slice(2);
const files = (await readdir(dir)).filter((f) => f.endsWith('.bench.ts')).sort();
let failures = 0;
for (const f of files) {
  const name = f.replace(/\.bench\.ts$/, '');
  if (wanted.length && !wanted.includes(name)) continue;
  process.stdout.write(`\n## ${name}\n`);
  try {
    const mod = (await import(pathToFileURL(path.join(dir, f)).href)) as { default: Bench };
    const figures = await mod.default((m) => process.stdout.write(`  ${m}\n`));
    for (const fig of figures) {
      process.stdout.write(`${fig.name}: ${Number.isInteger(fig.value) ? fig.value : fig.value.toFixed(2)} ${fig.unit}${fig.goal ? `  (goal ${fig.goal})` : ''}${fig.ok === undefined ? '' : fig.ok ? '  pass' : '  FAIL'}\n`);
    }
  } catch (err) {
    failures++;
    process.stdout.write(`bench ${name} failed: ${(err as Error).stack ?? err}\n`);
  }
}
process.exit(failures ? 1 : 0);

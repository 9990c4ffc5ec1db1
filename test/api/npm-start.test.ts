// `npm start` as the quick start runs it, on embedded defaults (no DATABASE_URL: PGlite in the data
// directory): its `prestart` bundles the sources into .artifacts/start (the UI is built by the
// tests' `pretest`, as by its own `prestart`), and `start` runs that bundle. Nothing it runs is
// TypeScript: a TypeScript loader held about 50 MB more than the bundle (docs/reliability.md).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { bundleForNpmStart, npmStartArgs, ROOT, runNpmStart, type Running } from '../helpers/shared/process.ts';
import { knownMigrations } from '../../src/db/migrate.ts';

const START = path.join(ROOT, '.artifacts/start');
let dataDir: string;
let proc: Running | undefined;

beforeAll(async () => {
  await bundleForNpmStart();
  dataDir = mkdtempSync(path.join(tmpdir(), 'installer-npm-start-'));
}, 120_000);
afterAll(async () => {
  if (proc) expect(await proc.stop()).toBe(0);
  rmSync(dataDir, { recursive: true, force: true });
});

describe('npm start', () => {
  it('runs the bundle its prestart made from the sources, in a tree of JavaScript beside the repository', () => {
    expect(npmStartArgs().at(-1)).toBe('.artifacts/start/src/bundle/start.js');
    expect(readdirSync(path.join(START, 'src/bundle')).sort()).toEqual(['main.js', 'start.js']);
    const migrations = readdirSync(path.join(START, 'migrations'));
    expect(migrations.sort()).toEqual(readdirSync(path.join(ROOT, 'migrations')).filter((f) => f.endsWith('.ts')).map((f) => f.replace(/\.ts$/, '.js')).sort());
    // What the backend finds relative to itself: the repository's own package.json and built UI.
    expect(lstatSync(path.join(START, 'package.json')).isSymbolicLink()).toBe(true);
    expect(readFileSync(path.join(START, 'src/ui/dist/index.html'), 'utf8')).toBe(readFileSync(path.join(ROOT, 'src/ui/dist/index.html'), 'utf8'));
  });

  it('starts on embedded defaults: migrates its own database, makes the first admin, serves the API and the UI', async () => {
    proc = runNpmStart({ DATA_DIR: dataDir, HOST: '127.0.0.1', PORT: '0', LOG_LEVEL: 'info' });
    const base = await proc.url;
    const health = await fetch(`${base}/api/health`);
    expect(health.status).toBe(200);
    const out = proc.output();
    expect(out).toContain('"database":"pglite"');
    const applied = JSON.parse(out.split('\n').find((l) => l.includes('"applied":['))!) as { applied: string[] };
    expect(applied.applied).toEqual(await knownMigrations());
    const password = readFileSync(path.join(dataDir, 'secrets/initial-admin-password'), 'utf8').trim();
    const login = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'admin', password }) });
    expect(login.status).toBe(200);
    const ui = await fetch(`${base}/`);
    expect(ui.status).toBe(200);
    expect(await ui.text()).toBe(readFileSync(path.join(ROOT, 'src/ui/dist/index.html'), 'utf8'));
    // An operator reads this output: no runtime warning (a rejected code cache, type stripping) belongs in it.
    expect(out).not.toMatch(/\(node:\d+\) .*Warning|rejected the code cache/);
  }, 120_000);
});

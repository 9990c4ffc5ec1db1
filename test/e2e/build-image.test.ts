// scripts/build-image.sh makes its context (compiled code, bundle, UI, dependencies) once per content
// of its sources: a second build of the same sources reuses it and gives the same image, and a
// build after a source changed makes it again, with the change in the image. On a copy of this
// checkout's sources, with a build cache of its own, on the real engine.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ROOT } from '../helpers/shared/process.ts';
import { docker, must, REGISTRY, run } from '../helpers/e2e/rig.ts';

const copy = mkdtempSync(path.join(tmpdir(), 'build-image-'));
const cache = path.join(copy, '.build-cache');
const repo = `${REGISTRY}/build-image-${randomBytes(3).toString('hex')}/installer`;
const ref = (n: number) => `${repo}:${n}`;
const built: string[] = [];

async function build(tag: string): Promise<{ out: string; imageId: string }> {
  const out = await must('bash', [path.join(copy, 'scripts/build-image.sh'), '--rig', tag], { env: { INSTALLER_BUILD_CACHE: cache }, timeoutMs: 10 * 60_000 });
  built.push(tag);
  return { out, imageId: (await docker(['image', 'inspect', '--format', '{{.Id}}', tag])).trim() };
}

beforeAll(() => {
  // The tracked files as they are in the working tree, and this checkout's dependencies.
  const files = execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8' }).split('\0').filter(Boolean);
  for (const f of files) cpSync(path.join(ROOT, f), path.join(copy, f), { recursive: true });
  // Hard links, not a symlink: the bundler checks that each module resolves inside the tree it builds.
  execFileSync('cp', ['-al', path.join(ROOT, 'node_modules'), path.join(copy, 'node_modules')]);
  // The production dependencies another build of this run installed, if any (linked, not copied).
  const deps = path.join(ROOT, '.artifacts/image-build');
  mkdirSync(cache, { recursive: true });
  for (const d of existsSync(deps) ? readdirSync(deps).filter((n) => n.startsWith('deps-')) : []) {
    execFileSync('cp', ['-al', path.join(deps, d), path.join(cache, d)]);
  }
});

afterAll(async () => {
  if (built.length) await run('docker', ['rmi', '-f', ...built]);
  rmSync(copy, { recursive: true, force: true });
});

describe('the image build', () => {
  it('reuses a context made from the same sources, and makes it again when one changed', async () => {
    const first = await build(ref(1));
    expect(first.out).toMatch(/^context: made \(sources [0-9a-f]{32}\)$/m);
    const sources = /sources ([0-9a-f]{32})/.exec(first.out)![1]!;

    const second = await build(ref(2));
    expect(second.out).toContain(`context: reused (sources ${sources})`);
    expect(second.imageId).toBe(first.imageId);

    // A changed source: the context is made again, and the image holds the change.
    appendFileSync(path.join(copy, 'scripts/self-update.sh'), '# changed by the build-image test\n');
    const third = await build(ref(3));
    expect(third.out).toMatch(/^context: made \(sources [0-9a-f]{32}\)$/m);
    expect(third.out).not.toContain(sources);
    expect(third.imageId).not.toBe(first.imageId);
    const shipped = await docker(['run', '--rm', '--entrypoint', 'tail', ref(3), '-n', '1', '/usr/src/app/scripts/self-update.sh']);
    expect(shipped).toContain('# changed by the build-image test');
  });
});

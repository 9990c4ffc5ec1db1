// The backend under load: built as the image holds it (compiled, bundled, its code cache primed),
// and started from that build or as `npm start` starts it, on a database already migrated.
import { copyFileSync, existsSync, readFileSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { freePort, http, run, sleep, startProc, type Proc } from './processes.ts';
import { NODE, npmStartArgs, ROOT } from '../../test/helpers/shared/process.ts';
import type { TestDatabase } from '../../test/helpers/shared/db.ts';

/** The node options the image starts the backend with (deploy/Dockerfile's CMD), unless overridden. */
function imageNodeArgs(): string[] {
  const cmd = /^CMD (\[.*\])\s*$/m.exec(readFileSync(path.join(ROOT, 'deploy/Dockerfile'), 'utf8'))?.[1];
  if (!cmd) throw new Error('deploy/Dockerfile has no CMD in exec form');
  const argv = JSON.parse(cmd) as string[];
  return argv.slice(1, -1);
}
export const NODE_ARGS = process.env.BENCH_BACKEND_NODE_ARGS !== undefined ? process.env.BENCH_BACKEND_NODE_ARGS.split(/\s+/).filter(Boolean) : imageNodeArgs();
const SECRETS = {
  JWT_SECRET: 'bench-jwt-secret-0123456789-abcdefghijklmnopqrstu',
  ENCRYPTION_KEY: 'bench-encryption-key-0123456789-abcdefghijklmn',
  SERVICE_TOKEN: 'bench-service-token-0123456789-abcdefghijklmno',
};

export interface Backend {
  proc: Proc;
  base: string;
  bootMs: number;
}

export type Mode = 'image' | 'start';

/** Spawns the backend and waits for the first 200 from /api/health; the wall time is the boot. */
export async function startBackend(mode: Mode, ctx: { dist: string; db: TestDatabase; dataDir: string; tmp: string }, env: Record<string, string>, n: number): Promise<Backend> {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const [cmd, args, cwd] =
    mode === 'image'
      ? ([NODE, [...NODE_ARGS, path.join(ctx.dist, 'dist/src/bundle/start.js')], ctx.dist] as const)
      : ([NODE, npmStartArgs(), ROOT] as const);
  const t0 = performance.now();
  const proc = startProc(`backend-${mode}-${n}`, cmd, [...args], {
    cwd,
    logFile: path.join(ctx.tmp, `backend-${mode}-${n}.log`),
    env: {
      NODE_ENV: 'production',
      HOST: '127.0.0.1',
      PORT: String(port),
      DATABASE_URL: ctx.db.url,
      DATA_DIR: ctx.dataDir,
      MIGRATE_ON_BOOT: 'false',
      DOCKER_SOCKET: process.env.DOCKER_SOCKET ?? '/var/run/docker.sock',
      ...SECRETS,
      ...env,
    },
  });
  let gone = false;
  void proc.exited.then(() => (gone = true));
  for (;;) {
    if (gone) throw new Error(`the backend (${mode}) exited before it was healthy:\n${proc.tail()}`);
    if (performance.now() - t0 > 30_000) throw new Error(`the backend (${mode}) was not healthy within 30 s:\n${proc.tail()}`);
    try {
      if ((await http(`${base}/api/health`)).status === 200) break;
    } catch {
      /* not listening yet */
    }
    await sleep(10);
  }
  return { proc, base, bootMs: performance.now() - t0 };
}

/**
 * The backend as the image holds it (scripts/build-image.sh, then the Dockerfile's priming step):
 * dist/ compiled by tsc, the bundle in dist/src/bundle, its code cache made under the CMD's flags,
 * package.json, and node_modules (linked).
 */
export async function buildBackend(tmp: string, log: (m: string) => void): Promise<string> {
  const dir = path.join(tmp, 'app');
  const t0 = performance.now();
  const r = await run(NODE, [path.join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json', '--outDir', path.join(dir, 'dist')], { allowFail: true });
  // tsc emits despite type errors; a type error elsewhere in the tree must not stop a benchmark.
  if (!existsSync(path.join(dir, 'dist/src/main.js'))) throw new Error(`tsc produced no dist/src/main.js:\n${r.out.slice(-3_000)}`);
  if (r.code !== 0) log(`warning: tsc exited ${r.code} (type errors in the tree); measuring what it emitted`);
  copyFileSync(path.join(ROOT, 'package.json'), path.join(dir, 'package.json'));
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
  await run(NODE, ['--import', 'tsx', path.join(ROOT, 'scripts/bundle-backend.ts'), path.join(dir, 'dist')]);
  await run(NODE, [...NODE_ARGS, path.join(dir, 'dist/src/bundle/start.js'), '--prime-code-cache'], { cwd: dir });
  log(`the backend compiled, bundled and its code cache primed in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  return dir;
}

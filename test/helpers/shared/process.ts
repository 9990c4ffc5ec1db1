// Runs the installer's real entry points as child processes and captures everything they print.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const NODE = path.join(ROOT, 'node_modules/.bin/node');

/** package.json's `start` after `node`: the V8 flags, then the script (the bundle's loader under .artifacts/start, made by `prestart`). */
export function npmStartArgs(): string[] {
  const start = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start;
  const argv = start.split(/\s+/);
  if (argv[0] !== 'node' || argv.length < 2 || argv.at(-1)!.startsWith('-')) throw new Error(`package.json's start is not \`node [flags] <script>\`: ${start}`);
  return argv.slice(1);
}

/** The V8 flags `npm start` runs the backend with (package.json's `start`, before its script). */
export function npmStartNodeFlags(): string[] {
  return npmStartArgs().slice(0, -1);
}

/**
 * Makes what `npm start` runs (`prestart` without the UI's build, which the tests' `pretest` made):
 * the backend bundled from the sources, in .artifacts/start.
 */
export async function bundleForNpmStart(): Promise<void> {
  const proc = runEntry('scripts/bundle-backend.ts', {}, ['--source']);
  const code = await proc.exited;
  if (code !== 0) throw new Error(`scripts/bundle-backend.ts --source exited ${code}:\n${proc.output()}`);
}

export interface Running {
  child: ChildProcess;
  output: () => string;
  url: Promise<string>;
  exited: Promise<number | null>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export function runEntry(entry: string, env: Record<string, string>, args: string[] = [], stdin?: string): Running {
  return runNode(['--import', 'tsx', path.join(ROOT, entry), ...args], env, stdin);
}

/** The backend as `npm start` runs it (bundleForNpmStart() made what it runs), with its V8 flags or others. */
export function runNpmStart(env: Record<string, string>, nodeFlags = npmStartNodeFlags()): Running {
  return runNode([...nodeFlags, npmStartArgs().at(-1)!], env);
}

function runNode(argv: string[], env: Record<string, string>, stdin?: string): Running {
  const child = spawn(NODE, argv, {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let resolveUrl!: (u: string) => void;
  let rejectUrl!: (e: Error) => void;
  const url = new Promise<string>((res, rej) => {
    resolveUrl = res;
    rejectUrl = rej;
  });
  url.catch(() => {}); // callers that only wait for the exit never look at it
  const onData = (d: Buffer) => {
    out += d.toString();
    const m = /"address":"(http:\/\/[^"]+)"/.exec(out);
    if (m) resolveUrl(m[1]!);
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  if (stdin !== undefined) child.stdin!.end(stdin);
  else child.stdin!.end();
  const exited = new Promise<number | null>((res) => child.on('exit', (code) => res(code)));
  void exited.then(() => rejectUrl(new Error(`process exited before listening:\n${out}`)));
  return {
    child,
    output: () => out,
    url,
    exited,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}

// Runs the installer's real entry points as child processes and captures everything they print.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const NODE = path.join(ROOT, 'node_modules/.bin/node');

/** The V8 flags `npm start` runs the backend with (package.json's `start`, before `--import`). */
export function npmStartNodeFlags(): string[] {
  const start = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start;
  const argv = start.split(/\s+/);
  if (argv[0] !== 'node' || !argv.includes('--import')) throw new Error(`package.json's start is not \`node [flags] --import tsx …\`: ${start}`);
  return argv.slice(1, argv.indexOf('--import'));
}

export interface Running {
  child: ChildProcess;
  output: () => string;
  url: Promise<string>;
  exited: Promise<number | null>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export function runEntry(entry: string, env: Record<string, string>, args: string[] = [], stdin?: string): Running {
  const child = spawn(NODE, ['--import', 'tsx', path.join(ROOT, entry), ...args], {
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

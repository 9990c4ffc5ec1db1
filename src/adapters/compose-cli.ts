// The real `docker compose` CLI, always with an argument array (never a shell string). Each run
// gets its own process group so that cancelling stops compose and everything it started.
import { spawn } from 'node:child_process';
import type { Readable } from 'node:stream';

export type Stream = 'stdout' | 'stderr';

export interface ComposeTarget {
  project: string;
  /** Compose files, absolute paths. */
  files: readonly string[];
  /** Working directory: where compose finds the project's .env. */
  cwd: string;
  /** The engine's socket (the DOCKER_SOCKET setting); absent: the CLI's own default. */
  dockerSocket?: string;
}

export interface ComposeRun {
  pid: number | undefined;
  /** Exit code; a process ended by a signal reports 128 + the signal number, as a shell does. */
  exited: Promise<number>;
  /** Stops the process group: SIGTERM, then SIGKILL after the grace period. */
  cancel(graceMs?: number): void;
}

const SIGNALS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 };

/**
 * The environment compose runs with. The CLI knows nothing of the installer's DOCKER_SOCKET
 * setting: the target names the engine socket, so compose talks to the engine dockerode talks to.
 */
export function composeEnv(base: NodeJS.ProcessEnv, target: Pick<ComposeTarget, 'dockerSocket'>, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return { ...base, ...(target.dockerSocket ? { DOCKER_HOST: `unix://${target.dockerSocket}` } : {}), ...extra };
}

/** True for the line the docker CLI prints when it cannot reach the engine. */
export function engineUnreachable(line: string): boolean {
  return /Cannot connect to the Docker daemon|Is the docker daemon running|error during connect|dial unix .*(no such file or directory|connection refused)/i.test(line);
}

export function composeArgs(target: ComposeTarget, args: readonly string[]): string[] {
  return ['compose', '--ansi', 'never', '--progress', 'plain', '-p', target.project, ...target.files.flatMap((f) => ['-f', f]), ...args];
}

export function runCompose(
  target: ComposeTarget,
  args: readonly string[],
  onLine: (stream: Stream, line: string) => void,
  opts: { env?: Record<string, string>; dockerBinary?: string } = {},
): ComposeRun {
  return runDocker(target, composeArgs(target, args), onLine, opts);
}

/**
 * Runs the docker CLI itself (`docker stack deploy`, `docker service update` on a Swarm) the way
 * `runCompose` runs compose: against the target's engine, in its own process group, line by line;
 * `input` is written to its standard input (a rendered stack file for `-c -`).
 */
export function runDocker(
  target: Pick<ComposeTarget, 'cwd' | 'dockerSocket'>,
  args: readonly string[],
  onLine: (stream: Stream, line: string) => void,
  opts: { env?: Record<string, string>; dockerBinary?: string; input?: string } = {},
): ComposeRun {
  const child = spawn(opts.dockerBinary ?? 'docker', args, {
    cwd: target.cwd,
    env: composeEnv(process.env, target, opts.env),
    stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    detached: true,
  });
  if (opts.input !== undefined && child.stdin) {
    // A CLI that exits before reading all of it closes the pipe: its exit code says why.
    child.stdin.on('error', () => {});
    child.stdin.end(opts.input);
  }
  const pipe = (stream: Stream, source: Readable) => {
    // Compose redraws progress with carriage returns; each redraw is a line of its own.
    let pending = '';
    source.setEncoding('utf8');
    source.on('data', (chunk: string) => {
      pending += chunk;
      const parts = pending.split(/\r\n|\n|\r/);
      pending = parts.pop() ?? '';
      for (const p of parts) if (p.length) onLine(stream, p);
    });
    source.on('end', () => {
      if (pending.length) onLine(stream, pending);
      pending = '';
    });
  };
  pipe('stdout', child.stdout!);
  pipe('stderr', child.stderr!);
  let killTimer: NodeJS.Timeout | undefined;
  const exited = new Promise<number>((resolve) => {
    child.on('error', (err) => {
      onLine('stderr', `cannot run docker compose: ${err.message}`);
      resolve(127);
    });
    child.on('close', (code, signal) => {
      clearTimeout(killTimer);
      resolve(code ?? 128 + (SIGNALS[signal ?? ''] ?? 0));
    });
  });
  const signalGroup = (sig: NodeJS.Signals) => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, sig);
    } catch {
      /* already gone */
    }
  };
  return {
    pid: child.pid,
    exited,
    cancel(graceMs = 5_000) {
      signalGroup('SIGTERM');
      killTimer = setTimeout(() => signalGroup('SIGKILL'), graceMs);
      killTimer.unref();
    },
  };
}

/** Runs compose to completion and collects its output (for short queries such as `config --services`). */
export async function composeOutput(target: ComposeTarget, args: readonly string[], env?: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const run = runCompose(target, args, (s, l) => (s === 'stdout' ? (stdout += `${l}\n`) : (stderr += `${l}\n`)), env ? { env } : {});
  const code = await run.exited;
  return { code, stdout, stderr };
}

/** Pull progress from compose's plain output, e.g. `a1b2c3 Downloading [==>   ] 1.2MB/3.4MB`. */
export interface PullProgress {
  id: string;
  status: string;
  current?: number;
  total?: number;
}

const UNITS: Record<string, number> = { B: 1, kB: 1e3, KB: 1e3, MB: 1e6, GB: 1e9, TB: 1e12 };
const size = (n: string, u: string) => Math.round(Number.parseFloat(n) * (UNITS[u] ?? 1));

export function parsePullProgress(line: string): PullProgress | null {
  const m = /^\s*([A-Za-z0-9_.-]+) (Pulling fs layer|Waiting|Downloading|Verifying Checksum|Download complete|Extracting|Pull complete|Already exists|Pulling|Pulled|Skipped[^[]*)(?:\s+\[[^\]]*\]\s+([\d.]+)([kKMGT]?B)\/([\d.]+)([kKMGT]?B))?\s*$/.exec(line);
  if (!m) return null;
  const p: PullProgress = { id: m[1]!, status: m[2]!.trim() };
  if (m[3] && m[4] && m[5] && m[6]) {
    p.current = size(m[3], m[4]);
    p.total = size(m[5], m[6]);
  }
  return p;
}

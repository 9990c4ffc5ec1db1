// The real Docker rig for tests: the engine, Compose v2 and the registry on 127.0.0.1:5000, set up
// by scripts/rig/setup.sh. Nothing here fakes Docker; a rig that cannot start fails the test.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync, cpSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ROOT } from '../shared/process.ts';
import { freePort } from '../shared/ports.ts';

export const REGISTRY = '127.0.0.1:5000';

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

export function run(cmd: string, args: string[], opts: { env?: Record<string, string>; cwd?: string; input?: string; timeoutMs?: number } = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd ?? ROOT, env: { ...process.env, ...opts.env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = opts.timeoutMs ? setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs) : undefined;
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? -1, stdout, stderr });
    });
    // A child that exits without reading its input (docker events with --until) closes the pipe first.
    child.stdin.on('error', () => {});
    child.stdin.end(opts.input ?? '');
  });
}

/** Runs a command and throws with its output when it fails. */
export async function must(cmd: string, args: string[], opts: Parameters<typeof run>[2] = {}): Promise<string> {
  const r = await run(cmd, args, opts);
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${r.code}\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

export const docker = (args: string[], opts?: Parameters<typeof run>[2]) => must('docker', args, opts);

/** Brings the rig up (idempotent). Throws with the set-up script's output when it cannot. */
export async function ensureRig(): Promise<void> {
  const r = await run('bash', [path.join(ROOT, 'scripts/rig/setup.sh')], { timeoutMs: 15 * 60_000 });
  if (r.code !== 0) {
    throw new Error(`the Docker rig could not start (scripts/rig/setup.sh exited ${r.code}); Docker tests cannot run without it:\n${r.stdout.slice(-4000)}\n${r.stderr.slice(-4000)}`);
  }
}

export { freePort };

export const uniqueName = (prefix: string) => `${prefix}-${randomBytes(4).toString('hex')}`;

/**
 * Other suites on the same engine prune dangling images; the legacy builder commits an image before
 * it tags it, so a prune in between deletes a fresh build ("could not find image from tag"). Such a
 * build is repeated, twice at most; any other failure is thrown at once.
 */
export async function retryOnSharedEngine<T>(what: string, fn: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      const raced = /could not find image|No such image|failed to get digest|no such file or directory/i.test((err as Error).message);
      if (!raced || attempt >= 3) throw err;
      process.stderr.write(`${what}: the image vanished (a concurrent prune?); building again\n`);
    }
  }
}

/** Builds the installer image on the rig, pushes the tags and returns each tag's registry digest. */
export async function buildInstallerImage(tags: string[]): Promise<Record<string, string>> {
  const out = await retryOnSharedEngine(`building ${tags.join(' ')}`, () =>
    must('bash', [path.join(ROOT, 'scripts/build-image.sh'), '--rig', '--push', ...tags], { timeoutMs: 10 * 60_000 }),
  );
  const digests: Record<string, string> = {};
  for (const m of out.matchAll(/^digest (\S+) (sha256:[0-9a-f]{64})$/gm)) digests[m[1]!] = m[2]!;
  for (const t of tags) if (!digests[t]) throw new Error(`no digest reported for ${t}:\n${out}`);
  return digests;
}

export interface PlatformProject {
  project: string;
  dir: string;
  composeFile: string;
  compose(args: string[]): Promise<string>;
  /** Containers of the project: id, name, service, state. */
  containers(): Promise<{ id: string; name: string; service: string; state: string }[]>;
  remove(): Promise<void>;
}

/**
 * A real compose project of small busybox services (deploy/rig/demo-platform) under a name of its
 * own, so tests never step on each other or on a platform that runs on the machine.
 */
export async function startPlatform(opts: { project?: string; up?: boolean; env?: Record<string, string> } = {}): Promise<PlatformProject> {
  const project = opts.project ?? uniqueName('platform-t');
  const dir = mkdtempSync(path.join(tmpdir(), `${project}-`));
  cpSync(path.join(ROOT, 'deploy/rig/demo-platform'), dir, { recursive: true });
  const composeFile = path.join(dir, 'docker-compose.yml');
  // Each test platform publishes its web service on a port of its own.
  const env = { TZ: 'UTC', WEB_PORT: String(await freePort()), ...opts.env };
  writeFileSync(path.join(dir, '.env'), Object.entries(env).map(([k, v]) => `${k}=${v}\n`).join(''));
  const compose = (args: string[]) => docker(['compose', '-p', project, '-f', composeFile, ...args], { cwd: dir, timeoutMs: 5 * 60_000 });
  const p: PlatformProject = {
    project,
    dir,
    composeFile,
    compose,
    async containers() {
      const out = await docker(['ps', '-a', '--filter', `label=com.docker.compose.project=${project}`, '--format', '{{.ID}}\t{{.Names}}\t{{.Label "com.docker.compose.service"}}\t{{.State}}']);
      return out.trim().split('\n').filter(Boolean).map((l) => {
        const [id, name, service, state] = l.split('\t');
        return { id: id!, name: name!, service: service!, state: state! };
      });
    },
    async remove() {
      await compose(['down', '-v', '--remove-orphans', '-t', '1']);
    },
  };
  if (opts.up !== false) await compose(['up', '-d', '--wait', '--wait-timeout', '120']);
  return p;
}

/**
 * Removes the kept readers of `workDir` (src/adapters/container-files.ts): a backend stops its own,
 * but one that was killed (the crash tests, a stop past compose's timeout) leaves it, and a test
 * stack's work dir has no next backend to remove it.
 */
export async function removeWorkDirReaders(workDir: string): Promise<void> {
  const ids = (await run('docker', ['ps', '-aq', '--filter', 'label=io.installer.role=work-dir-reader'])).stdout.split('\n').filter(Boolean);
  if (!ids.length) return;
  const seen = JSON.parse((await run('docker', ['inspect', ...ids])).stdout || '[]') as { Id: string; HostConfig: { Binds: string[] | null } }[];
  const ours = seen.filter((c) => (c.HostConfig.Binds ?? []).some((b) => b.startsWith(`${workDir}:`))).map((c) => c.Id);
  if (ours.length) await run('docker', ['rm', '-f', ...ours]);
}

// A private Docker engine beside the rig's shared one (rig.md): its own data root, exec root,
// pidfile and socket, so a test can stop and start it without disturbing anyone. Images are
// loaded from the shared engine (nothing is pulled). A daemon that cannot start fails the test.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { must, run } from './rig.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface PrivateEngine {
  /** The engine's socket path (what DOCKER_SOCKET takes). */
  socket: string;
  /** `unix://<socket>`, for DOCKER_HOST and `docker -H`. */
  host: string;
  /** Runs the docker CLI against this engine; throws with the output when it fails. */
  docker(args: string[], opts?: { cwd?: string; timeoutMs?: number }): Promise<string>;
  /** Starts the daemon (again); returns how long until it answered. */
  start(): Promise<number>;
  /** SIGTERM, then waits until the daemon has exited (SIGKILL after `timeoutMs`); returns how long it took. */
  stop(timeoutMs?: number): Promise<number>;
  running(): boolean;
  /** The daemon's log so far (for failure messages). */
  log(): string;
  /** Stops the daemon, unmounts what it left and removes its directories. */
  destroy(): Promise<void>;
}

/**
 * Roots are kept short: containerd's sockets live under the exec root and a unix socket path
 * may not exceed 107 bytes.
 */
export async function startPrivateEngine(): Promise<PrivateEngine> {
  const root = mkdtempSync(path.join(tmpdir(), 'pe-'));
  const dataRoot = path.join(root, 'data');
  const execRoot = path.join(root, 'x');
  const socket = path.join(root, 'docker.sock');
  const pidfile = path.join(root, 'docker.pid');
  const logFile = path.join(root, 'dockerd.log');
  mkdirSync(dataRoot);
  mkdirSync(execRoot);
  const host = `unix://${socket}`;
  let child: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();

  const cli = (args: string[], opts: { cwd?: string; timeoutMs?: number } = {}) =>
    must('docker', ['-H', host, ...args], { env: { DOCKER_HOST: host }, timeoutMs: opts.timeoutMs ?? 120_000, ...(opts.cwd ? { cwd: opts.cwd } : {}) });

  const engine: PrivateEngine = {
    socket,
    host,
    docker: cli,
    running: () => child !== null && child.exitCode === null && child.signalCode === null,
    log: () => (existsSync(logFile) ? readFileSync(logFile, 'utf8').slice(-4000) : ''),
    async start() {
      if (engine.running()) throw new Error('the private engine is already running');
      const out = openSync(logFile, 'a');
      const started = Date.now();
      child = spawn(
        'dockerd',
        ['--iptables=false', '--ip6tables=false', '--bridge=none', '--storage-driver=overlay2', '--data-root', dataRoot, '--exec-root', execRoot, '--pidfile', pidfile, '-H', host],
        { stdio: ['ignore', out, out] },
      );
      closeSync(out);
      const c = child;
      exited = new Promise((resolve) => c.once('exit', () => resolve()));
      for (;;) {
        if (!engine.running()) throw new Error(`the private dockerd exited during start-up:\n${engine.log()}`);
        const r = await run('docker', ['-H', host, 'version', '--format', '{{.Server.Version}}'], { timeoutMs: 5_000 });
        if (r.code === 0) return Date.now() - started;
        if (Date.now() - started > 60_000) {
          c.kill('SIGKILL');
          throw new Error(`the private dockerd did not answer within 60 s:\n${engine.log()}`);
        }
        await sleep(100);
      }
    },
    async stop(timeoutMs = 60_000) {
      const c = child;
      if (!c || !engine.running()) return 0;
      const started = Date.now();
      c.kill('SIGTERM');
      const done = await Promise.race([exited.then(() => true), sleep(timeoutMs).then(() => false)]);
      if (!done) {
        c.kill('SIGKILL');
        await exited;
      }
      child = null;
      return Date.now() - started;
    },
    async destroy() {
      await engine.stop();
      // A stopped dockerd leaves nsfs mounts of network namespaces (and possibly layer mounts) behind.
      const mounts = (await run('findmnt', ['-rn', '-o', 'TARGET'])).stdout.split('\n').filter((m) => m.startsWith(`${root}/`));
      for (const m of mounts.sort((a, b) => b.length - a.length)) await run('umount', ['-l', m]);
      rmSync(root, { recursive: true, force: true });
    },
  };
  try {
    await engine.start();
  } catch (err) {
    await engine.destroy().catch(() => {});
    throw err;
  }
  return engine;
}

/** Copies an image of the shared engine into the private one (`docker save | docker load`). */
export async function loadImage(engine: PrivateEngine, image: string): Promise<void> {
  await must('bash', ['-c', `set -o pipefail; docker save "$1" | docker -H "$2" load`, 'load-image', image, engine.host], { timeoutMs: 120_000 });
}

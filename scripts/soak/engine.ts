// The soak's private engine: its own dockerd (data root, exec root, pidfile, socket) in a mount
// namespace of its own whose /run is empty, so that the stack's `/var/run/docker.sock` binds name
// this engine and never the host's. Restarting "the engine" restarts this one.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { must, run } from '../../test/helpers/e2e/rig.ts';
import { sleep } from './report.ts';

export class Engine {
  readonly root = mkdtempSync(path.join(tmpdir(), 'soak-'));
  readonly socket = path.join(this.root, 'docker.sock');
  readonly host = `unix://${this.socket}`;
  private child: ChildProcess | null = null;
  private exited: Promise<void> = Promise.resolve();
  private readonly logFile = path.join(this.root, 'dockerd.log');

  constructor() {
    mkdirSync(path.join(this.root, 'data'));
    mkdirSync(path.join(this.root, 'x'));
  }

  running(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  tail(): string {
    return existsSync(this.logFile) ? readFileSync(this.logFile, 'utf8').slice(-3000) : '';
  }

  docker(args: string[], opts: { cwd?: string; timeoutMs?: number; input?: string } = {}): Promise<string> {
    return must('docker', ['-H', this.host, ...args], { timeoutMs: opts.timeoutMs ?? 120_000, ...(opts.cwd ? { cwd: opts.cwd } : {}), ...(opts.input ? { input: opts.input } : {}) });
  }

  /** Starts dockerd in a new mount namespace with an empty /run; resolves once it answers. */
  async start(): Promise<number> {
    const started = Date.now();
    const fd = openSync(this.logFile, 'a');
    const dockerd = [
      'dockerd', '--iptables=false', '--ip6tables=false', '--bridge=none', '--storage-driver=overlay2',
      '--data-root', path.join(this.root, 'data'), '--exec-root', path.join(this.root, 'x'), '--pidfile', path.join(this.root, 'docker.pid'),
      // Inside the namespace, the path containers bind; outside, the one this script talks to.
      '-H', 'unix:///run/docker.sock', '-H', this.host,
    ].map((a) => `'${a}'`).join(' ');
    this.child = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', `mount -t tmpfs -o mode=755 soak-run /run && exec ${dockerd}`], { stdio: ['ignore', fd, fd] });
    closeSync(fd);
    const c = this.child;
    this.exited = new Promise((resolve) => c.once('exit', () => resolve()));
    for (;;) {
      if (!this.running()) throw new Error(`the private dockerd exited during start-up:\n${this.tail()}`);
      if ((await run('docker', ['-H', this.host, 'version', '--format', '{{.Server.Version}}'], { timeoutMs: 5_000 })).code === 0) return Date.now() - started;
      if (Date.now() - started > 60_000) throw new Error(`the private dockerd did not answer within 60 s:\n${this.tail()}`);
      await sleep(100);
    }
  }

  /** SIGTERM (the engine stops its containers), SIGKILL after `timeoutMs`. */
  async stop(timeoutMs = 60_000): Promise<void> {
    const c = this.child;
    if (!c || !this.running()) return;
    c.kill('SIGTERM');
    if (!(await Promise.race([this.exited.then(() => true), sleep(timeoutMs).then(() => false)]))) {
      c.kill('SIGKILL');
      await this.exited;
    }
    this.child = null;
  }

  async destroy(): Promise<void> {
    await this.stop();
    // The namespace's mounts went with it; anything mounted on the host under the root goes too.
    const mounts = (await run('findmnt', ['-rn', '-o', 'TARGET'])).stdout.split('\n').filter((m) => m.startsWith(`${this.root}/`));
    for (const m of mounts.sort((a, b) => b.length - a.length)) await run('umount', ['-l', m]);
    rmSync(this.root, { recursive: true, force: true });
  }
}

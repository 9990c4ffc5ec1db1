// Runs the bundled migrate-host.sh on the host: a short-lived container from the installer image,
// in the host's PID namespace and with full privileges, enters PID 1's namespaces with nsenter.
// The privilege and PID settings are configurable: a test host enters a stand-in host's namespaces,
// and a host whose policy refuses --privileged can give the runner every capability instead.
import type Docker from 'dockerode';
import { PassThrough } from 'node:stream';

export const BUNDLED_SCRIPT = '/usr/src/app/scripts/migrate-host.sh';
export const RUNNER_NAME = 'installer-migrate-host';
const COPY_NAME = 'installer-migrate-host-copy';

export interface HostRunnerOptions {
  /** Image to run; resolves to the installer's own image, or throws saying why there is none. */
  image: () => Promise<string>;
  privileged: boolean;
  /** `host` in production; `container:<name>` to enter a stand-in host. */
  pidMode: string;
  /** Environment of the script (nsenter keeps the runner's environment). */
  env?: Record<string, string>;
}

export interface HostRun {
  exited: Promise<number>;
  cancel(): void;
}

function hostConfig(o: HostRunnerOptions): Docker.HostConfig {
  const base: Docker.HostConfig = { PidMode: o.pidMode, NetworkMode: 'none', AutoRemove: false };
  if (o.privileged) return { ...base, Privileged: true };
  // Where --privileged is refused: every capability the engine may give, no seccomp or AppArmor profile.
  return { ...base, CapAdd: ['ALL'], SecurityOpt: ['seccomp=unconfined', 'apparmor=unconfined'] };
}

function splitLines(onLine: (stream: 'stdout' | 'stderr', line: string) => void, stream: 'stdout' | 'stderr'): PassThrough {
  const pass = new PassThrough();
  let pending = '';
  pass.setEncoding('utf8');
  pass.on('data', (chunk: string) => {
    pending += chunk;
    const parts = pending.split(/\r?\n/);
    pending = parts.pop() ?? '';
    for (const p of parts) onLine(stream, p);
  });
  pass.on('end', () => {
    if (pending) onLine(stream, pending);
  });
  return pass;
}

export class HostRunner {
  constructor(
    private readonly docker: Docker,
    private readonly opts: HostRunnerOptions,
  ) {}

  private async removeIfPresent(name: string): Promise<void> {
    await this.docker.getContainer(name).remove({ force: true }).catch(() => {});
  }

  /** Creates (does not start) a one-off container from the runner image with the runner's privileges. */
  private async create(name: string, cmd: string[]): Promise<Docker.Container> {
    await this.removeIfPresent(name);
    const image = await this.opts.image();
    return this.docker.createContainer({
      name,
      Image: image,
      Entrypoint: [],
      Cmd: cmd,
      Env: Object.entries(this.opts.env ?? {}).map(([k, v]) => `${k}=${v}`),
      Tty: false,
      Healthcheck: { Test: ['NONE'] },
      Labels: { 'io.installer.role': 'host-migration' },
      HostConfig: hostConfig(this.opts),
    });
  }

  /** Runs a one-off container to completion, streaming its output; resolves with its exit code. */
  private async start(name: string, cmd: string[], onLine: (stream: 'stdout' | 'stderr', line: string) => void): Promise<HostRun> {
    const container = await this.create(name, cmd);
    const stream = await container.attach({ stream: true, stdout: true, stderr: true });
    const out = splitLines(onLine, 'stdout');
    const err = splitLines(onLine, 'stderr');
    this.docker.modem.demuxStream(stream, out, err);
    const ended = new Promise<void>((resolve) => stream.on('end', () => resolve()));
    await container.start();
    const exited = (async () => {
      const r = (await container.wait()) as { StatusCode: number };
      await Promise.race([ended, new Promise((res) => setTimeout(res, 2_000))]);
      out.end();
      err.end();
      await container.remove({ force: true }).catch(() => {});
      return r.StatusCode;
    })();
    return {
      exited,
      cancel() {
        void container.kill({ signal: 'SIGTERM' }).catch(() => {});
      },
    };
  }

  /**
   * Copies the bundled script to `scriptPath` in the host's mount namespace (mode 0755). The run
   * resolves once the copy has finished: its exit code says whether it worked.
   */
  async copyScript(scriptPath: string, onLine: (stream: 'stdout' | 'stderr', line: string) => void): Promise<HostRun> {
    // The path travels as an argument ($1), never inside the shell text.
    return this.start(
      COPY_NAME,
      ['sh', '-c', `nsenter -t 1 -a -- sh -c 'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod 0755 "$1"' copy "$1" < ${BUNDLED_SCRIPT}`, 'copy', scriptPath],
      onLine,
    );
  }

  /** The command the runner executes in the host's namespaces. */
  static command(scriptPath: string): string[] {
    return ['nsenter', '-t', '1', '-a', '--', 'bash', scriptPath, '--yes'];
  }

  /**
   * Creates the runner container exactly as `run` does, without starting it, and returns its id:
   * a host that cannot start it (a VM refusing --privileged) can still show what would run.
   */
  async createRunner(scriptPath: string): Promise<string> {
    return (await this.create(RUNNER_NAME, HostRunner.command(scriptPath))).id;
  }

  /** Runs `nsenter -t 1 -a -- bash <script path> --yes` in a fresh runner container. */
  async run(scriptPath: string, onLine: (stream: 'stdout' | 'stderr', line: string) => void): Promise<HostRun> {
    return this.start(RUNNER_NAME, HostRunner.command(scriptPath), onLine);
  }
}

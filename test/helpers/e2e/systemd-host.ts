// A real systemd "host" for scripts/migrate-host.sh: a container of installer-rig/systemd-host
// (deploy/rig/systemd-host, built by scripts/rig/setup.sh) running systemd as PID 1 with dummy
// units for the whole allowlist, talking to the rig's engine through the bind-mounted socket.
// Plus the leftovers of the old installation on that engine (compose projects and a standalone
// container from installer-rig/busybox), always under names of their own.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ROOT } from '../shared/process.ts';
import { docker, run, uniqueName, type RunResult } from './rig.ts';

export const HOST_IMAGE = 'installer-rig/systemd-host:latest';
export const BUSYBOX_IMAGE = 'installer-rig/busybox:latest';
export const BASE_IMAGE = 'installer-rig/base:bookworm';
export const SCRIPT = path.join(ROOT, 'scripts/migrate-host.sh');
/** Where the script sits in the host: the default of MIGRATE_HOST_SCRIPT_PATH. */
export const SCRIPT_IN_HOST = '/opt/installer/migrate-host.sh';
export const BACKUP_DIR = '/root/disabled-units';

/** What the migration runner has in production, and what the stand-in host needs for systemd (docs/engines.md). */
export const PRIVILEGES = ['--privileged'];

/** The spec's allowlist, exactly. */
export const ALLOWLIST = [
  'etl-server.service',
  'olap-api.service',
  'olap-server.service',
  'olap-share-reconnect.service',
  'olap-share-reconnect.timer',
  'jdbc-bridge.service',
  'worker-service.service',
  'elt-api.service',
  'object-store.service',
  'reporting-system.service',
  'service-metrics-api.service',
  'platform-api.service',
  'platform-frontend.service',
  'sql-database.service',
  'reverse-proxy.service',
];
export const NFS_UNITS = ['nfs-server.service', 'nfs-blkmap.service', 'rpcbind.socket', 'rpcbind.service'];
/** Units of the fixture that are not the script's business. */
export const OTHER_UNITS = ['docker.service', 'build-server.service', 'dbus.service', 'systemd-journald.service'];

// The fixture's special cases (deploy/rig/systemd-host/fixture.sh).
export const ABSENT_UNIT = 'worker-service.service';
export const MASKED_UNIT = 'elt-api.service';
export const ETC_UNIT = 'reverse-proxy.service';
export const STUBBORN_UNIT = 'sql-database.service';
export const DISABLED_UNIT = 'jdbc-bridge.service';
export const STATIC_UNIT = 'olap-share-reconnect.service';
export const EXPORTS_ORIGINAL_LINES = [
  '/srv/shared-data          10.0.0.0/24(rw,sync,no_subtree_check,no_root_squash)',
  '/srv/shared-data/olap     olap.internal(rw,sync,no_subtree_check)',
  '/home/backup              10.0.0.9(ro,sync,no_subtree_check)',
  '/srv/sharedfolder         *(ro,sync,no_subtree_check)',
];

export interface UnitState {
  load: string;
  active: string;
  fileState: string;
  fragment: string;
}

export interface ExecOptions {
  user?: string;
  env?: Record<string, string>;
  input?: string;
  timeoutMs?: number;
}

export interface SystemdHost {
  name: string;
  exec(args: string[], opts?: ExecOptions): Promise<RunResult>;
  /** Runs a shell command as root in the host; throws when it fails. */
  sh(cmd: string): Promise<string>;
  /**
   * Runs the script in the host. OLD_REDASH_PROJECT and LEFTOVER_CONTAINERS default to names that
   * exist nowhere, so a run never touches containers it was not pointed at.
   */
  migrate(args: string[], opts?: ExecOptions): Promise<RunResult>;
  units(names: string[]): Promise<Record<string, UnitState>>;
  /** Everything the script could change inside the host, as text (for before/after comparison). */
  snapshot(): Promise<string>;
  remove(): Promise<void>;
}

function execArgs(name: string, args: string[], opts: ExecOptions): string[] {
  const a = ['exec'];
  if (opts.input !== undefined) a.push('-i');
  if (opts.user) a.push('-u', opts.user);
  for (const [k, v] of Object.entries(opts.env ?? {})) a.push('-e', `${k}=${v}`);
  return [...a, name, ...args];
}

/** Waits until systemd in the container has finished booting; throws with its state otherwise. */
async function waitBooted(name: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  let last: RunResult | undefined;
  while (Date.now() < deadline) {
    last = await run('docker', ['exec', name, 'systemctl', 'is-system-running']);
    const state = last.stdout.trim();
    if (state === 'running') return;
    if (state === 'degraded') {
      const failed = await run('docker', ['exec', name, 'systemctl', '--failed', '--no-pager']);
      throw new Error(`systemd in ${name} booted degraded:\n${failed.stdout}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  const logs = await run('docker', ['logs', '--tail', '50', name]);
  throw new Error(`systemd in ${name} did not finish booting within 60 s (last state: ${last?.stdout.trim()} ${last?.stderr.trim()}):\n${logs.stdout}${logs.stderr}`);
}

/** Starts a fresh host container and waits for systemd; fails loudly when it cannot. */
/**
 * The installer's settings for a host migration run against `host` from `image`, the script copied
 * to `scriptPath`: the runner is privileged, as in production, and its PID setting points at the stand-in host.
 */
export function hostMigrationEnv(host: SystemdHost, image: string, scriptPath: string): Record<string, string> {
  return {
    PLATFORM_URL: 'https://platform.example.com',
    MIGRATE_HOST_SCRIPT_PATH: scriptPath,
    MIGRATE_RUNNER_IMAGE: image,
    MIGRATE_RUNNER_PID_MODE: `container:${host.name}`,
    // One allowlisted unit ignores SIGTERM: it is force-killed after this many seconds.
    MIGRATE_HOST_STOP_TIMEOUT: '3',
  };
}

export async function startSystemdHost(): Promise<SystemdHost> {
  const name = uniqueName('migrate-host');
  await docker([
    'run', '-d', '--name', name, '--hostname', name.slice(0, 60),
    '--cgroupns=private', ...PRIVILEGES,
    '--tmpfs', '/run', '--tmpfs', '/run/lock', '--tmpfs', '/tmp',
    '-v', '/var/run/docker.sock:/run/docker.sock',
    '-v', `${SCRIPT}:${SCRIPT_IN_HOST}:ro`,
    '--label', 'installer-test=migrate-host',
    HOST_IMAGE,
  ]);
  const host: SystemdHost = {
    name,
    exec: (args, opts = {}) => run('docker', execArgs(name, args, opts), { input: opts.input, timeoutMs: opts.timeoutMs ?? 120_000 }),
    async sh(cmd) {
      const r = await host.exec(['sh', '-c', cmd]);
      if (r.code !== 0) throw new Error(`in ${name}: ${cmd} exited ${r.code}\n${r.stdout}\n${r.stderr}`);
      return r.stdout;
    },
    migrate(args, opts = {}) {
      const env = { OLD_REDASH_PROJECT: uniqueName('no-such-project'), LEFTOVER_CONTAINERS: uniqueName('no-such-container'), ...opts.env };
      return host.exec(['bash', SCRIPT_IN_HOST, ...args], { ...opts, env });
    },
    async units(names) {
      const out = await host.sh(`systemctl show -p Id,LoadState,ActiveState,UnitFileState,FragmentPath ${names.join(' ')}`);
      const states: Record<string, UnitState> = {};
      const blocks = out.trim().split(/\n\s*\n/);
      if (blocks.length !== names.length) throw new Error(`systemctl show answered ${blocks.length} blocks for ${names.length} units:\n${out}`);
      blocks.forEach((block, i) => {
        const f = Object.fromEntries(block.split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
        states[names[i]!] = { load: f.LoadState ?? '', active: f.ActiveState ?? '', fileState: f.UnitFileState ?? '', fragment: f.FragmentPath ?? '' };
      });
      return states;
    },
    snapshot: () =>
      host.sh(
        [
          `systemctl show -p Id,LoadState,ActiveState,SubState,UnitFileState ${[...ALLOWLIST, ...NFS_UNITS, ...OTHER_UNITS].join(' ')}`,
          'find /etc/systemd/system /lib/systemd/system /root /srv /home -printf "%p %y %m %s %l\\n" | sort',
          'ls -1 /var/log',
          'sha256sum /etc/exports /var/lib/nfs/etab',
          'cat /var/log/exportfs-calls.log 2>/dev/null || echo "(exportfs never called)"',
        ].join(' && '),
      ),
    async remove() {
      await run('docker', ['rm', '-f', '-v', name]);
    },
  };
  try {
    await waitBooted(name);
  } catch (e) {
    await host.remove();
    throw e;
  }
  return host;
}

/** Leftovers of the old installation on the real engine, all under unique names. */
export interface Leftovers {
  /** Compose project of the old reporting stack (OLD_REDASH_PROJECT), two services and a named volume. */
  redashProject: string;
  redashVolume: string;
  /** A standalone container (LEFTOVER_CONTAINERS). */
  standalone: string;
  /** An unrelated compose project: only reported, never removed. */
  otherProject: string;
  containersOf(project: string): Promise<string[]>;
  exists(container: string): Promise<boolean>;
  volumeExists(volume: string): Promise<boolean>;
  remove(): Promise<void>;
}

const LOOP = `trap 'exit 0' TERM; while :; do sleep 1; done`;

export async function startLeftovers(): Promise<Leftovers> {
  const redashProject = uniqueName('redash');
  const otherProject = uniqueName('legacy-other');
  const standalone = uniqueName('qdrant');
  const dir = mkdtempSync(path.join(tmpdir(), 'migrate-leftovers-'));
  const redashFile = path.join(dir, 'redash.yml');
  const otherFile = path.join(dir, 'other.yml');
  writeFileSync(
    redashFile,
    `services:
  server:
    image: ${BUSYBOX_IMAGE}
    command: ["sh", "-c", "echo data > /data/marker; ${LOOP}"]
    volumes: ["pgdata:/data"]
  worker:
    image: ${BUSYBOX_IMAGE}
    command: ["sh", "-c", "${LOOP}"]
volumes:
  pgdata: {}
`,
  );
  writeFileSync(otherFile, `services:\n  app:\n    image: ${BUSYBOX_IMAGE}\n    command: ["sh", "-c", "${LOOP}"]\n`);
  const compose = (project: string, file: string, args: string[]) => docker(['compose', '-p', project, '-f', file, ...args], { cwd: dir, timeoutMs: 120_000 });
  const l: Leftovers = {
    redashProject,
    redashVolume: `${redashProject}_pgdata`,
    standalone,
    otherProject,
    async containersOf(project) {
      const out = await docker(['ps', '-a', '--filter', `label=com.docker.compose.project=${project}`, '--format', '{{.Names}}']);
      return out.split('\n').filter(Boolean).sort();
    },
    async exists(container) {
      const out = await docker(['ps', '-a', '--format', '{{.Names}}']);
      return out.split('\n').includes(container);
    },
    async volumeExists(volume) {
      return (await run('docker', ['volume', 'inspect', volume])).code === 0;
    },
    async remove() {
      await run('docker', ['compose', '-p', redashProject, '-f', redashFile, 'down', '-v', '-t', '1'], { cwd: dir });
      await run('docker', ['compose', '-p', otherProject, '-f', otherFile, 'down', '-v', '-t', '1'], { cwd: dir });
      await run('docker', ['rm', '-f', standalone]);
      await run('docker', ['volume', 'rm', '-f', `${redashProject}_pgdata`]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await compose(redashProject, redashFile, ['up', '-d']);
    await compose(otherProject, otherFile, ['up', '-d']);
    await docker(['run', '-d', '--name', standalone, '--label', 'installer-test=migrate-host', BUSYBOX_IMAGE, 'sh', '-c', LOOP]);
  } catch (e) {
    await l.remove();
    throw e;
  }
  return l;
}

/** The text of the script's header comment block, as --help must print it. */
export function headerBlock(script: string): string {
  const lines = script.split('\n').slice(1);
  const out: string[] = [];
  for (const line of lines) {
    if (!line.startsWith('#')) break;
    out.push(line.replace(/^# ?/, ''));
  }
  return out.join('\n') + '\n';
}

/** The lines of a run's output that echo a command. */
export const commandLines = (out: string) => out.split('\n').filter((l) => l.startsWith('+ '));

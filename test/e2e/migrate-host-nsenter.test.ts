// migrate-host.sh run the way the installer API runs it: from a short-lived container that shares the
// host's PID namespace, through `nsenter -t 1 -a -- bash <script path> --yes`. Here "the host" is a
// systemd container, privileged as the runner is in production (docs/engines.md).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { docker, run, uniqueName } from '../helpers/e2e/rig.ts';
import {
  ABSENT_UNIT, ALLOWLIST, BASE_IMAGE, BUSYBOX_IMAGE, ETC_UNIT, EXPORTS_ORIGINAL_LINES, MASKED_UNIT, NFS_UNITS, PRIVILEGES, SCRIPT, SCRIPT_IN_HOST,
  startSystemdHost, type SystemdHost,
} from '../helpers/e2e/systemd-host.ts';

let host: SystemdHost;
const standalone = uniqueName('qdrant');
const runners: string[] = [];

beforeAll(async () => {
  host = await startSystemdHost();
  await docker(['run', '-d', '--name', standalone, '--label', 'installer-test=migrate-host', BUSYBOX_IMAGE, 'sh', '-c', "trap 'exit 0' TERM; while :; do sleep 1; done"]);
});
afterAll(async () => {
  await run('docker', ['rm', '-f', standalone, ...runners]);
  await host?.remove();
});

/** A short-lived runner container from the base image (util-linux has nsenter) in the host's PID namespace. */
async function runner(cmd: string[], env: Record<string, string>, extra: string[] = []) {
  const name = uniqueName('migrate-runner');
  runners.push(name);
  const envArgs = Object.entries(env).flatMap(([k, v]) => ['-e', `${k}=${v}`]);
  return run('docker', ['run', '--rm', '--name', name, `--pid=container:${host.name}`, ...PRIVILEGES, ...envArgs, ...extra, BASE_IMAGE, ...cmd], { timeoutMs: 180_000 });
}

describe('migrate-host.sh through nsenter from a container in the host PID namespace', () => {
  it('refuses inside a container without systemd (forgot nsenter)', async () => {
    const r = await runner(['bash', '/migrate-host.sh', '--yes'], {}, ['-v', `${SCRIPT}:/migrate-host.sh:ro`]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^systemd is not running here/);
    expect((await host.units(['etl-server.service']))['etl-server.service']).toMatchObject({ active: 'active', fileState: 'enabled' });
  });

  it('nsenter -t 1 -a -- bash <script path> --yes acts on the units of the systemd host', async () => {
    const env = { STOP_TIMEOUT: '2', SHARED_DATA_DIR: '/home/backup/', OLD_REDASH_PROJECT: uniqueName('no-such-project'), LEFTOVER_CONTAINERS: standalone };
    const r = await runner(['nsenter', '-t', '1', '-a', '--', 'bash', SCRIPT_IN_HOST, '--yes'], env);
    expect(r.stderr).toBe('');
    expect(r.code, r.stdout).toBe(0);
    // It ran in the host's namespaces: its hostname, its systemd, its files.
    expect(r.stdout.split('\n')[0]).toBe(`migrate-host.sh: retire the legacy systemd-based installation on ${host.name}`);
    const last = r.stdout.trimEnd().split('\n').at(-1)!;
    expect(last).toMatch(/^Full log: \/var\/log\/platform-migrate-host-\d{8}-\d{6}\.log$/);
    expect(await host.sh(`cat ${last.slice('Full log: '.length)}`)).toBe(r.stdout);

    const retired = ALLOWLIST.filter((u) => u !== ABSENT_UNIT && u !== MASKED_UNIT && u !== ETC_UNIT);
    const s = await host.units([...retired, ...NFS_UNITS, ETC_UNIT, 'docker.service', 'build-server.service']);
    for (const u of [...retired, ...NFS_UNITS]) expect(s[u], u).toMatchObject({ load: 'masked', active: 'inactive' });
    expect(s[ETC_UNIT]).toMatchObject({ load: 'not-found', active: 'inactive' });
    expect(s['docker.service']).toMatchObject({ active: 'active', fileState: 'enabled' });
    expect(s['build-server.service']).toMatchObject({ active: 'active', fileState: 'enabled' });
    expect(r.stdout).toContain('(none — good)');

    // SHARED_DATA_DIR (trailing slash ignored) chose the lines: only /home/backup went.
    expect(r.stdout).toContain('exports match:   SHARED_DATA_DIR=/home/backup and paths below it');
    const exportsNow = await host.sh('cat /etc/exports');
    expect(exportsNow).not.toContain(EXPORTS_ORIGINAL_LINES[2]);
    for (const l of [EXPORTS_ORIGINAL_LINES[0]!, EXPORTS_ORIGINAL_LINES[1]!, EXPORTS_ORIGINAL_LINES[3]!]) expect(exportsNow).toContain(l);

    // The docker CLI of the host reached the engine through the host's socket.
    expect(r.stdout).toContain(`+ docker rm -f ${standalone}`);
    expect((await docker(['ps', '-a', '--format', '{{.Names}}'])).split('\n')).not.toContain(standalone);
  });
});

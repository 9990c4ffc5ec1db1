// scripts/migrate-host.sh against a real systemd (a container running systemd as PID 1) and the
// real engine: a dry run that changes nothing, the real run, and a second run that is safe.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ABSENT_UNIT, ALLOWLIST, BACKUP_DIR, DISABLED_UNIT, ETC_UNIT, EXPORTS_ORIGINAL_LINES, MASKED_UNIT, NFS_UNITS, STATIC_UNIT, STUBBORN_UNIT,
  commandLines, startLeftovers, startSystemdHost, type Leftovers, type SystemdHost,
} from '../helpers/e2e/systemd-host.ts';

let host: SystemdHost;
let left: Leftovers;
let env: Record<string, string>;
let firstRun: { stdout: string; log: string; elapsedMs: number };

beforeAll(async () => {
  [host, left] = await Promise.all([startSystemdHost(), startLeftovers()]);
  // The flag must win over the variable: with STOP_TIMEOUT=60 the stubborn unit would hold the run for a minute.
  env = { OLD_REDASH_PROJECT: left.redashProject, LEFTOVER_CONTAINERS: left.standalone, STOP_TIMEOUT: '60' };
});
afterAll(async () => {
  await Promise.all([host?.remove(), left?.remove()]);
});

const retired = ALLOWLIST.filter((u) => u !== ABSENT_UNIT && u !== MASKED_UNIT && u !== ETC_UNIT);

describe('migrate-host.sh on a systemd host', () => {
  it('--dry-run echoes every change with "+ ", never prompts and changes nothing', async () => {
    const before = await host.snapshot();
    const containersBefore = [await left.containersOf(left.redashProject), await left.containersOf(left.otherProject), await left.exists(left.standalone)];
    expect(containersBefore[0]).toHaveLength(2);

    // No --yes and no stdin: a prompt would read EOF and abort with exit 1.
    const r = await host.migrate(['--dry-run'], { env });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).not.toContain('Proceed?');
    expect(r.stdout).toContain('DRY RUN');
    const cmds = commandLines(r.stdout);
    for (const u of retired) expect(cmds).toContain(`+ systemctl mask ${u}`);
    for (const u of NFS_UNITS) expect(cmds).toContain(`+ systemctl mask ${u}`);
    expect(cmds).toContain(`+ mv /etc/systemd/system/${ETC_UNIT} ${BACKUP_DIR}/${ETC_UNIT}`);
    expect(cmds).toContain(`+ timeout 60 systemctl stop ${STUBBORN_UNIT}`);
    expect(cmds).toContain('+ exportfs -ua');
    expect(cmds.some((c) => c.startsWith(`+ cp -p /etc/exports ${BACKUP_DIR}/exports.bak.`))).toBe(true);
    expect(cmds.some((c) => c.startsWith('+ sed -E -i ') && c.endsWith(' /etc/exports'))).toBe(true);
    expect(cmds).toContain(`+ docker rm -f ${(await left.containersOf(left.redashProject)).join(' ')}`);
    expect(cmds).toContain(`+ docker rm -f ${left.standalone}`);
    expect(cmds).toContain('+ systemctl daemon-reload');
    expect(cmds).toContain('+ systemctl reset-failed');
    expect(r.stdout).toContain(`skip: ${ABSENT_UNIT} is not installed`);
    expect(r.stdout).toContain(`skip: ${MASKED_UNIT} is already masked`);
    expect(r.stdout).not.toContain('Full log:');
    expect(r.stdout.trimEnd().split('\n').at(-1)).toBe('Dry run finished: nothing was changed. Run again without --dry-run to apply.');

    expect(await host.snapshot()).toBe(before);
    expect([await left.containersOf(left.redashProject), await left.containersOf(left.otherProject), await left.exists(left.standalone)]).toEqual(containersBefore);
  });

  it('retires the allowlisted units, edits /etc/exports, removes the leftovers and logs exactly what it printed', async () => {
    const redashContainers = await left.containersOf(left.redashProject);
    const started = Date.now();
    const r = await host.migrate(['--yes', '--stop-timeout=2'], { env });
    const elapsedMs = Date.now() - started;
    expect(r.stderr).toBe('');
    expect(r.code, r.stdout).toBe(0);

    // The last line names the log; the log holds exactly what the console showed.
    const lines = r.stdout.trimEnd().split('\n');
    const last = lines.at(-1)!;
    expect(last).toMatch(/^Full log: \/var\/log\/platform-migrate-host-\d{8}-\d{6}\.log$/);
    const logPath = last.slice('Full log: '.length);
    const log = await host.sh(`cat ${logPath}`);
    expect(log).toBe(r.stdout);
    firstRun = { stdout: r.stdout, log: logPath, elapsedMs };

    // Every change was echoed before it ran.
    const cmds = commandLines(r.stdout);
    for (const u of [...retired, ...NFS_UNITS]) {
      expect(cmds).toContain(`+ systemctl disable ${u}`);
      expect(cmds).toContain(`+ systemctl mask ${u}`);
      expect(r.stdout.indexOf(`+ systemctl disable ${u}`)).toBeLessThan(r.stdout.indexOf(`+ systemctl mask ${u}`));
    }
    expect(cmds).not.toContain(`+ systemctl mask ${ETC_UNIT}`);

    const s = await host.units([...ALLOWLIST, ...NFS_UNITS, 'docker.service', 'build-server.service']);
    for (const u of [...retired, ...NFS_UNITS]) {
      expect(s[u], u).toMatchObject({ load: 'masked', fileState: 'masked' });
      expect(s[u]!.active, u).toBe('inactive');
    }
    // Moved, not masked: the unit is gone and its file is in BACKUP_DIR.
    expect(s[ETC_UNIT]).toMatchObject({ load: 'not-found', active: 'inactive' });
    expect(await host.sh(`test ! -e /etc/systemd/system/${ETC_UNIT} && cat ${BACKUP_DIR}/${ETC_UNIT}`)).toContain('installed by hand in /etc');
    expect(await host.sh(`ls /etc/systemd/system/multi-user.target.wants`)).not.toContain(ETC_UNIT);
    expect(s[ABSENT_UNIT]).toMatchObject({ load: 'not-found' });
    expect(s[MASKED_UNIT]).toMatchObject({ load: 'masked' });
    expect(r.stdout).toContain(`skip: ${ABSENT_UNIT} is not installed`);
    expect(r.stdout).toContain(`skip: ${MASKED_UNIT} is already masked`);
    expect(r.stdout).toContain(`${DISABLED_UNIT} is not running`);
    expect(r.stdout).toContain(`${STATIC_UNIT} is not running`);
    // Nothing outside the allowlist was touched.
    expect(s['docker.service']).toMatchObject({ active: 'active', fileState: 'enabled' });
    expect(s['build-server.service']).toMatchObject({ active: 'active', fileState: 'enabled' });

    // The unit that ignores SIGTERM was force-killed after --stop-timeout=2, not STOP_TIMEOUT=60.
    expect(r.stdout).toContain(`+ timeout 2 systemctl stop ${STUBBORN_UNIT}`);
    expect(r.stdout).toContain(`WARNING: ${STUBBORN_UNIT} did not stop within 2 s: force-killing it`);
    expect(r.stdout).toContain(`+ systemctl kill --signal=SIGKILL ${STUBBORN_UNIT}`);
    expect(r.stdout).toContain(`${STUBBORN_UNIT} stopped (force-killed)`);
    // With the default STOP_TIMEOUT=60 the stop alone would take a minute; the whole run takes less.
    expect(elapsedMs).toBeLessThan(60_000);

    // BACKUP_DIR: the moved file, copies of the masked-away files, the exports backup.
    const backup = (await host.sh(`ls -1 ${BACKUP_DIR}`)).trim().split('\n');
    expect(backup).toEqual(expect.arrayContaining([ETC_UNIT, ...retired, ...NFS_UNITS]));
    const bak = backup.filter((f) => /^exports\.bak\.\d{8}-\d{6}$/.test(f));
    expect(bak).toHaveLength(1);
    const original = await host.sh(`cat ${BACKUP_DIR}/${bak[0]}`);
    for (const l of EXPORTS_ORIGINAL_LINES) expect(original).toContain(l);

    // /etc/exports: the legacy shared-directory lines are gone, everything else is kept as it was.
    const exportsNow = await host.sh('cat /etc/exports');
    expect(exportsNow).toBe(original.split('\n').filter((l) => !l.startsWith('/srv/shared-data')).join('\n'));
    expect(await host.sh('cat /var/log/exportfs-calls.log')).toBe('exportfs -ua\nexportfs -ra\n');
    expect(await host.sh('cat /var/lib/nfs/etab')).toBe(`${EXPORTS_ORIGINAL_LINES[2]}\n${EXPORTS_ORIGINAL_LINES[3]}\n`);

    // Containers: the reporting stack's are gone but its volume stays; the standalone one is gone;
    // the unrelated project is only reported.
    expect(await left.containersOf(left.redashProject)).toEqual([]);
    expect(await left.volumeExists(left.redashVolume)).toBe(true);
    expect(r.stdout).toContain(`volumes kept for the new stack: ${left.redashVolume}`);
    expect(cmds).toContain(`+ docker stop -t 2 ${redashContainers.join(' ')}`);
    expect(await left.exists(left.standalone)).toBe(false);
    expect(await left.containersOf(left.otherProject)).toHaveLength(1);
    expect(r.stdout).toContain(`compose project ${left.otherProject} (1 container(s)): not part of this migration, left as it is`);

    // Ends with daemon-reload and reset-failed, then the verification.
    expect(r.stdout.indexOf('+ systemctl daemon-reload')).toBeLessThan(r.stdout.indexOf('+ systemctl reset-failed'));
    expect(r.stdout.indexOf('+ systemctl reset-failed')).toBeLessThan(r.stdout.indexOf('== Verification'));
    expect(await host.sh('systemctl --failed --no-legend')).toBe('');
    const verification = r.stdout.slice(r.stdout.indexOf('== Verification'));
    expect(verification).toContain('+ systemctl list-unit-files --state=enabled');
    expect(verification).toContain('(none — good)');
    expect(verification).toContain("+ docker ps --format 'table {{.Names}}\\t{{.Ports}}'");
    expect(verification).toMatch(/^NAMES\s+PORTS$/m);
    expect(verification).toContain(`${left.otherProject}-app-1`);
  });

  it('a second run is safe: everything is reported and skipped, nothing changes', async () => {
    expect(firstRun, 'the first real run must have passed').toBeDefined();
    const before = await host.snapshot();
    const r = await host.migrate(['--yes', '--stop-timeout=2'], { env });
    expect(r.stderr).toBe('');
    expect(r.code, r.stdout).toBe(0);
    for (const u of [...retired, ...NFS_UNITS, MASKED_UNIT]) expect(r.stdout).toContain(`skip: ${u} is already masked`);
    expect(r.stdout).toContain(`skip: ${ETC_UNIT} is not installed (a unit file of that name is in ${BACKUP_DIR})`);
    expect(r.stdout).toContain(`skip: ${ABSENT_UNIT} is not installed`);
    expect(r.stdout).toContain('no line of /etc/exports matches');
    expect(r.stdout).toContain(`no containers of compose project ${left.redashProject}`);
    expect(r.stdout).toContain(`no container named ${left.standalone}`);
    expect(r.stdout).toContain('(none — good)');
    expect(commandLines(r.stdout).filter((c) => !/^\+ (systemctl (daemon-reload|reset-failed|list-unit-files)|docker ps)/.test(c))).toEqual([]);

    const logPath = r.stdout.trimEnd().split('\n').at(-1)!.replace(/^Full log: /, '');
    expect(await host.sh(`cat ${logPath}`)).toBe(r.stdout);
    // Only the new log file (unless both runs fell in the same second and share one) differs.
    const withoutLogs = (snap: string) => snap.split('\n').filter((l) => !/platform-migrate-host-/.test(l)).join('\n');
    expect(withoutLogs(await host.snapshot())).toBe(withoutLogs(before));
    expect(await left.volumeExists(left.redashVolume)).toBe(true);
    expect(await left.containersOf(left.otherProject)).toHaveLength(1);
  });
});

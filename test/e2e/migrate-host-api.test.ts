// The host migration through the API, end to end: run-host copies the bundled script into the
// host and runs it from a container of the installer image in the host's PID namespace, as a job
// streamed to completion. "The host" is a systemd container: the runner is privileged as in
// production, and its PID setting points at that container.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { buildInstallerImage, REGISTRY, run } from '../helpers/e2e/rig.ts';
import { ALLOWLIST, ABSENT_UNIT, MASKED_UNIT, ETC_UNIT, hostMigrationEnv, startSystemdHost, type SystemdHost } from '../helpers/e2e/systemd-host.ts';
import { followJob } from '../helpers/e2e/jobs.ts';

const image = `${REGISTRY}/installer:dev-migrate-${randomBytes(3).toString('hex')}`;
const scriptPath = '/opt/installer-api/migrate-host.sh';
let host: SystemdHost;
let t: TestApp;

beforeAll(async () => {
  [host] = await Promise.all([startSystemdHost(), buildInstallerImage([image])]);
  t = await startTestApp({
    controllers: true,
    env: hostMigrationEnv(host, image, scriptPath),
  });
});
afterAll(async () => {
  await t?.close();
  await host?.remove();
  await run('docker', ['rmi', image]);
});

describe('POST /api/migrate/run-host on a real systemd host', () => {
  it('copies the script, runs it through nsenter, streams it to completion and audits it', async () => {
    const admin = { authorization: `Bearer ${await t.token('admin')}` };
    expect((await t.app.inject({ method: 'POST', url: '/api/migrate/vm-user', headers: admin, payload: { vmUser: 'ubuntu' } })).statusCode).toBe(200);
    const res = await t.app.inject({ method: 'POST', url: '/api/migrate/run-host', headers: admin });
    expect(res.statusCode, res.body).toBe(202);
    const { jobId } = res.json() as { jobId: string };

    const events = await followJob(t, jobId);
    const finished = events.at(-1)!;
    const output = events.filter((e) => e.event === 'output').map((e) => String(e.data.line));
    expect(finished, output.slice(-15).join('\n')).toMatchObject({ event: 'finished', data: { outcome: 'completed', exitCode: 0 } });
    expect(events.filter((e) => e.event === 'phase').map((e) => e.data.phase)).toEqual(['started', 'copy-script', 'run-script']);
    expect(events.find((e) => e.data.phase === 'run-script')!.data.command).toBe(`nsenter -t 1 -a -- bash ${scriptPath} --yes`);
    // It ran in the host's namespaces, on the host's systemd.
    expect(output[0]).toBe(`migrate-host.sh: retire the legacy systemd-based installation on ${host.name}`);
    expect(output.at(-1)).toMatch(/^Full log: \/var\/log\/platform-migrate-host-\d{8}-\d{6}\.log$/);
    expect((await host.sh(`stat -c %a ${scriptPath}`)).trim()).toBe('755');
    const retired = ALLOWLIST.filter((u) => u !== ABSENT_UNIT && u !== MASKED_UNIT && u !== ETC_UNIT);
    const units = await host.units([...retired, 'docker.service']);
    for (const u of retired) expect(units[u], u).toMatchObject({ load: 'masked', active: 'inactive' });
    expect(units['docker.service']).toMatchObject({ active: 'active' });
    expect(output.join('\n')).toMatch(/sql-database\.service.*(SIGKILL|force)/i);

    const audit = await t.db.database.db.selectFrom('deployment_actions').selectAll().where('job_id', '=', jobId).execute();
    expect(audit.map((a) => [a.kind, a.status, a.exit_code, a.actor])).toEqual([['migrate-host', 'completed', 0, 'admin']]);
    expect(t.logs.join('')).toContain(`[job ${jobId}] Full log: /var/log/platform-migrate-host-`);
    // The runner containers are gone.
    const left = await run('docker', ['ps', '-a', '--filter', 'label=io.installer.role=host-migration', '--format', '{{.Names}}']);
    expect(left.stdout.trim()).toBe('');
  });
});

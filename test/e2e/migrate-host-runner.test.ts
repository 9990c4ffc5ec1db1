// The production host-migration runner, proven on the real engine without running it: the installer
// wired with the production defaults (MIGRATE_RUNNER_PRIVILEGED and MIGRATE_RUNNER_PID_MODE unset)
// creates the runner container through the same code path a run takes, and the engine's inspect of
// it shows full privileges, the host PID namespace and exactly `nsenter -t 1 -a -- bash <path> --yes`.
// Starting it here would enter the machine's own PID 1, which is no init: the stand-in host of the
// other migration tests is where a privileged runner runs the script.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { docker, run } from '../helpers/e2e/rig.ts';
import { BASE_IMAGE } from '../helpers/e2e/systemd-host.ts';
import { RUNNER_NAME } from '../../src/adapters/host-runner.ts';

interface Inspect {
  Name: string;
  Path: string;
  Args: string[];
  State: { Status: string };
  Config: { Cmd: string[]; Entrypoint: string[] | null; Image: string; Labels: Record<string, string>; Healthcheck?: { Test: string[] } };
  HostConfig: { Privileged: boolean; PidMode: string; NetworkMode: string; CapAdd: string[] | null; SecurityOpt: string[] | null };
}

let t: TestApp;
const created: string[] = [];

beforeAll(async () => {
  // Only the image is named: the installer's own image in production, which a test process has not.
  t = await startTestApp({ env: { MIGRATE_RUNNER_IMAGE: BASE_IMAGE } });
});
afterAll(async () => {
  if (created.length) await run('docker', ['rm', '-f', ...created]);
  await t?.close();
});

describe('the production host-migration runner', () => {
  it('is created privileged, in the host PID namespace, running nsenter -t 1 -a -- bash <path> --yes', async () => {
    // The production defaults, untouched.
    expect(t.settings).toMatchObject({ MIGRATE_RUNNER_PRIVILEGED: true, MIGRATE_RUNNER_PID_MODE: 'host', MIGRATE_HOST_SCRIPT_PATH: '/opt/installer/migrate-host.sh' });
    const id = await t.wired.hostRunner.createRunner(t.settings.MIGRATE_HOST_SCRIPT_PATH);
    created.push(id);
    const c = JSON.parse(await docker(['inspect', id]))[0] as Inspect;
    expect(c.Name).toBe(`/${RUNNER_NAME}`);
    expect(c.State.Status).toBe('created');
    expect(c.HostConfig.Privileged).toBe(true);
    expect(c.HostConfig.PidMode).toBe('host');
    // Privileged means privileged: not the capability set of MIGRATE_RUNNER_PRIVILEGED=false.
    expect(c.HostConfig.CapAdd ?? []).toEqual([]);
    // (The engine adds `label=disable` to a privileged container itself.)
    expect(c.HostConfig.SecurityOpt ?? []).not.toContain('seccomp=unconfined');
    expect(c.HostConfig.SecurityOpt ?? []).not.toContain('apparmor=unconfined');
    expect(c.HostConfig.NetworkMode).toBe('none');
    // Exactly the spec's command, with the script's path as its own argument, and no entrypoint before it.
    expect(c.Config.Entrypoint ?? []).toEqual([]);
    expect(c.Config.Cmd).toEqual(['nsenter', '-t', '1', '-a', '--', 'bash', '/opt/installer/migrate-host.sh', '--yes']);
    expect([c.Path, ...c.Args].join(' ')).toBe('nsenter -t 1 -a -- bash /opt/installer/migrate-host.sh --yes');
    expect(c.Config.Image).toBe(BASE_IMAGE);
    expect(c.Config.Labels['io.installer.role']).toBe('host-migration');
    expect(c.Config.Healthcheck?.Test).toEqual(['NONE']);
    await docker(['rm', '-f', id]);
    created.splice(created.indexOf(id), 1);
    expect((await run('docker', ['inspect', id])).code).not.toBe(0);
  });
});

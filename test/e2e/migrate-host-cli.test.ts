// migrate-host.sh's command line on a real systemd host: --help, option errors, the refusals
// (not root, docker.service inactive, --force) and the prompt's accepted and refused answers.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALLOWLIST, SCRIPT, headerBlock, startSystemdHost, type SystemdHost } from '../helpers/e2e/systemd-host.ts';

let host: SystemdHost;
beforeAll(async () => {
  host = await startSystemdHost();
});
afterAll(async () => host?.remove());

const header = headerBlock(readFileSync(SCRIPT, 'utf8'));
const FAST = { STOP_TIMEOUT: '2' };

describe('migrate-host.sh command line', () => {
  it('-h and --help print the header comment block and exit 0, also for a non-root user', async () => {
    expect(header).toMatch(/^migrate-host\.sh - /);
    for (const flag of ['-h', '--help']) {
      for (const user of ['root', 'migrate-op']) {
        const r = await host.migrate([flag], { user });
        expect(r).toEqual({ code: 0, stdout: header, stderr: '' });
      }
    }
    for (const flag of ['--dry-run', '--yes, -y', '--force', '--stop-timeout=N', '-h, --help']) expect(header).toContain(flag);
    for (const v of ['STOP_TIMEOUT', 'BACKUP_DIR', 'SHARED_DATA_DIR', 'LOG', 'OLD_REDASH_PROJECT', 'LEFTOVER_CONTAINERS']) expect(header).toContain(v);
    for (const u of ALLOWLIST) expect(header).toContain(u);
  });

  it('an unknown option prints "Unknown option: <arg> (try --help)" on stderr and exits 2 before doing anything', async () => {
    const before = await host.snapshot();
    for (const args of [['--bogus'], ['-x'], ['--yes', '--stop-timeout'], ['--dry-run', 'now'], ['--Yes']]) {
      const bad = args.at(-1)!;
      const r = await host.migrate(args);
      expect(r, args.join(' ')).toEqual({ code: 2, stdout: '', stderr: `Unknown option: ${bad} (try --help)\n` });
    }
    // Also as a non-root user: usage errors come first.
    expect(await host.migrate(['--nope'], { user: 'migrate-op' })).toEqual({ code: 2, stdout: '', stderr: 'Unknown option: --nope (try --help)\n' });
    expect(await host.snapshot()).toBe(before);
  });

  it('rejects a stop timeout that is not whole seconds >= 1, and OLD_REDASH_PROJECT=platform, with exit 2', async () => {
    for (const v of ['abc', '0', '-5', '1.5', '']) {
      const r = await host.migrate(['--dry-run', `--stop-timeout=${v}`]);
      expect(r.code, v).toBe(2);
      expect(r.stderr).toBe(`Invalid stop timeout: '${v}' (whole seconds, at least 1; try --help)\n`);
    }
    const env = await host.migrate(['--dry-run'], { env: { STOP_TIMEOUT: 'soon' } });
    expect(env.code).toBe(2);
    expect(env.stderr).toContain("Invalid stop timeout: 'soon'");
    const platform = await host.migrate(['--dry-run'], { env: { OLD_REDASH_PROJECT: 'platform' } });
    expect(platform).toMatchObject({ code: 2, stdout: '' });
    expect(platform.stderr).toBe('OLD_REDASH_PROJECT=platform names the new stack, which this script never touches\n');
  });

  it('refuses to run as a non-root user', async () => {
    const before = await host.snapshot();
    for (const args of [['--yes'], ['--dry-run'], ['--yes', '--force']]) {
      const r = await host.migrate(args, { user: 'migrate-op' });
      expect(r.code).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(/^migrate-host\.sh must be run as root/);
    }
    expect(await host.snapshot()).toBe(before);
  });

  it('refuses when docker.service is not active, unless --force', async () => {
    await host.sh('systemctl stop docker.service');
    try {
      const before = await host.snapshot();
      const r = await host.migrate(['--yes'], { env: FAST });
      expect(r.code).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toBe('docker.service is not active: start Docker first (systemctl start docker.service), or pass --force to proceed without it\n');
      expect(await host.snapshot()).toBe(before);

      const forced = await host.migrate(['--dry-run', '--force'], { env: FAST });
      expect(forced.stderr).toBe('');
      expect(forced.code, forced.stdout).toBe(0);
      expect(forced.stdout).toContain('WARNING: docker.service is not active; continuing because of --force');
      expect(forced.stdout).toContain('+ systemctl mask etl-server.service');
      expect(await host.snapshot()).toBe(before);
    } finally {
      await host.sh('systemctl start docker.service');
    }
  });

  it('aborts on any answer but y, Y, yes, YES, changing nothing', async () => {
    const before = await host.snapshot();
    for (const answer of ['n\n', 'N\n', '\n', '', 'no\n', 'Yes\n', 'yep\n', ' y\n', 'YES please\n']) {
      const r = await host.migrate([], { input: answer, env: FAST });
      expect(r.stderr, JSON.stringify(answer)).toBe('');
      expect(r.code, JSON.stringify(answer)).toBe(1);
      expect(r.stdout).toMatch(/\nProceed\? \[y\/N\] \n?Aborted: nothing was changed\.\n$/);
    }
    expect(await host.snapshot()).toBe(before);
  });

  it('proceeds on y, Y, yes and YES', async () => {
    let first = true;
    for (const answer of ['y', 'Y', 'yes', 'YES']) {
      const r = await host.migrate([], { input: `${answer}\n`, env: FAST });
      expect(r.stderr, answer).toBe('');
      expect(r.code, `${answer}\n${r.stdout}`).toBe(0);
      expect(r.stdout).toContain('Proceed? [y/N] ');
      expect(r.stdout).toMatch(/\nFull log: \/var\/log\/platform-migrate-host-\d{8}-\d{6}\.log\n$/);
      // The first accepted answer does the work; the later runs find it done.
      expect(r.stdout).toContain(first ? '+ systemctl mask etl-server.service' : 'skip: etl-server.service is already masked');
      first = false;
      expect((await host.units(['etl-server.service']))['etl-server.service']).toMatchObject({ load: 'masked', active: 'inactive' });
      // Two runs must not share a log (the name carries the second).
      await new Promise((r) => setTimeout(r, 1000));
    }
  });
});

// scripts/self-update.sh under a POSIX shell with a stand-in `docker` on PATH that records every
// call and fails for the tags it is told to: the switch, the rollback, the status file, the exit
// codes, the backup and the exact compose command; and what it refuses to install: a staged file in
// a directory another user owns or may write, a symbolic link, a file whose digest is not the one
// recorded when it was staged. The real engine runs it in test/e2e.
import { beforeEach, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ROOT } from '../helpers/shared/process.ts';
import { parseHelperLog } from '../../src/adapters/self-update-helper.ts';

const SCRIPT = path.join(ROOT, 'scripts/self-update.sh');
const OLD = 'services:\n  backend: { image: old }\n';
const NEW = 'services:\n  backend: { image: new }\n';

let dir: string;
let work: string;
let staged: string;
let bin: string;

beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'su-script-'));
  work = path.join(dir, 'work');
  bin = path.join(dir, 'bin');
  staged = path.join(dir, 'staging', 'self-update', 'docker-compose.yml');
  for (const d of [work, bin, path.dirname(staged)]) spawnSync('mkdir', ['-p', d]);
  writeFileSync(path.join(work, 'docker-compose.yml'), OLD);
  writeFileSync(staged, NEW);
  // The stand-in records VERSION (and INSTALLER_INIT_REPLICAS when set), its working directory, the
  // compose file it saw and its arguments.
  // It lists $SERVICES as the file's services, and its one-shot init exits $INIT_EXIT.
  writeFileSync(
    path.join(bin, 'docker'),
    [
      '#!/bin/sh',
      'printf "%s|%s|%s|%s\\n" "$VERSION${INSTALLER_INIT_REPLICAS:+ INSTALLER_INIT_REPLICAS=$INSTALLER_INIT_REPLICAS}" "$PWD" "$(head -n 2 docker-compose.yml | tail -n 1)" "$*" >> "$CALLS"',
      'case "$*" in',
      '  *" config --services") printf "%s\\n" $SERVICES; exit 0 ;;',
      '  *" ps -a -q backend-init") echo init-id; exit 0 ;;',
      '  "wait init-id") [ -z "$INIT_HANGS" ] || exec sleep 600; echo "$INIT_EXIT"; exit 0 ;;',
      '  "rm -f init-id") exit 0 ;;',
      '  "logs init-id") echo "schema migrated"; [ "$INIT_EXIT" = 0 ] || echo "installer: migration failed: 0099_marker failed: boom" >&2; exit 0 ;;',
      '  *" up -d backend-init") echo " Container installer-backend-init  Started"; exit 0 ;;',
      'esac',
      'for t in $FAIL_TAGS; do if [ "$t" = "$VERSION" ]; then echo " Container installer-backend  Waiting"; echo "dependency failed to start: container installer-backend is unhealthy" >&2; exit 1; fi; done',
      'echo " Container installer-backend  Healthy"',
    ].join('\n'),
  );
  chmodSync(path.join(bin, 'docker'), 0o755);
});

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

function helper(opts: { failTags?: string; waitTimeout?: string; args?: string[]; services?: string; initExit?: number; stagedSha256?: string | null; env?: Record<string, string> } = {}) {
  // As the backend hands it over: the digest of the file it staged (null: a backend that records none).
  const digest = opts.stagedSha256 === undefined ? sha256(NEW) : opts.stagedSha256;
  const calls = path.join(dir, 'calls');
  const args = opts.args ?? ['installer', work, 'docker-compose.yml', staged, 'rollback', 'dev-latest', 'backend'];
  const r = spawnSync('sh', [SCRIPT, ...args], {
    env: {
      PATH: `${bin}:/usr/bin:/bin`,
      CALLS: calls,
      FAIL_TAGS: opts.failTags ?? '',
      SERVICES: opts.services ?? 'postgres backend',
      INIT_EXIT: String(opts.initExit ?? 0),
      ...(opts.waitTimeout ? { SELF_UPDATE_WAIT_TIMEOUT: opts.waitTimeout } : {}),
      ...(digest !== null ? { SELF_UPDATE_STAGED_SHA256: digest } : {}),
      ...opts.env,
    },
    encoding: 'utf8',
  });
  const status = existsSync(path.join(work, '.self-update-status')) ? readFileSync(path.join(work, '.self-update-status'), 'utf8') : null;
  const recorded = existsSync(calls) ? readFileSync(calls, 'utf8').trim().split('\n') : [];
  return { code: r.status, out: r.stdout + r.stderr, status, calls: recorded.map((l) => l.split('|')) };
}

const composeFile = () => readFileSync(path.join(work, 'docker-compose.yml'), 'utf8');
const rmLink = (p: string) => spawnSync('rm', ['-f', p]);

/** Refused before anything was changed: no compose call, the old file in place, no backup, no status, exit 1. */
function expectRefused(r: ReturnType<typeof helper>, why: string) {
  expect(r.code, r.out).toBe(1);
  expect(r.calls).toEqual([]);
  expect(r.status).toBeNull();
  expect(composeFile()).toBe(OLD);
  expect(existsSync(path.join(work, 'docker-compose.yml.pre-update'))).toBe(false);
  expect(parseHelperLog(r.out).switchFailure).toContain(why);
  expect(r.out).toContain('self-update: refused before anything was changed: backend keeps running its current build');
}
const backup = () => readFileSync(path.join(work, 'docker-compose.yml.pre-update'), 'utf8');
const upArgs = (timeout = '300') => `compose -p installer -f docker-compose.yml up -d --wait --wait-timeout ${timeout} backend`;
/** The helper asks the installed file whether it has a one-shot backend-init before the switch. */
const servicesCall = () => ['dev-latest', work, '  backend: { image: new }', 'compose -p installer -f docker-compose.yml config --services'];

describe('self-update.sh', () => {
  it('switch succeeds: status ok, exit 0, the new compose file installed, the old one backed up', () => {
    const r = helper();
    expect(r.code).toBe(0);
    expect(r.status).toBe('ok\n');
    expect(r.calls).toEqual([servicesCall(), ['dev-latest INSTALLER_INIT_REPLICAS=0', work, '  backend: { image: new }', upArgs()]]);
    expect(composeFile()).toBe(NEW);
    expect(backup()).toBe(OLD);
    expect(parseHelperLog(r.out)).toEqual({ status: 'ok', switchFailure: null, rollbackFailure: null });
  });

  it('switch fails, rollback succeeds: backup restored, pinned to rollback, status rolled-back, exit 0', () => {
    const r = helper({ failTags: 'dev-latest' });
    expect(r.code).toBe(0);
    expect(r.status).toBe('rolled-back\n');
    expect(r.calls).toEqual([
      servicesCall(),
      ['dev-latest INSTALLER_INIT_REPLICAS=0', work, '  backend: { image: new }', upArgs()],
      ['rollback INSTALLER_INIT_REPLICAS=0', work, '  backend: { image: old }', upArgs()],
    ]);
    expect(composeFile()).toBe(OLD);
    expect(parseHelperLog(r.out)).toEqual({
      status: 'rolled-back',
      switchFailure: 'exit 1: dependency failed to start: container installer-backend is unhealthy',
      rollbackFailure: null,
    });
  });

  it('both fail: status failed, exit 1, the recovery path printed, no third attempt', () => {
    const r = helper({ failTags: 'dev-latest rollback' });
    expect(r.code).toBe(1);
    expect(r.status).toBe('failed\n');
    expect(r.calls.map((c) => c[0])).toEqual(['dev-latest', 'dev-latest INSTALLER_INIT_REPLICAS=0', 'rollback INSTALLER_INIT_REPLICAS=0']);
    expect(r.out).toContain('fetch the installer compose file from object storage');
    expect(r.out).toContain('docker compose pull && docker compose up -d');
    expect(parseHelperLog(r.out)).toMatchObject({ status: 'failed', rollbackFailure: 'exit 1: dependency failed to start: container installer-backend is unhealthy' });
  });

  it('the wait timeout is 300 unless the test-only variable says otherwise', () => {
    expect(helper({ waitTimeout: '7' }).calls[1]![3]).toBe(upArgs('7'));
    expect(helper({ waitTimeout: 'soon' }).code).toBe(2);
  });

  it('a staged file that is missing is refused before anything is changed: no switch, no rollback, exit 1', () => {
    const missing = path.join(path.dirname(staged), 'missing.yml');
    const r = helper({ args: ['installer', work, 'docker-compose.yml', missing, 'rollback', 'dev-latest', 'backend'] });
    expectRefused(r, `${missing} is not a regular file`);
  });

  it('with a one-shot backend-init in the new file, runs it on the new tag to its end before the switch', () => {
    const r = helper({ services: 'postgres backend-init backend' });
    expect(r.code).toBe(0);
    expect(r.status).toBe('ok\n');
    const file = '  backend: { image: new }';
    expect(r.calls).toEqual([
      servicesCall(),
      ['dev-latest', work, file, 'compose -p installer -f docker-compose.yml up -d backend-init'],
      ['dev-latest', work, file, 'compose -p installer -f docker-compose.yml ps -a -q backend-init'],
      ['', work, file, 'wait init-id'],
      ['', work, file, 'logs init-id'],
      ['dev-latest INSTALLER_INIT_REPLICAS=0', work, file, upArgs()],
    ]);
    expect(r.out).toContain('schema migrated');
    expect(r.out).toContain('self-update: backend-init exited 0 (schema migrated); backend not touched yet');
  });

  it('a one-shot init that fails is a failed switch: the new tag never reaches the backend, the rollback runs', () => {
    const r = helper({ services: 'postgres backend-init backend', initExit: 3 });
    expect(r.code).toBe(0);
    expect(r.status).toBe('rolled-back\n');
    expect(r.calls.filter((c) => c[3]!.includes('--wait')).map((c) => c[0])).toEqual(['rollback INSTALLER_INIT_REPLICAS=0']);
    expect(composeFile()).toBe(OLD);
    expect(parseHelperLog(r.out)).toEqual({
      status: 'rolled-back',
      switchFailure: 'backend-init exited 3 before the switch: installer: migration failed: 0099_marker failed: boom',
      rollbackFailure: null,
    });
  });

  it('a one-shot init that does not exit within SELF_UPDATE_INIT_TIMEOUT is removed and counts as a failed switch', () => {
    const started = Date.now();
    const r = helper({ services: 'postgres backend-init backend', env: { INIT_HANGS: '1', SELF_UPDATE_INIT_TIMEOUT: '1' } });
    // Bounded by the init's timeout, not by the stand-in's ten-minute hang.
    expect(Date.now() - started).toBeLessThan(60_000);
    expect(r.code, r.out).toBe(0);
    expect(r.status).toBe('rolled-back\n');
    expect(r.calls.map((c) => c[3])).toContain('rm -f init-id');
    expect(r.calls.filter((c) => c[3]!.includes('--wait')).map((c) => c[0])).toEqual(['rollback INSTALLER_INIT_REPLICAS=0']);
    expect(parseHelperLog(r.out).switchFailure).toBe('backend-init did not exit within 1 s (SELF_UPDATE_INIT_TIMEOUT) and was removed; its migrations were rolled back');
    expect(helper({ env: { SELF_UPDATE_INIT_TIMEOUT: 'later' } }).code).toBe(2);
  });

  it('checks the staged file against the digest recorded when it was staged, and installs the copy it checked', () => {
    const r = helper();
    expect(r.code).toBe(0);
    expect(r.out).toContain(`the staged compose file has the digest recorded when it was staged (${sha256(NEW)})`);
    expect(composeFile()).toBe(NEW);
  });

  it('refuses a staged file whose digest is not the recorded one, naming both digests', () => {
    const tampered = `${NEW}  evil: { image: busybox, privileged: true }\n`;
    writeFileSync(staged, tampered);
    const r = helper();
    expectRefused(r, `does not match the digest recorded when it was staged: expected ${sha256(NEW)}, got ${sha256(tampered)}`);
    expect(existsSync(path.join(work, 'docker-compose.yml.new'))).toBe(false);
    expect(helper({ stagedSha256: 'not-a-digest' }).out).toContain('SELF_UPDATE_STAGED_SHA256 is not a sha256 digest');
  });

  it('without a digest handed over (a backend that records none) says so and relies on the directory checks', () => {
    const r = helper({ stagedSha256: null });
    expect(r.code).toBe(0);
    expect(r.status).toBe('ok\n');
    expect(r.out).toContain('warning: no digest of the staged file was handed over');
    expect(composeFile()).toBe(NEW);
  });

  it('refuses a staging directory owned by another uid', () => {
    chownSync(path.dirname(staged), 12345, 12345);
    expectRefused(helper(), `${path.dirname(staged)} is owned by uid 12345, not by uid 0`);
  });

  it('refuses a staging root owned by another uid', () => {
    const root = path.dirname(path.dirname(staged));
    chownSync(root, 12345, 12345);
    expectRefused(helper(), `${root} is owned by uid 12345, not by uid 0`);
  });

  it('refuses a staging root or directory that others or the group may write', () => {
    const root = path.dirname(path.dirname(staged));
    chmodSync(root, 0o757);
    expectRefused(helper(), `${root} is writable by group or others (mode 757)`);
    chmodSync(root, 0o755);
    chmodSync(path.dirname(staged), 0o775);
    expectRefused(helper(), `${path.dirname(staged)} is writable by group or others (mode 775)`);
  });

  it('refuses a staged file owned by another uid or writable by others', () => {
    chownSync(staged, 12345, 12345);
    expectRefused(helper(), `${staged} is owned by uid 12345, not by uid 0`);
    chownSync(staged, 0, 0);
    chmodSync(staged, 0o646);
    expectRefused(helper(), `${staged} is writable by group or others (mode 646)`);
  });

  it('refuses a staging directory or staged file that is a symbolic link', () => {
    // The directory swapped for a link to one that holds a file of someone else's choosing.
    const elsewhere = path.join(dir, 'elsewhere');
    mkdirSync(elsewhere);
    writeFileSync(path.join(elsewhere, 'docker-compose.yml'), NEW);
    renameSync(path.dirname(staged), path.join(dir, 'moved'));
    symlinkSync(elsewhere, path.dirname(staged));
    expectRefused(helper(), `${path.dirname(staged)} is a symbolic link`);
    rmLink(path.dirname(staged));
    renameSync(path.join(dir, 'moved'), path.dirname(staged));
    renameSync(staged, `${staged}.real`);
    symlinkSync(`${staged}.real`, staged);
    expectRefused(helper(), `${staged} is a symbolic link`);
  });

  it('takes exactly seven arguments', () => {
    const r = helper({ args: ['installer', work] });
    expect(r.code).toBe(2);
    expect(r.out).toContain('usage:');
    expect(r.calls).toEqual([]);
  });

  it('is POSIX sh and clean under shellcheck', () => {
    expect(readFileSync(SCRIPT, 'utf8').startsWith('#!/bin/sh\n')).toBe(true);
    const r = spawnSync('shellcheck', ['-s', 'sh', SCRIPT], { encoding: 'utf8' });
    expect(r.error, 'shellcheck must be installed (scripts/rig/setup.sh installs it)').toBeUndefined();
    expect(r.stdout + r.stderr).toBe('');
    expect(r.status).toBe(0);
  });
});

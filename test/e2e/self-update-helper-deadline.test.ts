// A helper given up on at its deadline, on the real engine (docs/adr/0045-migrations-checked-for-the-old-build.md):
// the wait ends at the deadline with the helper still running; stopping it leaves it exited with
// its output readable for the transcript; removing it leaves nothing behind.
import { afterAll, describe, expect, it } from 'vitest';
import Docker from 'dockerode';
import { run } from '../helpers/e2e/rig.ts';
import { DockerSelfUpdateEngine, type SelfUpdateSettings } from '../../src/adapters/self-update.ts';
import { HELPER_NAME } from '../../src/adapters/self-update-helper.ts';
import type { RuntimePort } from '../../src/contracts/ports.ts';

const docker = new Docker();
const engine = new DockerSelfUpdateEngine(docker, {} as SelfUpdateSettings, {} as RuntimePort);
const state = async () => {
  const r = await run('docker', ['inspect', '-f', '{{.State.Status}}', HELPER_NAME]);
  return r.code === 0 ? r.stdout.trim() : null;
};

afterAll(async () => {
  await run('docker', ['rm', '-f', HELPER_NAME]);
});

describe('a helper given up on at its deadline', () => {
  it('is still running when the wait ends, then stopped with its output kept, then removed', async () => {
    await run('docker', ['rm', '-f', HELPER_NAME]);
    // Stands for a helper whose init never exits: it prints, then hangs, and ignores SIGTERM.
    const id = await engine.spawnHelper({
      name: HELPER_NAME, image: 'installer-rig/busybox:latest', cmd: ['sh', '-c', "trap '' TERM; echo 'self-update: running the init'; while :; do sleep 1; done"],
      binds: [], env: [], labels: { 'io.installer.self-update.request': 'deadline-test' },
    });
    const signal = new AbortController().signal;
    const exit = await engine.waitHelper(id, { deadline: new Date(Date.now() + 1_500), signal });
    expect(exit.state).toBe('timed-out');
    expect(await state()).toBe('running');

    await engine.stopHelper(id, signal);
    expect(await state()).toBe('exited');
    expect(await engine.helperOutput(id, signal)).toEqual(['self-update: running the init']);
    // Stopping one already gone is not an error.
    await engine.stopHelper(id, signal);

    expect(await engine.removeHelper()).toBe(true);
    expect(await state()).toBeNull();
  });
});

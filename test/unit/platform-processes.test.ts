// The docker CLI runs a restart must stop (stopLeftover): told apart by their argument vectors in
// /proc, on real docker CLI processes kept waiting by an engine socket that never answers.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { isPlatformProcessOf, terminateGroup } from '../../src/adapters/processes.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'platform-processes-'));
const socket = path.join(dir, 'engine.sock');
let silent: Server;
const started: ChildProcess[] = [];

/** `docker <args>`, as the job runner spawns it (its own process group, DOCKER_HOST in the environment). */
function cli(args: string[]): ChildProcess {
  const child = spawn('docker', args, { env: { ...process.env, DOCKER_HOST: `unix://${socket}` }, detached: true, stdio: ['pipe', 'ignore', 'ignore'] });
  child.stdin!.on('error', () => {});
  child.stdin!.end('services: {web: {image: busybox}}\n');
  started.push(child);
  return child;
}
/** How it ended: the CLI catches SIGTERM and exits 128+15 itself. */
const ended = (child: ChildProcess) =>
  new Promise<number | string | null>((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve(child.exitCode ?? child.signalCode) : child.once('exit', (code, signal) => resolve(code ?? signal))));

beforeAll(async () => {
  // Accepts and never answers: every CLI waits on its first request.
  silent = createServer(() => {});
  await new Promise<void>((resolve) => silent.listen(socket, resolve));
});

afterAll(() => {
  for (const c of started) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  silent.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the platform CLI runs a restart stops', () => {
  it('knows the compose, stack and service runs of its project, and none of another', async () => {
    const compose = cli(['compose', '-p', 'plat', 'ps']);
    const stack = cli(['stack', 'deploy', '--detach=false', '--prune', '-c', '-', 'plat']);
    const update = cli(['service', 'update', '--force', '--detach=false', 'plat_web']);
    const scale = cli(['service', 'scale', '--detach=false', 'plat_web=0', 'plat_worker=0']);
    const other = [
      cli(['stack', 'deploy', '--detach=false', '-c', '-', 'plat2']),
      cli(['service', 'update', '--force', 'plat2_web']),
      cli(['compose', '-p', 'platform', 'ps']),
      cli(['stack', 'ps', 'other']),
    ];
    // Wait until each has exec'd: its /proc entry names docker.
    await expect.poll(() => [compose, stack, update, scale, ...other].every((c) => isPlatformProcessOf(c.pid!, 'plat') || isPlatformProcessOf(c.pid!, 'plat2') || isPlatformProcessOf(c.pid!, 'platform') || isPlatformProcessOf(c.pid!, 'other'))).toBe(true);

    for (const c of [compose, stack, update, scale]) expect(isPlatformProcessOf(c.pid!, 'plat')).toBe(true);
    for (const c of other) expect(isPlatformProcessOf(c.pid!, 'plat')).toBe(false);
    // This test's own process is no CLI run of anyone's.
    expect(isPlatformProcessOf(process.pid, 'plat')).toBe(false);

    terminateGroup(stack.pid!);
    expect([143, 'SIGTERM']).toContain(await ended(stack));
    expect(isPlatformProcessOf(stack.pid!, 'plat')).toBe(false);
    // The others are still waiting.
    expect(isPlatformProcessOf(update.pid!, 'plat')).toBe(true);
  });
});

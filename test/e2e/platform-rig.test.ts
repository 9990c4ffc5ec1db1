// The test platform every Docker test stands on: a real compose project of busybox services.
import { describe, expect, it } from 'vitest';
import { docker, run, startPlatform } from '../helpers/e2e/rig.ts';

describe('test platform on the rig', () => {
  it('comes up healthy under its own project name, writes stdout and stderr, and goes away whole', async () => {
    const p = await startPlatform();
    try {
      const containers = await p.containers();
      expect(containers.map((c) => c.service).sort()).toEqual(['db', 'web', 'worker']);
      for (const c of containers) {
        expect(c.state).toBe('running');
        const inspect = JSON.parse(await docker(['inspect', c.id]))[0];
        expect(inspect.Config.Labels['com.docker.compose.project']).toBe(p.project);
        expect(inspect.State.Health.Status).toBe('healthy');
      }
      const worker = containers.find((c) => c.service === 'worker')!;
      await new Promise((r) => setTimeout(r, 5_500));
      const split = await run('docker', ['logs', worker.id]);
      expect(split.stdout).toMatch(/worker: line 1\n/);
      expect(split.stderr).toMatch(/worker: line 5 \(every 5th goes to stderr\)/);
    } finally {
      await p.remove();
    }
    expect(await p.containers()).toEqual([]);
    const volumes = await docker(['volume', 'ls', '-q', '--filter', `label=com.docker.compose.project=${p.project}`]);
    expect(volumes.trim()).toBe('');
  });
});

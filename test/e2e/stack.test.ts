// The installer image, built here, running as its own compose stack on the real engine.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { buildInstallerImage, docker, REGISTRY } from '../helpers/rig.ts';
import { startStack, type Stack } from '../helpers/stack.ts';

const tag = `dev-e2e-${randomBytes(3).toString('hex')}`;
const ref = `${REGISTRY}/installer:${tag}`;
let digest: string;
let stack: Stack | undefined;

beforeAll(async () => {
  digest = (await buildInstallerImage([ref]))[ref]!;
  stack = await startStack({ version: tag });
});
afterAll(async () => stack?.down());

describe('the installer stack (dev compose file, real engine, local registry)', () => {
  it('is healthy once its one-shot migration has completed', async () => {
    const init = JSON.parse(await docker(['inspect', 'installer-backend-init']))[0];
    expect(init.State.Status).toBe('exited');
    expect(init.State.ExitCode).toBe(0);
    const backend = JSON.parse(await docker(['inspect', 'installer-backend']))[0];
    expect(backend.State.Health.Status).toBe('healthy');
    expect(backend.Config.Env).toContain('INSTALLER_CHANNEL=dev');
    expect(backend.Config.Env).toContain('TZ=UTC');
    const res = await fetch(`${stack!.baseUrl}/api/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok', db: 'up' });
  });

  it('signs in the first admin and reports the digest that was pushed', async () => {
    const token = await stack!.login('admin', await stack!.adminPassword());
    const res = await fetch(`${stack!.baseUrl}/api/version`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
    const v = await res.json();
    expect(v).toMatchObject({ inContainer: true, image: ref, tag, digest });
    expect(digest).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('serves the operator UI built into the image at /', async () => {
    const res = await fetch(`${stack!.baseUrl}/jobs/any`);
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(html).toContain('<div id="app">');
    const asset = /src="(\/assets\/[^"]+\.js)"/.exec(html)![1]!;
    expect((await fetch(`${stack!.baseUrl}${asset}`)).status).toBe(200);
  });

  it('sits on the platform network as installer-backend and keeps its secrets out of the logs', async () => {
    const backend = JSON.parse(await docker(['inspect', 'installer-backend']))[0];
    expect(backend.NetworkSettings.Networks.platform.Aliases).toContain('installer-backend');
    const logs = await docker(['logs', 'installer-backend']);
    expect(logs).toContain('installer listening');
    expect(logs).not.toContain(stack!.databasePassword);
    const token = (await docker(['exec', 'installer-backend', 'cat', '/var/lib/installer/secrets/service-token'])).trim();
    expect(token.length).toBeGreaterThanOrEqual(32);
    expect(logs).not.toContain(token);
  });

  it('stops promptly and cleanly on SIGTERM (PID 1 handles it)', async () => {
    await docker(['stop', '-t', '10', 'installer-backend']);
    const backend = JSON.parse(await docker(['inspect', 'installer-backend']))[0];
    // A process that ignored SIGTERM would be killed after the timeout and exit 137.
    expect(backend.State.ExitCode).toBe(0);
    expect(await docker(['logs', 'installer-backend'])).toContain('shutting down');
  });
});

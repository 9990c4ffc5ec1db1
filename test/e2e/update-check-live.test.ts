// The update check is live, tried as an operator would on the packaged stack with its defaults
// (docs/adr/0049-live-update-check.md): the installer's registry is the rig's, reached through a
// door the test shuts and opens. A build pushed a moment ago is offered at the next check; the
// spec's rows (an unreachable registry, a missing repository, an unreadable local compose file)
// hold on the first check after each fault, and a check after the fault is mended reads the
// channel as it is again.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renameSync } from 'node:fs';
import { Images, startInstaller, type InstallerUnderTest } from '../helpers/e2e/self-update-rig.ts';
import { registryDoor, type RegistryDoor } from '../helpers/e2e/fake-registries.ts';
import { REGISTRY } from '../helpers/e2e/rig.ts';
import type { SelfUpdateCheck as Check } from '../helpers/api/self-update.ts';

const BASE = 'live-1';
const NEXT = 'live-2';

const images = new Images();
let door: RegistryDoor;
let i: InstallerUnderTest;
let current = '';

async function check(): Promise<Check> {
  const r = await i.get('/api/system/self-update-check');
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as Check;
}

beforeAll(async () => {
  door = await registryDoor(REGISTRY);
  current = await images.buildBase(BASE);
  await images.publish(BASE);
  // Every setting at its default but where the installer finds its registry: behind the door.
  i = await startInstaller(images, BASE, { INSTALLER_REGISTRY: `${door.address}/${images.namespace}` });
}, 900_000);
afterAll(async () => {
  await i?.down();
  await door?.shut();
  await images.cleanup();
});

describe('the update check on the packaged stack, with its defaults', () => {
  it('newest: nothing offered; a build pushed a moment ago: offered at the next check', async () => {
    expect(await check()).toMatchObject({ updateAvailable: false, currentDigest: current, remoteDigest: current });
    const next = await images.buildVariant('good', BASE, NEXT);
    await images.publish(NEXT);
    const c = await check();
    expect(c).toMatchObject({ updateAvailable: true, currentDigest: current, remoteDigest: next });
    expect(c.error).toBeUndefined();
  });

  it('the local compose file unreadable: composeChanged null on the first check after it, and back once it is', async () => {
    const file = i.stack.composeFile;
    renameSync(file, `${file}.away`);
    let away: Check;
    try {
      away = await check();
    } finally {
      renameSync(`${file}.away`, file);
    }
    expect(away).toMatchObject({ updateAvailable: true, composeChanged: null });
    expect(away.error).toContain('local compose file unreadable');
    const back = await check();
    expect(back.composeChanged).toBe(true); // the published file carries a line of its own
    expect(back.error).toBeUndefined();
  });

  it('the registry unreachable: updateAvailable false, remoteDigest null, error set on the first check after it', async () => {
    await door.shut();
    let c: Check;
    try {
      c = await check();
    } finally {
      await door.open();
    }
    expect(c).toMatchObject({ updateAvailable: false, currentDigest: current, remoteDigest: null });
    expect(c.error).toMatch(/registry unreachable: /);
    expect(await check()).toMatchObject({ updateAvailable: true, remoteDigest: images.digests.get(NEXT) });
  });

  it('the repository gone from the registry: updateAvailable false, remoteDigest null, error naming it, on the first check after it', async () => {
    for (const d of new Set(images.digests.values())) {
      const res = await fetch(`http://${REGISTRY}/v2/${images.namespace}/installer/manifests/${d}`, { method: 'DELETE' });
      expect([202, 404]).toContain(res.status);
    }
    const c = await check();
    expect(c).toMatchObject({ updateAvailable: false, currentDigest: current, remoteDigest: null });
    expect(c.error).toMatch(new RegExp(`^not in the registry: repository ${door.address.replace(/\./g, '\\.')}/${images.namespace}/installer does not exist`));
  });
});

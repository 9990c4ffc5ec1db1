// Read latency of the endpoints the UI calls on every load, on the real rig: the installer image
// built from this checkout, running as its own compose stack on the engine, with its channel
// published in the local registry (as the self-update tests run it):
// - p50/p99 of GET /api/system/self-update-check (each call a new observation of the channel: the
//   registry's digest, both compose files), GET /api/version and GET /api/deployment/status, each
//   called sequentially by one client (BENCH_READS_CALLS calls each, default 100, after 5
//   warm-up calls), so a figure is the time of one call, not of a queue;
// - the same check again on an installer with a signing key (docs/adr/0053-signed-builds.md), the
//   channel's build signed by the real signer: each check then also reads the build's signature
//   from the registry and verifies it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Bench, Figure } from './run.ts';
import { ensureRig, REGISTRY } from '../test/helpers/e2e/rig.ts';
import { registryDoorForContainers, type RegistryDoor } from '../test/helpers/e2e/fake-registries.ts';
import { makeKeyPair, signBuild } from '../test/helpers/e2e/signing.ts';
import { Images, startInstaller, type InstallerUnderTest } from '../test/helpers/e2e/self-update-rig.ts';

const CALLS = Number(process.env.BENCH_READS_CALLS ?? 100);
const WARMUP = 5;
const CHECK = '/api/system/self-update-check';
/** The fresh update check's p50 against the local registry (issue "Verified before it runs"). */
const CHECK_GOAL_MS = 200;
const ENDPOINTS = [CHECK, '/api/version', '/api/deployment/status'];

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]!;
};

async function timeCalls(i: InstallerUnderTest, p: string): Promise<number[]> {
  const times: number[] = [];
  for (let k = 0; k < WARMUP + CALLS; k++) {
    const t = performance.now();
    const res = await fetch(`${i.stack.baseUrl}${p}`, { headers: { authorization: `Bearer ${i.token}` }, signal: AbortSignal.timeout(60_000) });
    await res.arrayBuffer();
    const ms = performance.now() - t;
    if (res.status !== 200) throw new Error(`${p} answered ${res.status}`);
    if (k >= WARMUP) times.push(ms);
  }
  return times;
}

const checkGoal = (p50: number) => ({ goal: `≤ ${CHECK_GOAL_MS} ms`, ok: p50 <= CHECK_GOAL_MS });

/** The update check of an installer with a signing key; the channel's build is signed with it. */
async function checkWithKey(images: Images, digest: string, log: (s: string) => void): Promise<Figure[]> {
  const keys = mkdtempSync(path.join(tmpdir(), 'bench-reads-keys-'));
  let door: RegistryDoor | undefined;
  let i: InstallerUnderTest | undefined;
  try {
    const key = await makeKeyPair(keys, 'installer');
    await signBuild(keys, images.repo, digest, 'installer');
    // The backend reads signatures from inside its container, where the rig's registry (the host's
    // loopback) is out of reach: a relay on one of the machine's own addresses stands in, as in the
    // packaged stack's signature test.
    door = await registryDoorForContainers(REGISTRY);
    i = await startInstaller(images, 'bench-reads', { SIGNATURE_PUBLIC_KEYS_FILE: key, SIGNATURE_REGISTRY_ENDPOINTS: `${REGISTRY}=http://${door.address}` });
    const verdict = (await i.get(CHECK)).body as { signature?: { result?: string } };
    if (verdict.signature?.result !== 'verified') throw new Error(`the check with a key did not verify the build: ${JSON.stringify(verdict)}`);
    log(`the same check with a signing key, the build verified at each call: ${CALLS} calls after ${WARMUP} warm-up calls`);
    const times = await timeCalls(i, CHECK);
    const p50 = quantile(times, 0.5);
    return [
      { name: `GET ${CHECK} with a signing key p50`, value: p50, unit: 'ms', ...checkGoal(p50) },
      { name: `GET ${CHECK} with a signing key p99`, value: quantile(times, 0.99), unit: 'ms' },
    ];
  } finally {
    await i?.down();
    await door?.shut();
    rmSync(keys, { recursive: true, force: true });
  }
}

const bench: Bench = async (log) => {
  await ensureRig();
  const images = new Images();
  let i: InstallerUnderTest | undefined;
  try {
    log('building the installer image and publishing it as the channel');
    await images.buildBase('bench-reads');
    const digest = await images.publish('bench-reads');
    i = await startInstaller(images, 'bench-reads');
    log(`${CALLS} sequential calls per endpoint after ${WARMUP} warm-up calls, one client, admin token`);
    const figures: Figure[] = [];
    for (const p of ENDPOINTS) {
      const times = await timeCalls(i, p);
      const p50 = quantile(times, 0.5);
      // Every check observes the channel anew: the registry, the engine and the local compose
      // file stand behind this figure (docs/adr/0049-live-update-check.md).
      figures.push({ name: `GET ${p} p50`, value: p50, unit: 'ms', ...(p === CHECK ? checkGoal(p50) : {}) });
      figures.push({ name: `GET ${p} p99`, value: quantile(times, 0.99), unit: 'ms' });
    }
    await i.down();
    i = undefined;
    figures.push(...(await checkWithKey(images, digest, log)));
    return figures;
  } finally {
    await i?.down();
    await images.cleanup();
  }
};

export default bench;

// The time a verification adds to an update (docs/adr/0053-signed-builds.md): one build pushed to
// the rig's registry and signed by the real signer (cosign, a key made here, no transparency log),
// then verified BENCH_SIGNATURE_CALLS times (default 200, after 10 warm-up calls) by the
// installer's verifier, one at a time: the signature manifest, its payload blob and the check of
// the signature against two trusted keys (the signer's second, as after a rotation).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Bench, Figure } from './run.ts';
import { docker, ensureRig, REGISTRY, uniqueName } from '../test/helpers/e2e/rig.ts';
import { makeKeyPair, pushBuild, signBuild } from '../test/helpers/e2e/signing.ts';
import { verifyImageSignature } from '../src/adapters/signatures.ts';
import { parseTrustedKeys } from '../src/signature-keys.ts';

const CALLS = Number(process.env.BENCH_SIGNATURE_CALLS ?? 200);
const WARMUP = 10;
const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]!;
};

const bench: Bench = async (log) => {
  await ensureRig();
  const dir = mkdtempSync(path.join(tmpdir(), 'bench-signatures-'));
  const repo = `${REGISTRY}/${uniqueName('bench-sig')}/installer`;
  try {
    for (const name of ['other', 'signer']) await makeKeyPair(dir, name);
    const digest = await pushBuild(dir, repo, '1');
    await signBuild(dir, repo, digest, 'signer');
    const keys = parseTrustedKeys(readFileSync(path.join(dir, 'other.pub'), 'utf8') + readFileSync(path.join(dir, 'signer.pub'), 'utf8'), 'keys.pem');
    log(`${CALLS} verifications of one signed build after ${WARMUP} warm-up calls, two trusted keys, the rig's registry`);
    const times: number[] = [];
    for (let k = 0; k < WARMUP + CALLS; k++) {
      const t = performance.now();
      const v = await verifyImageSignature(repo, digest, keys);
      const ms = performance.now() - t;
      if (v.result !== 'verified') throw new Error(`not verified: ${v.detail}`);
      if (k >= WARMUP) times.push(ms);
    }
    const figures: Figure[] = [
      { name: 'signature verification p50', value: quantile(times, 0.5), unit: 'ms' },
      { name: 'signature verification p99', value: quantile(times, 0.99), unit: 'ms' },
    ];
    await docker(['rmi', '-f', `${repo}:1`]).catch(() => {});
    return figures;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};

export default bench;

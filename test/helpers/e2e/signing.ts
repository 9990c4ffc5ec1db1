// Builds signed by the real signer on the rig (docs/adr/0053-signed-builds.md): cosign from Debian
// trixie (scripts/rig/setup.sh), keys made in a directory of the caller's, no transparency log, and
// builds pushed to the rig's registry. For the signature tests and the bench.
import { mkdtempSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { docker, must } from './rig.ts';

const COSIGN_ENV = { COSIGN_PASSWORD: 'test-password' };

/** Runs cosign with the test keys' password; throws with its output when it fails. */
export const cosign = (args: string[]) => must('cosign', args, { env: COSIGN_ENV, timeoutMs: 60_000 });

/** Makes `<dir>/<name>.key` and `<dir>/<name>.pub`; returns the public key's path. */
export async function makeKeyPair(dir: string, name: string): Promise<string> {
  await cosign(['generate-key-pair', '--output-key-prefix', path.join(dir, name)]);
  return path.join(dir, `${name}.pub`);
}

/** A new build (one layer of its own content on the rig's busybox) pushed as `<repo>:<tag>`: its manifest digest. */
export async function pushBuild(dir: string, repo: string, tag: string): Promise<string> {
  const ctx = mkdtempSync(path.join(dir, 'ctx-'));
  writeFileSync(path.join(ctx, 'Dockerfile'), `FROM installer-rig/busybox:latest\nRUN echo ${repo}:${tag}-${Math.random()} > /build\n`);
  await docker(['build', '-q', '-t', `${repo}:${tag}`, ctx], { env: { DOCKER_BUILDKIT: '0' }, timeoutMs: 120_000 });
  const out = await docker(['push', `${repo}:${tag}`], { timeoutMs: 120_000 });
  const digest = /digest: (sha256:[0-9a-f]{64})/.exec(out)?.[1];
  if (!digest) throw new Error(`no digest in the push output: ${out}`);
  return digest;
}

/** Signs `<repo>@<digest>` with `<dir>/<key>.key`, storing the signature in the registry. */
export const signBuild = (dir: string, repo: string, digest: string, key: string) =>
  cosign(['sign', '--key', path.join(dir, `${key}.key`), '--tlog-upload=false', '--allow-http-registry', '--yes', `${repo}@${digest}`]);

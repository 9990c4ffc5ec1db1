// Engine facts for the diagnostics bundle: the engine's and Compose's versions and the storage
// driver. Every call is bounded: a bundle is most wanted when something is stuck.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { apiAtLeast, MIN_ENGINE_API } from './engine-version.ts';
import type Docker from 'dockerode';

const run = promisify(execFile);
const TIMEOUT_MS = 5_000;

function bounded<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${TIMEOUT_MS / 1000} s`)), TIMEOUT_MS);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

export async function engineFacts(docker: Docker): Promise<Record<string, unknown>> {
  const [version, info, compose] = await Promise.allSettled([
    bounded(docker.version(), 'the engine'),
    bounded(docker.info() as Promise<Record<string, unknown>>, 'the engine'),
    // Argument array, no shell; the plugin's version needs no engine.
    bounded(run('docker', ['compose', 'version', '--short'], { timeout: TIMEOUT_MS }), 'docker compose'),
  ]);
  if (version.status === 'rejected') throw version.reason as Error;
  const v = version.value;
  const i = info.status === 'fulfilled' ? info.value : null;
  return {
    version: v.Version,
    apiVersion: v.ApiVersion,
    // Whether this build runs against that engine (src/adapters/engine-version.ts).
    minApiVersion: MIN_ENGINE_API,
    supported: apiAtLeast(v.ApiVersion),
    os: v.Os,
    arch: v.Arch,
    kernel: v.KernelVersion,
    ...(i
      ? { storageDriver: i.Driver, containers: i.Containers, containersRunning: i.ContainersRunning, images: i.Images, cgroupVersion: i.CgroupVersion, loggingDriver: i.LoggingDriver }
      : { infoError: (info as PromiseRejectedResult).reason instanceof Error ? ((info as PromiseRejectedResult).reason as Error).message : 'unknown' }),
    compose: compose.status === 'fulfilled' ? compose.value.stdout.trim() : { error: (compose.reason as Error).message.split('\n')[0] },
  };
}

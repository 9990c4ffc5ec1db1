// The oldest Docker Engine the installer runs against, declared here and nowhere else
// (docs/engines.md), and the check of an engine against it: at start, a reachable engine below it
// stops the process with one line saying what to upgrade; the observer's facts of the engine carry
// the verdict to diagnostics.
import type Docker from 'dockerode';
import { apiVersionAtLeast } from '../contracts/engine-api.ts';

/**
 * The oldest engine API this build runs against: that of the engine the whole suite runs on (Docker
 * Engine 26.1, API 1.45; docs/engines.md). Nothing older is tested, so nothing older is admitted.
 */
export const MIN_ENGINE_API = '1.45';
/** The engine release that first spoke MIN_ENGINE_API, for messages. */
export const MIN_ENGINE_RELEASE = '26.0';

/** Whether an engine API version ("1.45") is at least `min`; false for anything that is not one. */
export function apiAtLeast(have: string, min: string = MIN_ENGINE_API): boolean {
  return apiVersionAtLeast(have, min);
}

export type EngineSupport =
  | { reachable: false; error: string }
  | { reachable: true; supported: boolean; version: string; apiVersion: string };

/** The engine's version against the minimum; an engine that does not answer within `timeoutMs` is unreachable. */
export async function engineSupport(docker: Docker, timeoutMs = 5_000): Promise<EngineSupport> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const v = await Promise.race([
      docker.version(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs / 1000} s`)), timeoutMs);
      }),
    ]);
    return { reachable: true, supported: apiAtLeast(v.ApiVersion), version: v.Version, apiVersion: v.ApiVersion };
  } catch (err) {
    return { reachable: false, error: err instanceof Error ? err.message : String(err) };
  } finally {
    clearTimeout(timer);
  }
}

/** What an operator reads when the engine is too old. */
export function tooOldMessage(s: { version: string; apiVersion: string }): string {
  return `the Docker engine is ${s.version} (API ${s.apiVersion}); the installer needs Docker Engine ${MIN_ENGINE_RELEASE} (API ${MIN_ENGINE_API}) or newer: upgrade the engine, then start the installer again (docs/engines.md)`;
}

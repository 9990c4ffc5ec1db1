// The self-update's helper container (docs/adr/0010-self-update.md): its spec (the new tag's image,
// identical-path mounts, the fixed command), its budget, and the engine operations on it: spawn,
// wait (bounded by its deadline), stop, read what it printed, remove.
import type Docker from 'dockerode';
import path from 'node:path';
import { engineMessage, statusOf } from './engine-errors.ts';

export const HELPER_NAME = 'installer-self-updater';
export const HELPER_SCRIPT = '/usr/src/app/scripts/self-update.sh';
/** The backend's compose service: the helper's `--wait` judges only it and its dependencies. */
export const BACKEND_SERVICE = 'backend';
/** How long one engine request about the helper (inspect, logs) may take. */
export const ENGINE_REQUEST_TIMEOUT_MS = 10_000;

/** What the helper's spec is made of (a part of the self-update's settings). */
export interface HelperSettings {
  /** `<registry>/<image name>`, e.g. `registry.example.com/installer`. */
  repository: string;
  project: string;
  workDir: string;
  composeFile: string;
  stagingRoot: string;
  rollbackTag: string;
  dockerSocket: string;
  /** Test-only override of the helper's 300 s wait (SELF_UPDATE_WAIT_TIMEOUT in the helper). */
  waitTimeoutSeconds?: number | undefined;
  /** How long the helper waits for the migrations of the new image (SELF_UPDATE_INIT_TIMEOUT in the helper); unset: HELPER_INIT_TIMEOUT_SECONDS. */
  initTimeoutSeconds?: number | undefined;
}

/** The helper's wait for the new image's one-shot init (the migrations) unless SELF_UPDATE_INIT_TIMEOUT_SECONDS says otherwise. */
export const HELPER_INIT_TIMEOUT_SECONDS = 900;
/**
 * What the helper's other bounded steps may take beyond its two waits and the init's: asking
 * compose for the services (60 s), starting the init (120 s), finding it (60 s), reading its output
 * (60 s), removing it when it overran (60 s), and the create before each of the two `--wait`s
 * (120 s each) (scripts/self-update.sh).
 */
export const HELPER_STEPS_SECONDS = 600;

/** The longest the helper can run: its init's wait, two switch waits and every other bounded step. */
export function helperBudgetMs(s: Pick<HelperSettings, 'waitTimeoutSeconds' | 'initTimeoutSeconds'>): number {
  return ((s.initTimeoutSeconds ?? HELPER_INIT_TIMEOUT_SECONDS) + 2 * (s.waitTimeoutSeconds ?? 300) + HELPER_STEPS_SECONDS) * 1000;
}

/** `<staging-root>/self-update/docker-compose.yml`: `/var/lib/installer/staging/self-update/docker-compose.yml` by default. */
export const stagedComposePath = (stagingRoot: string) => path.posix.join(stagingRoot, 'self-update', 'docker-compose.yml');

export interface HelperSpec {
  name: string;
  image: string;
  cmd: string[];
  binds: string[];
  env: string[];
  labels: Record<string, string>;
}

/**
 * The helper container of the spec: the new tag's image, three identical-path mounts, the fixed
 * command; `stagedSha256` (recorded with the request when the file was staged) is the digest the
 * helper checks the staged file against before it installs it.
 */
export function helperSpec(s: HelperSettings, target: { tag: string; digest: string }, requestId: string, stagedSha256: string | null = null): HelperSpec {
  const env: string[] = [];
  if (stagedSha256) env.push(`SELF_UPDATE_STAGED_SHA256=${stagedSha256}`);
  if (s.waitTimeoutSeconds) env.push(`SELF_UPDATE_WAIT_TIMEOUT=${s.waitTimeoutSeconds}`);
  // Always handed over: the backend's deadline for the helper counts this very wait.
  env.push(`SELF_UPDATE_INIT_TIMEOUT=${s.initTimeoutSeconds ?? HELPER_INIT_TIMEOUT_SECONDS}`);
  return {
    name: HELPER_NAME,
    image: `${s.repository}:${target.tag}`,
    cmd: ['sh', HELPER_SCRIPT, s.project, s.workDir, s.composeFile, stagedComposePath(s.stagingRoot), s.rollbackTag, target.tag, BACKEND_SERVICE],
    binds: [`${s.dockerSocket}:${s.dockerSocket}`, `${s.workDir}:${s.workDir}`, `${s.stagingRoot}:${s.stagingRoot}`],
    env,
    labels: { 'io.installer.self-update.request': requestId, 'io.installer.self-update.target': target.digest },
  };
}

export interface HelperExit {
  state: 'exited' | 'missing' | 'timed-out';
  exitCode: number | null;
  status: 'ok' | 'rolled-back' | 'failed' | null;
  switchFailure: string | null;
  rollbackFailure: string | null;
}

/** Reads the helper's own summary lines (`self-update: status …`, `… switch failed: …`, `… rollback failed: …`). */
export function parseHelperLog(text: string): Pick<HelperExit, 'status' | 'switchFailure' | 'rollbackFailure'> {
  let status: HelperExit['status'] = null;
  let switchFailure: string | null = null;
  let rollbackFailure: string | null = null;
  for (const line of text.split(/\r?\n/)) {
    let m = /^self-update: status (ok|rolled-back|failed)\b/.exec(line);
    if (m) status = m[1] as HelperExit['status'];
    m = /^self-update: switch failed: (.*)$/.exec(line);
    if (m) switchFailure = m[1]!.trim();
    m = /^self-update: rollback failed: (.*)$/.exec(line);
    if (m) rollbackFailure = m[1]!.trim();
  }
  return { status, switchFailure, rollbackFailure };
}

/** Splits the engine's multiplexed log stream (8-byte frame headers) into text. */
export function demultiplex(buf: Buffer): string {
  let out = '';
  let i = 0;
  while (i + 8 <= buf.length && (buf[i] === 0 || buf[i] === 1 || buf[i] === 2) && buf[i + 1] === 0) {
    const size = buf.readUInt32BE(i + 4);
    out += buf.subarray(i + 8, i + 8 + size).toString('utf8');
    i += 8 + size;
  }
  return i === 0 ? buf.toString('utf8') : out;
}

/** The most lines of the helper's output an update's transcript keeps (its last ones). */
export const HELPER_OUTPUT_MAX_LINES = 20_000;

/** The helper's output as transcript lines: split, trailing blank line dropped, the last HELPER_OUTPUT_MAX_LINES. */
export function helperLines(text: string): string[] {
  const lines = text.split(/\r?\n/);
  if (lines.at(-1) === '') lines.pop();
  return lines.length > HELPER_OUTPUT_MAX_LINES ? lines.slice(-HELPER_OUTPUT_MAX_LINES) : lines;
}

/** The helper container on the engine. */
export class HelperContainers {
  constructor(private readonly docker: Docker) {}

  /** Force-removes a leftover helper; false when there was none. */
  async remove(): Promise<boolean> {
    try {
      await this.docker.getContainer(HELPER_NAME).remove({ force: true });
      return true;
    } catch (err) {
      if (statusOf(err) === 404) return false;
      throw new Error(`cannot remove the leftover ${HELPER_NAME}: ${engineMessage(err)}`);
    }
  }

  /** Kills a helper still running past its deadline and waits (bounded) until it has exited; its output stays readable. */
  async stop(id: string | null, signal: AbortSignal): Promise<void> {
    const c = this.docker.getContainer(id ?? HELPER_NAME);
    const bounded = () => ({ abortSignal: AbortSignal.any([signal, AbortSignal.timeout(ENGINE_REQUEST_TIMEOUT_MS)]) }) as object;
    try {
      await c.kill(bounded());
    } catch (err) {
      // Gone, or exited in the meantime: nothing runs any more.
      if (statusOf(err) === 404 || statusOf(err) === 409) return;
      throw new Error(`cannot stop ${HELPER_NAME}: ${engineMessage(err)}`);
    }
    await c.wait(bounded()).catch((err: unknown) => {
      if (statusOf(err) !== 404) throw new Error(`${HELPER_NAME} was killed but did not exit: ${engineMessage(err)}`);
    });
  }

  /** Creates and starts the helper; returns its container id. */
  async spawn(spec: HelperSpec): Promise<string> {
    let id: string | undefined;
    try {
      const c = await this.docker.createContainer({
        name: spec.name,
        Image: spec.image,
        Cmd: spec.cmd,
        Env: spec.env,
        Labels: spec.labels,
        // The helper would inherit the image's HEALTHCHECK of the backend (rig.md).
        Healthcheck: { Test: ['NONE'] },
        HostConfig: { Binds: spec.binds, AutoRemove: false, RestartPolicy: { Name: 'no' } },
      });
      id = c.id;
      await c.start();
      return c.id;
    } catch (err) {
      if (id) await this.docker.getContainer(id).remove({ force: true }).catch(() => {});
      throw new Error(`cannot start ${spec.name} from ${spec.image}: ${engineMessage(err)}`);
    }
  }

  /** The helper container labelled with a request, if it exists; `created`: never started. */
  async of(requestId: string): Promise<{ id: string; running: boolean; created?: boolean } | null> {
    const list = await this.docker.listContainers({ all: true, filters: { label: [`io.installer.self-update.request=${requestId}`] } });
    const c = list[0];
    return c ? { id: c.Id, running: c.State === 'running', created: c.State === 'created' } : null;
  }

  /** Waits until the helper has exited (or the deadline passed) and reads what it printed. */
  async wait(id: string | null, opts: { deadline: Date | null; signal: AbortSignal }): Promise<HelperExit> {
    const c = this.docker.getContainer(id ?? HELPER_NAME);
    const missing: HelperExit = { state: 'missing', exitCode: null, status: null, switchFailure: null, rollbackFailure: null };
    // Every request but the wait itself is bounded: an engine that takes a request and never
    // answers must fail this attempt (which is retried), not hold the boot reconciliation.
    const bounded = () => ({ abortSignal: AbortSignal.any([opts.signal, AbortSignal.timeout(ENGINE_REQUEST_TIMEOUT_MS)]) }) as object;
    let info: Docker.ContainerInspectInfo;
    try {
      info = await c.inspect(bounded());
    } catch (err) {
      if (statusOf(err) === 404) return missing;
      throw err;
    }
    let timedOut = false;
    if (info.State.Running) {
      const ms = opts.deadline ? opts.deadline.getTime() - Date.now() : Number.POSITIVE_INFINITY;
      if (ms <= 0) timedOut = true;
      else {
        let timer: NodeJS.Timeout | undefined;
        const stop = new AbortController();
        const onAbort = () => stop.abort();
        opts.signal.addEventListener('abort', onAbort, { once: true });
        try {
          const waited = c.wait({ abortSignal: stop.signal }).then(() => 'exited' as const);
          const deadline = Number.isFinite(ms) ? new Promise<'timed-out'>((r) => (timer = setTimeout(() => r('timed-out'), ms))) : new Promise<never>(() => {});
          timedOut = (await Promise.race([waited, deadline])) === 'timed-out';
        } catch (err) {
          if (statusOf(err) === 404) return missing;
          throw err;
        } finally {
          clearTimeout(timer);
          opts.signal.removeEventListener('abort', onAbort);
          stop.abort();
        }
      }
      if (opts.signal.aborted) throw new Error('stopped waiting for the helper');
      try {
        info = await c.inspect(bounded());
      } catch (err) {
        if (statusOf(err) === 404) return missing;
        throw err;
      }
    }
    const raw = (await c.logs({ stdout: true, stderr: true, follow: false, tail: 400, ...bounded() })) as unknown as Buffer;
    const parsed = parseHelperLog(demultiplex(Buffer.isBuffer(raw) ? raw : Buffer.from(String(raw))));
    return {
      state: timedOut ? 'timed-out' : 'exited',
      exitCode: timedOut ? null : info.State.ExitCode,
      ...parsed,
    };
  }

  /** Everything the helper printed (stdout and stderr, in order), as lines; at most the last HELPER_OUTPUT_MAX_LINES. */
  async output(id: string | null, signal: AbortSignal): Promise<string[]> {
    const c = this.docker.getContainer(id ?? HELPER_NAME);
    const abortSignal = AbortSignal.any([signal, AbortSignal.timeout(ENGINE_REQUEST_TIMEOUT_MS)]);
    const raw = (await c.logs({ stdout: true, stderr: true, follow: false, abortSignal } as object as { follow: false; stdout: true; stderr: true })) as unknown as Buffer;
    return helperLines(demultiplex(Buffer.isBuffer(raw) ? raw : Buffer.from(String(raw))));
  }
}

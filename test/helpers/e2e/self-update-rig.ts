// Self-update on the real rig: installer images built here and derived from the good one
// (test/fixtures/self-update), pushed to 127.0.0.1:5000 under a namespace of their own so that
// nothing else on the registry is touched, the real installer stack, and a client of its API.
import { mkdirSync, rmdirSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { ROOT } from '../shared/process.ts';
import { docker, must, REGISTRY, retryOnSharedEngine, run } from './rig.ts';
import { startStack, type Stack } from './stack.ts';
import { eventually } from '../shared/eventually.ts';
import { parseSse, type SseMessage } from '../shared/sse.ts';

export const FIXTURES = path.join(ROOT, 'test/fixtures/self-update');
export type Variant = 'good' | 'unhealthy' | 'migrates-then-unhealthy' | 'crashes' | 'ships-new-compose';
/** The default staging root (deploy/.env.example; docs/adr/0041-trusted-sources-and-staging.md): the staged file is /var/lib/installer/staging/self-update/docker-compose.yml. */
export const STAGING_ROOT = '/var/lib/installer/staging';
export const STAGED_FILE = `${STAGING_ROOT}/self-update/docker-compose.yml`;
export const HELPER = 'installer-self-updater';

/** The registry digest of a local image for a repository (compare digests, not names). */
export async function localDigest(ref: string): Promise<string> {
  const repo = ref.slice(0, ref.lastIndexOf(':'));
  const out = await docker(['image', 'inspect', '--format', '{{range .RepoDigests}}{{println .}}{{end}}', ref]);
  const line = out.split('\n').find((l) => l.startsWith(`${repo}@`));
  if (!line) throw new Error(`${ref} has no digest in ${repo}:\n${out}`);
  return line.slice(line.indexOf('@') + 1);
}

export async function pushAs(source: string, target: string): Promise<string> {
  await docker(['tag', source, target]);
  await docker(['push', '-q', target]);
  return localDigest(target);
}

export class Images {
  readonly namespace = `su-${randomBytes(3).toString('hex')}`;
  /** INSTALLER_REGISTRY of the stack: a registry host with a path of its own. */
  readonly registry = `${REGISTRY}/${this.namespace}`;
  readonly repo = `${this.registry}/installer`;
  readonly digests = new Map<string, string>();
  private readonly extraRefs = new Set<string>();

  ref(tag: string): string {
    return `${this.repo}:${tag}`;
  }

  /**
   * Builds the installer from this checkout and pushes it as `tag`. The build context lives in a
   * cache of its own: other suites building at the same time rewrite the shared one mid-copy.
   */
  async buildBase(tag: string): Promise<string> {
    const ref = this.ref(tag);
    const out = await retryOnSharedEngine(`building ${ref}`, () =>
      must('bash', [path.join(ROOT, 'scripts/build-image.sh'), '--rig', '--push', ref], {
        env: { INSTALLER_BUILD_CACHE: path.join(ROOT, '.artifacts/image-build-self-update') },
        timeoutMs: 10 * 60_000,
      }),
    );
    const d = out.split('\n').find((l) => l.startsWith(`digest ${ref} sha256:`))?.split(' ')[2];
    if (!d) throw new Error(`no digest reported for ${ref}:\n${out}`);
    this.digests.set(tag, d);
    return d;
  }

  /** Builds a variant FROM another tag of ours and pushes it as `tag`. */
  async buildVariant(variant: Variant, from: string, tag: string): Promise<string> {
    const ref = this.ref(tag);
    const d = await retryOnSharedEngine(`building ${ref}`, async () => {
      await docker(
        ['build', '-q', '-f', path.join(FIXTURES, `${variant}.Dockerfile`), '--build-arg', `BASE=${this.ref(from)}`, '--build-arg', `VARIANT=${variant}-${tag}-${this.namespace}`, '-t', ref, FIXTURES],
        { env: { DOCKER_BUILDKIT: '0' }, timeoutMs: 5 * 60_000 },
      );
      await docker(['push', '-q', ref]);
      return localDigest(ref);
    });
    this.digests.set(tag, d);
    return d;
  }

  /** Publishes `tag` as `<channel>-latest` in the registry. */
  async publish(tag: string, channel = 'dev'): Promise<string> {
    const d = await pushAs(this.ref(tag), this.ref(`${channel}-latest`));
    this.digests.set(`${channel}-latest`, d);
    return d;
  }

  /** A local-only tag (never pushed), e.g. a failing `rollback`. */
  async tagLocal(source: string, target: string): Promise<void> {
    await docker(['tag', source, target]);
    this.extraRefs.add(target);
  }

  /** Removes every local tag of the namespace and its manifests from the registry. */
  async cleanup(): Promise<void> {
    const out = await run('docker', ['image', 'ls', '--format', '{{.Repository}}:{{.Tag}}']);
    const refs = out.stdout.split('\n').filter((r) => r.includes(`/${this.namespace}/`) || this.extraRefs.has(r));
    if (refs.length) await run('docker', ['rmi', '-f', ...new Set(refs)]);
    for (const d of new Set(this.digests.values())) {
      await fetch(`http://${REGISTRY}/v2/${this.namespace}/installer/manifests/${d}`, { method: 'DELETE' }).catch(() => {});
    }
  }
}

export interface InstallerUnderTest {
  stack: Stack;
  token: string;
  publishedFile: string;
  publishedText: string;
  get(path: string): Promise<{ status: number; body: unknown }>;
  post(path: string, body?: unknown): Promise<{ status: number; body: unknown }>;
  /** Polls until the backend answers and `fn` holds; tolerates the restart gap. */
  until<T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs?: number): Promise<T>;
  down(): Promise<void>;
}

/** The installer stack on `tag`, its published compose file under the staging root (file:// URL). */
export async function startInstaller(images: Images, tag: string, env: Record<string, string> = {}, channel: 'dev' | 'prod' = 'dev'): Promise<InstallerUnderTest> {
  const publishedDir = path.join(STAGING_ROOT, `published-${images.namespace}`);
  mkdirSync(publishedDir, { recursive: true });
  const publishedFile = path.join(publishedDir, 'docker-compose.yml');
  const source = channel === 'dev' ? 'deploy/docker-compose.dev.yml' : 'deploy/docker-compose.yml';
  const publishedText = `${readFileSync(path.join(ROOT, source), 'utf8')}# published for ${images.namespace}\n`;
  writeFileSync(publishedFile, publishedText);
  const removeStaging = () => {
    rmSync(publishedDir, { recursive: true, force: true });
    rmSync(path.join(STAGING_ROOT, 'self-update'), { recursive: true, force: true });
    try {
      rmdirSync(STAGING_ROOT); // only when empty: nothing else of the host's is removed
    } catch {
      /* not empty or already gone */
    }
  };
  let stack: Stack;
  try {
    stack = await startStack({
      version: tag,
      channel,
      env: { INSTALLER_REGISTRY: images.registry, STAGING_ROOT, PUBLISHED_COMPOSE_URL: `file://${publishedFile}`, SELF_UPDATE_WAIT_TIMEOUT_SECONDS: '90', ...env },
    });
  } catch (err) {
    removeStaging();
    throw err;
  }
  const token = await stack.login('admin', await stack.adminPassword());
  const call = async (method: string, p: string, body?: unknown) => {
    const res = await fetch(`${stack.baseUrl}${p}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(120_000),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    return { status: res.status, body: parsed };
  };
  return {
    stack,
    token,
    publishedFile,
    publishedText,
    get: (p) => call('GET', p),
    post: (p, body) => call('POST', p, body),
    until: (what, fn, timeoutMs = 180_000) => eventually(fn, what, timeoutMs, 250),
    async down() {
      await stack.down();
      await run('docker', ['rm', '-f', HELPER]);
      removeStaging();
    },
  };
}

export interface HelperState {
  exitCode: number;
  running: boolean;
  cmd: string[];
  image: string;
  binds: string[];
  healthcheck: string[] | null;
  autoRemove: boolean;
  id: string;
}

export async function helperState(): Promise<HelperState | null> {
  const r = await run('docker', ['inspect', HELPER]);
  if (r.code !== 0) return null;
  const c = JSON.parse(r.stdout)[0];
  return {
    id: c.Id,
    exitCode: c.State.ExitCode,
    running: c.State.Running,
    cmd: c.Config.Cmd,
    image: c.Config.Image,
    binds: c.HostConfig.Binds,
    healthcheck: c.Config.Healthcheck?.Test ?? null,
    autoRemove: c.HostConfig.AutoRemove,
  };
}

/** Waits for the helper to exit and returns its exit code; a non-zero one prints the helper's output with the test's. */
export async function helperExit(timeoutMs = 300_000): Promise<number> {
  const code = Number((await docker(['wait', HELPER], { timeoutMs })).trim());
  if (code !== 0) process.stderr.write(`${HELPER} exited ${code}; its output:\n${await helperLogs()}\n`);
  return code;
}

/** A command in installer-postgres; fails the test loudly when it fails. */
export async function inPostgres(args: string[], user = 'root'): Promise<string> {
  const r = await run('docker', ['exec', '-u', user, 'installer-postgres', ...args]);
  if (r.code !== 0) throw new Error(`docker exec installer-postgres ${args.join(' ')} failed (${r.code}): ${r.stderr}`);
  return r.stdout;
}

/** One query as the installer's user in its database, unaligned and without headers. */
export const psql = async (query: string) => (await inPostgres(['psql', '-U', 'installer', '-d', 'installer', '-tA', '-c', query], 'postgres')).trim();

export const helperLogs = async () => {
  const r = await run('docker', ['logs', HELPER]);
  return r.stdout + r.stderr;
};

/**
 * An update's transcript replayed through GET /api/deployment/jobs/{jobId}/logs, to its end (the
 * stream ends after `finished`; one that does not end within the bound fails the test).
 */
export async function transcript(i: InstallerUnderTest, jobId: string, timeoutMs = 60_000): Promise<SseMessage[]> {
  const res = await fetch(`${i.stack.baseUrl}/api/deployment/jobs/${jobId}/logs`, {
    headers: { authorization: `Bearer ${i.token}`, accept: 'text/event-stream' },
    signal: AbortSignal.timeout(timeoutMs),
  });
  if (res.status !== 200) throw new Error(`the transcript of job ${jobId}: HTTP ${res.status} ${await res.text()}`);
  const events = parseSse(await res.text());
  if (events.at(-1)?.event !== 'finished') throw new Error(`the transcript of job ${jobId} did not end with finished: ${JSON.stringify(events.slice(-3))}`);
  return events;
}

/** The helper's lines in a transcript: the output events read from its exited container after the restart. */
export const helperLinesOf = (events: SseMessage[]) =>
  events.filter((e) => e.event === 'output' && e.data.source === HELPER).map((e) => String(e.data.line));

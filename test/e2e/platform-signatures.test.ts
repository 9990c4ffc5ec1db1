// The platform's images checked against the platform's signing keys in the jobs that pull or start
// them (docs/adr/0053-signed-builds.md, "The platform's images"): the installer in process with its
// controllers, a compose project on the real engine, its images real builds in the rig's registry,
// signed (or not) by the real signer with keys made here.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startTestApp, type TestApp } from '../helpers/api/app.ts';
import { docker, REGISTRY, run, uniqueName } from '../helpers/e2e/rig.ts';
import { makeKeyPair, pushBuild, signBuild } from '../helpers/e2e/signing.ts';
import { lines, requestJobAndFollow } from '../helpers/e2e/jobs.ts';
import { HeldTemplateServer } from '../helpers/e2e/template-server.ts';
import type { SseMessage } from '../helpers/shared/sse.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'platform-signatures-'));
const repo = `${REGISTRY}/${uniqueName('platform-sig-t')}/app`;
const builds: Record<'first' | 'second' | 'unsigned' | 'stranger', string> = { first: '', second: '', unsigned: '', stranger: '' };
const image = (b: keyof typeof builds) => `${repo}:${b}`;
let keyFile = '';

// Two services, each running the image its variable names; `side` depends on nothing.
const COMPOSE = `services:
  app:
    image: \${APP_IMAGE}
    command: ["sh", "-c", "trap 'exit 0' TERM; while sleep 1; do :; done"]
  side:
    image: \${SIDE_IMAGE}
    command: ["sh", "-c", "trap 'exit 0' TERM; while sleep 1; do :; done"]
`;

interface Platform {
  t: TestApp;
  project: string;
  dir: string;
  /** The platform's .env names these images. */
  use(app: keyof typeof builds, side: keyof typeof builds): void;
  imageOf(service: string): Promise<string | null>;
  close(): Promise<void>;
}

async function platform(env: Record<string, string>): Promise<Platform> {
  const project = uniqueName('platform-sig');
  const pdir = mkdtempSync(path.join(dir, 'platform-'));
  writeFileSync(path.join(pdir, 'docker-compose.yml'), COMPOSE);
  const t = await startTestApp({ controllers: true, env: { PLATFORM_DIR: pdir, PLATFORM_PROJECT: project, ...env } });
  return {
    t,
    project,
    dir: pdir,
    use: (app, side) => writeFileSync(path.join(pdir, '.env'), `APP_IMAGE=${image(app)}\nSIDE_IMAGE=${image(side)}\n`),
    async imageOf(service) {
      const id = (await docker(['ps', '-aq', '--filter', `label=com.docker.compose.project=${project}`, '--filter', `label=com.docker.compose.service=${service}`])).trim();
      return id ? (await docker(['inspect', '-f', '{{.Config.Image}}', id])).trim() : null;
    },
    async close() {
      await t.close();
      await run('docker', ['compose', '-p', project, '-f', path.join(pdir, 'docker-compose.yml'), 'down', '-t', '1'], { cwd: pdir });
    },
  };
}

const warnings = (events: SseMessage[]) => events.filter((e) => e.event === 'warning').map((e) => String(e.data.message));
/** The line a verified image writes: the key is named by its file and fingerprint. */
const verifiedLine = (service: string, b: keyof typeof builds) =>
  new RegExp(`^signature: ${service} \\(${esc(image(b))}\\): the build ${esc(builds[b].slice(0, 19))}… is signed by platform\\.pub \\([0-9a-f]{16}\\)$`);

beforeAll(async () => {
  keyFile = await makeKeyPair(dir, 'platform');
  await makeKeyPair(dir, 'stranger');
  for (const b of Object.keys(builds) as (keyof typeof builds)[]) builds[b] = await pushBuild(dir, repo, b);
  await signBuild(dir, repo, builds.first, 'platform');
  await signBuild(dir, repo, builds.second, 'platform');
  await signBuild(dir, repo, builds.stranger, 'stranger');
  // Pulled by the jobs, not left from the pushes.
  await docker(['rmi', ...Object.keys(builds).map((b) => image(b as keyof typeof builds))]);
}, 600_000);
afterAll(async () => {
  await run('docker', ['rmi', '-f', ...Object.keys(builds).map((b) => image(b as keyof typeof builds))]);
  rmSync(dir, { recursive: true, force: true });
});

describe('under PLATFORM_SIGNATURE_POLICY=require (the default with a key)', () => {
  let p: Platform;
  const templates = new HeldTemplateServer();
  beforeAll(async () => {
    const tdir = mkdtempSync(path.join(dir, 'templates-'));
    writeFileSync(path.join(tdir, 'docker-compose.yml'), COMPOSE);
    writeFileSync(path.join(tdir, '.env.template'), `APP_IMAGE=${image('first')}\nSIDE_IMAGE=${image('second')}\n`);
    await templates.start({ 'docker-compose.yml': path.join(tdir, 'docker-compose.yml'), '.env.template': path.join(tdir, '.env.template') });
    p = await platform({ PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE: keyFile, PLATFORM_TEMPLATES_URL: templates.url });
  }, 300_000);
  afterAll(async () => {
    await p?.close();
    templates.close();
  });

  it('a deploy of signed images pulls, checks each once, and starts them', async () => {
    const { events, finished } = await requestJobAndFollow(p.t, 'deploy');
    expect(finished, JSON.stringify(events.slice(-6))).toMatchObject({ outcome: 'completed', exitCode: 0 });
    expect(events.filter((e) => e.event === 'phase').map((e) => e.data.phase)).toEqual(['started', 'prepare', 'pull', 'up', 'prune']);
    // Checked after the pull and again before the up; each verdict written once.
    const verdicts = lines(events).filter((l) => l.startsWith('signature:'));
    expect(verdicts.sort()).toEqual([expect.stringMatching(verifiedLine('app', 'first')), expect.stringMatching(verifiedLine('side', 'second'))]);
    expect(warnings(events)).toEqual([]);
    expect(await p.imageOf('app')).toBe(image('first'));
    expect(await p.imageOf('side')).toBe(image('second'));
  });

  it('an unsigned image fails the pull that fetched it, and a compose-up starts nothing with it', async () => {
    p.use('first', 'unsigned');
    const pulled = await requestJobAndFollow(p.t, 'pull');
    expect(pulled.finished.outcome).toBe('failed');
    expect(String(pulled.finished.detail)).toMatch(
      new RegExp(`^pull refused: the image ${esc(image('unsigned'))} of service side is not verified \\(no-signature\\): the build ${builds.unsigned.slice(0, 19)}… has no signature in .+; PLATFORM_SIGNATURE_POLICY=require refuses it; it is pulled, and nothing was started with it$`),
    );
    expect(warnings(pulled.events).some((w) => w.startsWith(`signature: side (${image('unsigned')}) is not verified (no-signature)`))).toBe(true);
    // The image is on the engine now; starting it is what is refused.
    const up = await requestJobAndFollow(p.t, 'compose-up');
    expect(up.finished.outcome).toBe('failed');
    expect(String(up.finished.detail)).toMatch(/^up-pulled refused: the image .+ of service side is not verified \(no-signature\): .+; nothing was started$/);
    expect(up.events.filter((e) => e.event === 'phase').map((e) => e.data.phase)).toEqual(['started']);
    expect(await p.imageOf('side')).toBe(image('second'));
    const row = await p.t.db.database.db.selectFrom('deployment_actions').selectAll().where('job_id', '=', up.jobId).executeTakeFirstOrThrow();
    expect(row).toMatchObject({ kind: 'compose-up', status: 'failed', exit_code: null });
    // A service that neither is nor needs the unsigned image is started.
    const app = await requestJobAndFollow(p.t, 'compose-up', ['app']);
    expect(app.finished.outcome, JSON.stringify(app.events.slice(-4))).toBe('completed');
    expect(lines(app.events)).toContainEqual(expect.stringMatching(verifiedLine('app', 'first')));
  });

  it('an image signed by a key the platform does not trust is refused by name', async () => {
    p.use('first', 'stranger');
    const { finished } = await requestJobAndFollow(p.t, 'pull', ['side']);
    expect(finished.outcome).toBe('failed');
    expect(String(finished.detail)).toContain(`the image ${image('stranger')} of service side is not verified (unknown-key): the build ${builds.stranger.slice(0, 19)}… is signed, but by no trusted key (platform.pub`);
    expect(await p.imageOf('side')).toBe(image('second'));
  });
});

describe('other policies', () => {
  it('under warn an unsigned image is written down and runs', async () => {
    const p = await platform({ PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE: keyFile, PLATFORM_SIGNATURE_POLICY: 'warn' });
    try {
      p.use('first', 'unsigned');
      await requestJobAndFollow(p.t, 'pull');
      const { events, finished } = await requestJobAndFollow(p.t, 'compose-up');
      expect(finished.outcome, JSON.stringify(events.slice(-4))).toBe('completed');
      expect(warnings(events)).toEqual([expect.stringMatching(new RegExp(`^signature: side \\(${esc(image('unsigned'))}\\) is not verified \\(no-signature\\): .+; PLATFORM_SIGNATURE_POLICY=warn lets it run$`))]);
      expect(lines(events)).toContainEqual(expect.stringMatching(verifiedLine('app', 'first')));
      expect(await p.imageOf('side')).toBe(image('unsigned'));
    } finally {
      await p.close();
    }
  });

  it('with no platform key nothing is checked, and a job says nothing of signatures', async () => {
    const p = await platform({});
    try {
      p.use('unsigned', 'stranger');
      await requestJobAndFollow(p.t, 'pull');
      const { events, finished } = await requestJobAndFollow(p.t, 'compose-up');
      expect(finished.outcome).toBe('completed');
      expect([...lines(events), ...warnings(events)].filter((l) => l.includes('signature'))).toEqual([]);
      expect(await p.imageOf('app')).toBe(image('unsigned'));
    } finally {
      await p.close();
    }
  });
});

function esc(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

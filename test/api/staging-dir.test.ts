// The staging directory the self-update helper installs its compose file from is one only root can
// write (docs/adr/0041-trusted-sources-and-staging.md): the backend makes it with mode 0700, and
// refuses one another uid owns, one group or others may write, a symbolic link, or one under a
// directory another user could change. The files are real, on this machine's disk; the tests run
// as root, so "another user" is uid 12345. Then the same through the API, on a listening socket:
// a preflight whose staging directory is not safe aborts with the reason and changes nothing.
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Docker from 'dockerode';
import { DockerSelfUpdateEngine } from '../../src/adapters/self-update.ts';
import { stagedComposePath } from '../../src/adapters/self-update-helper.ts';
import { sha256Of } from '../../src/adapters/compose-source.ts';
import { FakeEngine, REPO, startSelfUpdateApp, type SelfUpdateApp } from '../helpers/api/self-update.ts';
import { TEST_SECRETS } from '../helpers/api/app.ts';
import { listSelfUpdates } from '../../src/state/self-update.ts';

const COMPOSE = 'services:\n  backend: { image: new }\n';
const OTHER = 12345;

if (process.getuid?.() !== 0) throw new Error('these tests change owners (chown): they run as root, as CI and the rig do');

let base: string;
let root: string;
beforeEach(() => {
  base = mkdtempSync(path.join(tmpdir(), 'staging-'));
  root = path.join(base, 'staging');
});
afterEach(() => rmSync(base, { recursive: true, force: true }));

const engineFor = (stagingRoot: string) =>
  new DockerSelfUpdateEngine(new Docker({ socketPath: '/nonexistent.sock' }), {
    repository: 'registry.test/installer', project: 'installer', workDir: '/opt/installer', composeFile: 'docker-compose.yml', stagingRoot,
    rollbackTag: 'rollback', dockerSocket: '/var/run/docker.sock',
  }, {} as never);
const mode = (p: string) => statSync(p).mode & 0o7777;

describe('the backend stages the compose file', () => {
  it('in directories it makes with mode 0700, as a file of mode 0600, and reads it back', async () => {
    const e = engineFor(root);
    expect(await e.readStaged()).toBeNull();
    await e.writeStaged(COMPOSE);
    expect(await e.readStaged()).toBe(COMPOSE);
    expect(mode(root)).toBe(0o700);
    expect(mode(path.join(root, 'self-update'))).toBe(0o700);
    expect(mode(stagedComposePath(root))).toBe(0o600);
    expect(readdirSync(path.join(root, 'self-update'))).toEqual(['docker-compose.yml']);
    await e.removeStaged();
    expect(await e.readStaged()).toBeNull();
  });

  it('accepts an existing root-owned directory that only root may write (0755, as the engine makes a bind mount source)', async () => {
    mkdirSync(root, { mode: 0o755 });
    chmodSync(root, 0o755);
    await engineFor(root).writeStaged(COMPOSE);
    expect(mode(root)).toBe(0o755);
  });

  it('refuses a staging root another uid owns (one made in advance by a host user), and writes nothing', async () => {
    mkdirSync(root, { mode: 0o700 });
    chownSync(root, OTHER, OTHER);
    const e = engineFor(root);
    await expect(e.writeStaged(COMPOSE)).rejects.toThrow(`STAGING_ROOT: ${root} is owned by uid ${OTHER}, not by uid 0; another user could replace the compose file a self-update installs and runs as root`);
    await expect(e.readStaged()).rejects.toThrow(`is owned by uid ${OTHER}`);
    await expect(e.removeStaged()).rejects.toThrow(`is owned by uid ${OTHER}`);
    expect(readdirSync(root)).toEqual([]);
  });

  it('refuses a staged file\'s directory another uid owns', async () => {
    mkdirSync(path.join(root, 'self-update'), { recursive: true, mode: 0o700 });
    chownSync(path.join(root, 'self-update'), OTHER, OTHER);
    await expect(engineFor(root).writeStaged(COMPOSE)).rejects.toThrow(`${path.join(root, 'self-update')} is owned by uid ${OTHER}`);
  });

  it('refuses a staging root group or others may write', async () => {
    mkdirSync(root, { mode: 0o700 });
    chmodSync(root, 0o703);
    await expect(engineFor(root).writeStaged(COMPOSE)).rejects.toThrow(`${root} is writable by others (mode 0703)`);
    chmodSync(root, 0o770);
    await expect(engineFor(root).writeStaged(COMPOSE)).rejects.toThrow(`${root} is writable by its group (mode 0770)`);
    expect(existsSync(stagedComposePath(root))).toBe(false);
  });

  it('refuses a staging root or staged directory that is a symbolic link, and writes nothing through it', async () => {
    const target = path.join(base, 'target');
    mkdirSync(target, { mode: 0o700 });
    symlinkSync(target, root);
    await expect(engineFor(root).writeStaged(COMPOSE)).rejects.toThrow(`${root} is a symbolic link`);
    rmSync(root);
    mkdirSync(root, { mode: 0o700 });
    symlinkSync(target, path.join(root, 'self-update'));
    await expect(engineFor(root).writeStaged(COMPOSE)).rejects.toThrow(`${path.join(root, 'self-update')} is a symbolic link`);
    expect(readdirSync(target)).toEqual([]);
  });

  it('refuses a staged file that is a symbolic link or another uid\'s when reading it back', async () => {
    const e = engineFor(root);
    await e.writeStaged(COMPOSE);
    const file = stagedComposePath(root);
    writeFileSync(path.join(base, 'elsewhere.yml'), 'services: {}\n');
    renameSync(file, `${file}.old`);
    symlinkSync(path.join(base, 'elsewhere.yml'), file);
    await expect(e.readStaged()).rejects.toThrow(`${file} is a symbolic link`);
    rmSync(file);
    renameSync(`${file}.old`, file);
    chownSync(file, OTHER, OTHER);
    await expect(e.readStaged()).rejects.toThrow(`${file} is owned by uid ${OTHER}, not by uid 0`);
  });

  it('refuses a directory above the staging root that another uid owns, or that others may write without the sticky bit', async () => {
    const above = path.join(base, 'above');
    mkdirSync(above, { mode: 0o755 });
    chownSync(above, OTHER, OTHER);
    const nested = path.join(above, 'staging');
    await expect(engineFor(nested).writeStaged(COMPOSE)).rejects.toThrow(`${above}, above it, is owned by uid ${OTHER}`);
    chownSync(above, 0, 0);
    chmodSync(above, 0o777);
    await expect(engineFor(nested).writeStaged(COMPOSE)).rejects.toThrow(`${above}, above it, is writable by group or others without the sticky bit`);
    // Sticky, as /tmp and /var/tmp are: nobody but the owner may rename what is in it.
    chmodSync(above, 0o1777);
    await engineFor(nested).writeStaged(COMPOSE);
    expect(lstatSync(nested).uid).toBe(0);
  });

  it('checks a directory above it through a symbolic link as it really is', async () => {
    const real = path.join(base, 'real');
    mkdirSync(real, { mode: 0o755 });
    chownSync(real, OTHER, OTHER);
    symlinkSync(real, path.join(base, 'link'));
    await expect(engineFor(path.join(base, 'link', 'staging')).writeStaged(COMPOSE)).rejects.toThrow(`${real}, above it, is owned by uid ${OTHER}`);
  });
});

describe('POST /api/system/self-update with a staging directory another uid owns', () => {
  let t: SelfUpdateApp;
  let url: string;

  /** The in-memory engine of the API tests, with the staged file on disk as the real adapter keeps it. */
  class StagingOnDisk extends FakeEngine {
    constructor(private readonly disk: DockerSelfUpdateEngine) {
      super();
    }
    override async readStaged(): Promise<string | null> {
      this.calls.push('readStaged');
      return this.disk.readStaged();
    }
    override async writeStaged(content: string): Promise<void> {
      this.calls.push('writeStaged');
      await this.disk.writeStaged(content);
      this.staged = content;
    }
    override async removeStaged(): Promise<void> {
      this.calls.push('removeStaged');
      await this.disk.removeStaged();
      this.staged = null;
    }
  }

  afterAll(async () => t?.close({ drop: true }));

  it('aborts preflight at staging with the reason, changes nothing, and starts once the directory is root\'s', async () => {
    const apiBase = mkdtempSync(path.join(tmpdir(), 'staging-api-'));
    const stagingRoot = path.join(apiBase, 'staging');
    mkdirSync(stagingRoot, { mode: 0o755 });
    chownSync(stagingRoot, OTHER, OTHER);
    const engine = new StagingOnDisk(engineFor(stagingRoot));
    t = await startSelfUpdateApp({ engine });
    url = `${await t.app.listen({ host: '127.0.0.1', port: 0 })}/api/system/self-update`;
    const headers = { authorization: `Bearer ${TEST_SECRETS.SERVICE_TOKEN}`, 'x-actor-user-id': 'amy' };

    const res = await fetch(url, { method: 'POST', headers });
    const body = (await res.json()) as { message: string };
    expect(res.status, JSON.stringify(body)).toBe(503);
    expect(body.message).toContain(`STAGING_ROOT: ${stagingRoot} is owned by uid ${OTHER}, not by uid 0`);
    expect(body.message).toContain('nothing was changed');
    // The rollback tag it had pinned is put back; no helper.
    expect(engine.tags.get(`${REPO}:rollback`)).toBe('img-older');
    expect(engine.helpers).toEqual([]);
    expect(readdirSync(stagingRoot)).toEqual([]);

    chownSync(stagingRoot, 0, 0);
    const again = await fetch(url, { method: 'POST', headers });
    expect(again.status, await again.clone().text()).toBe(200);
    expect(engine.helpers).toHaveLength(1);
    const staged = stagedComposePath(stagingRoot);
    expect(engine.helpers[0]!.spec.env).toContain(`SELF_UPDATE_STAGED_SHA256=${sha256Of(engine.published as string)}`);
    expect((await listSelfUpdates(t.db.database.db))[0]!.stagedComposeSha256).toBe(sha256Of(engine.published as string));
    expect(lstatSync(staged).uid).toBe(0);
    rmSync(apiBase, { recursive: true, force: true });
  });
});

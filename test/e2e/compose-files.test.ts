// The installer's own compose files, as `docker compose config` reads them.
import { describe, expect, it } from 'vitest';
import path from 'node:path';
import { ROOT } from '../helpers/shared/process.ts';
import { run } from '../helpers/e2e/rig.ts';

const config = (file: string, env: Record<string, string>) =>
  run('docker', ['compose', '-f', path.join(ROOT, 'deploy', file), 'config', '--format', 'json'], { env: { DATABASE_PASSWORD: '', VERSION: '', INSTALLER_REGISTRY: '', ...env }, cwd: '/' });

describe('deploy/docker-compose*.yml', () => {
  for (const [file, channel, registry] of [['docker-compose.yml', 'prod', 'registry.example.com'], ['docker-compose.dev.yml', 'dev', 'dev-registry.example.com']] as const) {
    it(`${file}: accepted by compose, channel ${channel}, fixed names, no logging driver`, async () => {
      const r = await config(file, { DATABASE_PASSWORD: 'pw' });
      expect(r.code, r.stderr).toBe(0);
      const c = JSON.parse(r.stdout);
      const s = c.services;
      expect(s.backend.image).toBe(`${registry}/installer:${channel}-latest`);
      expect(s['backend-init'].image).toBe(s.backend.image);
      expect(s.postgres.image).toBe('postgres:15-bookworm');
      expect([s.backend.container_name, s['backend-init'].container_name, s.postgres.container_name]).toEqual(['installer-backend', 'installer-backend-init', 'installer-postgres']);
      expect(s.backend.environment).toMatchObject({ INSTALLER_CHANNEL: channel, TZ: 'UTC', MIGRATE_ON_BOOT: 'false' });
      expect(s.backend.depends_on['backend-init'].condition).toBe('service_completed_successfully');
      // A first start waits for a healthy database through the init; the backend itself only needs it
      // started, so that a switch (no init) does not poll a serving database with the backend down.
      expect(s['backend-init'].depends_on.postgres.condition).toBe('service_healthy');
      expect(s.backend.depends_on.postgres.condition).toBe('service_started');
      // One init per deploy; none in the helper's switch, which ran it before (docs/adr/0029-migrations-before-the-switch.md).
      expect(s['backend-init'].deploy.replicas).toBe(1);
      const helperSwitch = JSON.parse((await config(file, { DATABASE_PASSWORD: 'pw', INSTALLER_INIT_REPLICAS: '0' })).stdout).services;
      expect(helperSwitch['backend-init'].deploy.replicas).toBe(0);
      expect(s.backend.networks.platform.aliases).toEqual(['installer-backend']);
      expect(c.networks.platform.name).toBe('platform');
      for (const svc of Object.values(s) as { logging?: unknown }[]) expect(svc.logging).toBeUndefined();
      // A pinned VERSION and a mirror for Postgres come from the environment.
      const pinned = JSON.parse((await config(file, { DATABASE_PASSWORD: 'pw', VERSION: `${channel}-123`, POSTGRES_IMAGE: 'mirror/pg:15' })).stdout).services;
      expect(pinned.backend.image).toBe(`${registry}/installer:${channel}-123`);
      expect(pinned.postgres.image).toBe('mirror/pg:15');
      // The rollback tag reaches the backend: `rollback` by default, the operator's value when set.
      expect(s.backend.environment.SELF_UPDATE_ROLLBACK_TAG).toBe('rollback');
      const otherTag = JSON.parse((await config(file, { DATABASE_PASSWORD: 'pw', SELF_UPDATE_ROLLBACK_TAG: 'previous' })).stdout).services;
      expect(otherTag.backend.environment.SELF_UPDATE_ROLLBACK_TAG).toBe('previous');
      // The backups volume: where pg_dump writes in postgres, read-only in the backend; how many are kept.
      const mount = (svc: { volumes: { source?: string; target: string; read_only?: boolean }[] }) => svc.volumes.find((v) => v.source === 'installer-backups');
      expect(mount(s.postgres)).toMatchObject({ target: '/backups' });
      expect(mount(s.postgres)!.read_only).toBeFalsy();
      expect(mount(s.backend)).toMatchObject({ target: '/var/lib/installer/backups', read_only: true });
      expect(mount(s['backend-init'])).toBeUndefined();
      expect(Object.keys(c.volumes)).toContain('installer-backups');
      expect(s.backend.environment.SELF_UPDATE_BACKUPS_KEEP).toBe('5');
      const keep = JSON.parse((await config(file, { DATABASE_PASSWORD: 'pw', SELF_UPDATE_BACKUPS_KEEP: '9' })).stdout).services;
      expect(keep.backend.environment.SELF_UPDATE_BACKUPS_KEEP).toBe('9');
    });
  }

  it('refuses to render without the database password, saying so', async () => {
    const r = await config('docker-compose.yml', {});
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('DATABASE_PASSWORD must be set in .env');
  });
});

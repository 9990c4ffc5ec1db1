// No secret in any container's configuration: the installer stack runs on the real engine, updates
// itself once (so that the helper container exists too), and then the full `docker inspect` output
// of installer-backend, installer-backend-init, installer-postgres and installer-self-updater is
// searched for the real value of each of the four secrets, read from where it lives: the database
// password from the stack's .env, the other three from the backend's secrets volume.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { docker } from '../helpers/e2e/rig.ts';
import { helperExit, Images, startInstaller, type InstallerUnderTest } from '../helpers/e2e/self-update-rig.ts';
import { FIXED_CONTAINERS } from '../helpers/e2e/stack.ts';

const images = new Images();
let i: InstallerUnderTest;
const BASE = 'dev-e2e-secrets-base';
const NEXT = 'dev-e2e-secrets-next';

beforeAll(async () => {
  await images.buildBase(BASE);
  await images.publish(BASE);
  await images.buildVariant('good', BASE, NEXT);
  i = await startInstaller(images, BASE);
});

afterAll(async () => {
  await i?.down();
  await images.cleanup();
});

/** `KEY=value` from a compose .env file. */
function envFileValue(file: string, key: string): string {
  const line = readFileSync(file, 'utf8').split('\n').find((l) => l.startsWith(`${key}=`));
  if (!line) throw new Error(`${key} is not in ${file}`);
  return line.slice(key.length + 1);
}

const fromSecretsVolume = async (file: string) => (await docker(['exec', 'installer-backend', 'cat', `/var/lib/installer/secrets/${file}`])).trim();

describe('secrets reach the containers as files, never in their configuration', () => {
  it('a self-update runs, so that every container of the installer exists', async () => {
    const target = await images.publish(NEXT);
    const r = await i.post('/api/system/self-update');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ started: true, targetDigest: target });
    expect(await helperExit()).toBe(0);
    // The new backend, created by compose inside the helper, got the password file too: it is up on
    // the new digest with its database reachable.
    await i.until('the backend on the new digest', async () => ((await i.get('/api/version')).body as { digest?: string }).digest === target);
    expect((await i.get('/api/health')).body).toEqual({ status: 'ok', db: 'up' });
    // The helper ran the one-shot init on the new image before its switch, which then left it out
    // (docs/adr/0029-migrations-before-the-switch.md); an operator's `docker compose up -d --wait`
    // runs it again from the same service definition, so that it exists to be inspected.
    expect((await docker(['ps', '-a', '--filter', 'name=^installer-backend-init$', '--format', '{{.Names}}'])).trim()).toBe('');
    await i.stack.compose(['up', '-d', '--wait', '--wait-timeout', '180'], { VERSION: 'dev-latest' });
  });

  it('the full docker inspect of backend, init, postgres and helper holds none of the four secret values', async () => {
    const secrets: Record<string, string> = {
      'database password': envFileValue(path.join(i.stack.workDir, '.env'), 'DATABASE_PASSWORD'),
      'JWT secret': await fromSecretsVolume('jwt-secret'),
      'encryption key': await fromSecretsVolume('encryption-key'),
      'service token': await fromSecretsVolume('service-token'),
    };
    expect(secrets['database password']).toBe(i.stack.databasePassword);
    for (const [name, value] of Object.entries(secrets)) expect(value.length, name).toBeGreaterThanOrEqual(16);

    expect(FIXED_CONTAINERS).toEqual(['installer-backend', 'installer-backend-init', 'installer-postgres', 'installer-self-updater']);
    const found: string[] = [];
    for (const container of FIXED_CONTAINERS) {
      const inspect = await docker(['inspect', container]);
      const parsed = JSON.parse(inspect) as { Name: string; Config: { Env: string[] } }[];
      expect(parsed[0]!.Name).toBe(`/${container}`);
      // Env, Cmd, Args, Entrypoint, Labels, Healthcheck, Mounts, HostConfig: the whole document.
      for (const [name, value] of Object.entries(secrets)) if (inspect.includes(value)) found.push(`${container}: ${name}`);
      if (container !== 'installer-self-updater') {
        expect(parsed[0]!.Config.Env.some((e) => e.startsWith('DATABASE_PASSWORD=') || e.startsWith('POSTGRES_PASSWORD='))).toBe(false);
      }
    }
    expect(found).toEqual([]);
    // The password reaches the backend as the file compose put there, and it is the right one.
    expect((await docker(['exec', 'installer-backend', 'cat', '/run/secrets/database_password'])).trim()).toBe(secrets['database password']);
  });
});

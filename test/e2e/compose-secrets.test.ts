// Both compose files, as `docker compose config` reads them: the database password is a compose
// secret (a file in the container), never an environment value, and the backend runs under an init
// process. test/e2e/container-secrets.test.ts and zombies.test.ts show the same on running containers.
import { describe, expect, it } from 'vitest';
import path from 'node:path';
import { ROOT } from '../helpers/shared/process.ts';
import { run } from '../helpers/e2e/rig.ts';

const PASSWORD = 'compose-secrets-test-password-5d1e';

interface Service {
  environment?: Record<string, string | null>;
  secrets?: { source: string; target: string }[];
  init?: boolean;
}

describe('deploy/docker-compose*.yml hand the database password over as a file', () => {
  for (const file of ['docker-compose.yml', 'docker-compose.dev.yml']) {
    it(`${file}: a compose secret taken from .env, no password in any environment, init for the backend`, async () => {
      const r = await run('docker', ['compose', '-f', path.join(ROOT, 'deploy', file), 'config', '--format', 'json'], {
        env: { DATABASE_PASSWORD: PASSWORD, VERSION: '', INSTALLER_REGISTRY: '' },
        cwd: '/',
      });
      expect(r.code, r.stderr).toBe(0);
      const c = JSON.parse(r.stdout) as { services: Record<string, Service>; secrets: Record<string, { environment?: string }> };
      expect(c.secrets.database_password?.environment).toBe('DATABASE_PASSWORD');
      for (const name of ['postgres', 'backend-init', 'backend']) {
        const s = c.services[name]!;
        expect(JSON.stringify(s), name).not.toContain(PASSWORD);
        expect(Object.keys(s.environment ?? {}).filter((k) => /^(DATABASE_PASSWORD|POSTGRES_PASSWORD|JWT_SECRET|ENCRYPTION_KEY|SERVICE_TOKEN)$/.test(k)), name).toEqual([]);
        expect(s.secrets, name).toEqual([expect.objectContaining({ source: 'database_password', target: '/run/secrets/database_password' })]);
      }
      expect(c.services.postgres!.environment!.POSTGRES_PASSWORD_FILE).toBe('/run/secrets/database_password');
      expect(c.services['backend-init']!.environment!.DATABASE_PASSWORD_FILE).toBe('/run/secrets/database_password');
      expect(c.services.backend!.environment!.DATABASE_PASSWORD_FILE).toBe('/run/secrets/database_password');
      expect(c.services.backend!.init).toBe(true);
    });
  }
});

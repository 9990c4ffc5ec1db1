import { describe, expect, it } from 'vitest';
import { generateKeyPairSync } from 'node:crypto';
import { ConfigError, loadSettings, platformSignaturePolicy, resolveChannel, signaturePolicy } from '../../src/config.ts';

const files = (map: Record<string, string>) => ({
  readFile(p: string) {
    if (!(p in map)) throw Object.assign(new Error('nope'), { code: 'ENOENT' });
    return map[p]!;
  },
});

const fail = (env: Record<string, string>, f = files({})): ConfigError => {
  try {
    loadSettings(env, f);
  } catch (err) {
    if (err instanceof ConfigError) return err;
    throw err;
  }
  throw new Error('expected a ConfigError');
};

describe('settings', () => {
  it('has the documented defaults', () => {
    const s = loadSettings({}, files({}));
    expect(s).toMatchObject({
      PORT: 8080, TZ: 'UTC', SELF_UPDATE_ROLLBACK_TAG: 'rollback', PLATFORM_PROJECT: 'platform',
      MIGRATE_HOST_SCRIPT_PATH: '/opt/installer/migrate-host.sh', HUNG_JOB_MINUTES: 15, JOB_EVENT_RETENTION_DAYS: 30,
      INSTALLER_IMAGE_NAME: 'installer', STAGING_ROOT: '/var/lib/installer/staging',
    });
    expect(s.DATABASE_URL).toBeUndefined();
    expect(s.SECRETS_DIR.endsWith('/data/secrets')).toBe(true);
  });

  it('listens on loopback by default, and hands the control plane the HTTPS address', () => {
    // A bare `npm start` binds nothing but the loopback (docs/adr/0020-https-listeners.md).
    expect(loadSettings({}, files({}))).toMatchObject({ HOST: '127.0.0.1', PLAIN_HTTP_FROM: 'anywhere', PLATFORM_INSTALLER_URL: 'https://installer-backend:8443' });
    expect(loadSettings({ PLAIN_HTTP_FROM: 'host' }, files({})).PLAIN_HTTP_FROM).toBe('host');
    expect(fail({ PLAIN_HTTP_FROM: 'everyone' })).toMatchObject({ variable: 'PLAIN_HTTP_FROM', message: expect.stringContaining('must be anywhere or host') });
  });

  it('webhook delivery settings: documented defaults, and a bad one names its rule', () => {
    expect(loadSettings({}, files({}))).toMatchObject({ WEBHOOK_TIMEOUT_MS: 10_000, WEBHOOK_RETRY_BASE_MS: 1_000, WEBHOOK_RETRY_MAX_MS: 300_000, WEBHOOK_GIVE_UP_MINUTES: 1440 });
    expect(fail({ WEBHOOK_TIMEOUT_MS: '5' })).toMatchObject({ variable: 'WEBHOOK_TIMEOUT_MS', message: expect.stringContaining('at least 100') });
    expect(fail({ WEBHOOK_RETRY_BASE_MS: '1.5' })).toMatchObject({ variable: 'WEBHOOK_RETRY_BASE_MS', message: expect.stringContaining('whole number') });
    expect(fail({ WEBHOOK_GIVE_UP_MINUTES: '0' })).toMatchObject({ variable: 'WEBHOOK_GIVE_UP_MINUTES', message: expect.stringContaining('more than 0') });
  });

  it('bounded connections: documented defaults, each a whole number in its range, and caps that fit inside each other', () => {
    expect(loadSettings({}, files({}))).toMatchObject({
      STREAMS_PER_PRINCIPAL: 10, STREAMS_TOTAL: 50,
      HTTP_HEADERS_TIMEOUT_MS: 10_000, HTTP_REQUEST_TIMEOUT_MS: 30_000, HTTP_KEEP_ALIVE_TIMEOUT_MS: 10_000, HTTP_MAX_CONNECTIONS: 256,
    });
    expect(loadSettings({ STREAMS_PER_PRINCIPAL: '3', STREAMS_TOTAL: '7', HTTP_MAX_CONNECTIONS: '8' }, files({}))).toMatchObject({ STREAMS_PER_PRINCIPAL: 3, STREAMS_TOTAL: 7, HTTP_MAX_CONNECTIONS: 8 });
    for (const name of ['STREAMS_PER_PRINCIPAL', 'STREAMS_TOTAL', 'HTTP_MAX_CONNECTIONS', 'HTTP_HEADERS_TIMEOUT_MS', 'HTTP_REQUEST_TIMEOUT_MS', 'HTTP_KEEP_ALIVE_TIMEOUT_MS']) {
      for (const bad of ['0', '-1', '2.5', 'many']) expect(fail({ [name]: bad }).variable).toBe(name);
      expect(fail({ [name]: 'many' }).message).toMatch(new RegExp(`^${name}: must be a whole number of (streams|connections|milliseconds)$`));
    }
    expect(fail({ STREAMS_PER_PRINCIPAL: '0' }).message).toBe('STREAMS_PER_PRINCIPAL: must be at least 1');
    expect(fail({ HTTP_HEADERS_TIMEOUT_MS: '50' }).message).toBe('HTTP_HEADERS_TIMEOUT_MS: must be at least 100');
    expect(fail({ STREAMS_PER_PRINCIPAL: '60' }).message).toBe('STREAMS_TOTAL: must be at least STREAMS_PER_PRINCIPAL: one caller cannot hold more streams than all of them together');
    expect(fail({ STREAMS_TOTAL: '256' }).message).toBe('HTTP_MAX_CONNECTIONS: must be more than STREAMS_TOTAL: each stream holds a connection, and other requests need some too');
    expect(fail({ HTTP_HEADERS_TIMEOUT_MS: '40000' }).message).toBe('HTTP_REQUEST_TIMEOUT_MS: must be at least HTTP_HEADERS_TIMEOUT_MS: the headers are part of the request');
  });

  it('database backups of a self-update: keeps 5 by default, a whole number from 1 to 100', () => {
    expect(loadSettings({}, files({}))).toMatchObject({ SELF_UPDATE_BACKUPS_KEEP: 5, SELF_UPDATE_BACKUPS_DIR: '/var/lib/installer/backups' });
    expect(loadSettings({ SELF_UPDATE_BACKUPS_KEEP: '12' }, files({})).SELF_UPDATE_BACKUPS_KEEP).toBe(12);
    for (const bad of ['0', '-1', '2.5', 'all', '101']) expect(fail({ SELF_UPDATE_BACKUPS_KEEP: bad }).variable).toBe('SELF_UPDATE_BACKUPS_KEEP');
    expect(fail({ SELF_UPDATE_BACKUPS_KEEP: '101' }).message).toContain('at most 100');
    expect(fail({ SELF_UPDATE_BACKUPS_DIR: 'backups' }).variable).toBe('SELF_UPDATE_BACKUPS_DIR');
  });

  it('names the variable and the rule, never the value', () => {
    const e = fail({ JWT_SECRET: 'short-secret-value' });
    expect(e.variable).toBe('JWT_SECRET');
    expect(e.message).toContain('at least 32');
    expect(e.message).not.toContain('short-secret-value');
    expect(fail({ PORT: 'eighty' }).variable).toBe('PORT');
    expect(fail({ TZ: 'Europe/Berlin' }).message).toContain('must be UTC');
    expect(fail({ DATABASE_URL: 'mysql://x' }).variable).toBe('DATABASE_URL');
    expect(fail({ INSTALLER_ROLE: 'worker', DATABASE_URL: 'postgres://x/y' }).message).toContain('must be all, api or controllers');
    // The embedded database is one process's: a split role needs Postgres.
    expect(fail({ INSTALLER_ROLE: 'api' })).toMatchObject({ variable: 'INSTALLER_ROLE' });
    expect(fail({ INSTALLER_ROLE: 'controllers' }).message).toContain('must be all with the embedded database');
    expect(loadSettings({ INSTALLER_ROLE: 'api', DATABASE_URL: 'postgres://x/y' }, files({})).INSTALLER_ROLE).toBe('api');
    expect(loadSettings({}, files({})).INSTALLER_ROLE).toBe('all');
    expect(fail({ MIGRATE_HOST_SCRIPT_PATH: 'relative/path.sh' }).message).toContain('absolute path');
    expect(fail({ SELF_UPDATE_ROLLBACK_TAG: 'bad tag' }).variable).toBe('SELF_UPDATE_ROLLBACK_TAG');
  });

  it('reads secrets from *_FILE and refuses both forms at once', () => {
    const token = 't'.repeat(40);
    const s = loadSettings({ SERVICE_TOKEN_FILE: '/s/token' }, files({ '/s/token': `${token}\n` }));
    expect(s.secrets.SERVICE_TOKEN).toBe(token);
    expect(fail({ SERVICE_TOKEN_FILE: '/missing' }).message).toBe('SERVICE_TOKEN_FILE: cannot read the file (ENOENT)');
    expect(fail({ SERVICE_TOKEN: token, SERVICE_TOKEN_FILE: '/s/token' }, files({ '/s/token': token })).message).toContain('set only one');
  });

  it('resolves the channel from the setting, else the running tag prefix', () => {
    expect(resolveChannel({ INSTALLER_CHANNEL: 'dev' }, 'prod-123')).toBe('dev');
    expect(resolveChannel({}, 'prod-20261122.1')).toBe('prod');
    expect(resolveChannel({}, 'dev-latest')).toBe('dev');
    expect(resolveChannel({}, null)).toBeNull();
  });

  it('signature settings: require with a key file, off without; the key file checked at boot', () => {
    const pair = () => generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const pem = (k: { export(o: { type: 'spki' | 'pkcs8'; format: 'pem' }): string | Buffer }, type: 'spki' | 'pkcs8') => String(k.export({ type, format: 'pem' }));
    const pub = pem(pair().publicKey, 'spki');
    const keys = files({ '/k/cosign.pub': pub, '/k/two.pub': pub + pem(pair().publicKey, 'spki'), '/k/cosign.key': pem(pair().privateKey, 'pkcs8'), '/k/empty.pub': '\n' });
    expect(signaturePolicy(loadSettings({}, keys))).toBe('off');
    expect(signaturePolicy(loadSettings({ SIGNATURE_PUBLIC_KEYS_FILE: '/k/cosign.pub' }, keys))).toBe('require');
    expect(signaturePolicy(loadSettings({ SIGNATURE_PUBLIC_KEYS_FILE: '/k/two.pub', SIGNATURE_POLICY: 'warn' }, keys))).toBe('warn');
    expect(signaturePolicy(loadSettings({ SIGNATURE_PUBLIC_KEYS_FILE: '/k/cosign.pub', SIGNATURE_POLICY: 'off' }, keys))).toBe('off');
    expect(fail({ SIGNATURE_POLICY: 'require' }, keys).message).toBe('SIGNATURE_POLICY: cannot be require without SIGNATURE_PUBLIC_KEYS_FILE: there is no key to verify builds with');
    expect(fail({ SIGNATURE_POLICY: 'always' }, keys).message).toBe('SIGNATURE_POLICY: must be off, warn or require');
    expect(fail({ SIGNATURE_PUBLIC_KEYS_FILE: 'cosign.pub' }, keys).message).toBe('SIGNATURE_PUBLIC_KEYS_FILE: must be an absolute path');
    expect(fail({ SIGNATURE_PUBLIC_KEYS_FILE: '/k/missing.pub' }, keys).message).toBe('SIGNATURE_PUBLIC_KEYS_FILE: cannot be read (ENOENT)');
    expect(fail({ SIGNATURE_PUBLIC_KEYS_FILE: '/k/cosign.key' }, keys).message).toContain('holds a private key: give the public key (cosign.pub) only');
    expect(fail({ SIGNATURE_PUBLIC_KEYS_FILE: '/k/empty.pub' }, keys).message).toContain('holds no PEM public key');
    // The platform's images: the same rules under their own names, independent of the installer's.
    expect(platformSignaturePolicy(loadSettings({ SIGNATURE_PUBLIC_KEYS_FILE: '/k/cosign.pub' }, keys))).toBe('off');
    expect(platformSignaturePolicy(loadSettings({ PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE: '/k/two.pub' }, keys))).toBe('require');
    expect(platformSignaturePolicy(loadSettings({ PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE: '/k/two.pub', PLATFORM_SIGNATURE_POLICY: 'warn' }, keys))).toBe('warn');
    expect(fail({ PLATFORM_SIGNATURE_POLICY: 'warn', SIGNATURE_PUBLIC_KEYS_FILE: '/k/cosign.pub' }, keys).message).toBe(
      'PLATFORM_SIGNATURE_POLICY: cannot be warn without PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE: there is no key to verify images with',
    );
    expect(fail({ PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE: '/k/cosign.key' }, keys).message).toMatch(/^PLATFORM_SIGNATURE_PUBLIC_KEYS_FILE: .*holds a private key/);
  });

  it('signature registry endpoints: registry=URL pairs, http(s) only, no credentials in the URL', () => {
    expect(loadSettings({ SIGNATURE_REGISTRY_ENDPOINTS: '127.0.0.1:5000=http://172.17.0.1:5000/, registry.example.com=https://mirror.example.com' }, files({})).SIGNATURE_REGISTRY_ENDPOINTS).toEqual({
      '127.0.0.1:5000': 'http://172.17.0.1:5000',
      'registry.example.com': 'https://mirror.example.com',
    });
    for (const bad of ['127.0.0.1:5000', '=http://x', 'a=ftp://x', 'a=http://u:p@x', 'a b=http://x', 'a=not a url']) {
      expect(fail({ SIGNATURE_REGISTRY_ENDPOINTS: bad }).message, bad).toMatch(/^SIGNATURE_REGISTRY_ENDPOINTS: must be <registry>=<http\(s\) URL> pairs/);
    }
  });
});

// The platform .env as the installer rewrites it: a key that is set is written once, where it
// first stood, and the installer's own keys come with the current service token.
import { describe, expect, it } from 'vitest';
import { applyEnvChanges, installerEnvFor, installerKeysIn, parseEnv, renderEnv } from '../../src/adapters/platform-files.ts';

const TOKEN = 'current-service-token-0123456789abcdef';

describe('applyEnvChanges', () => {
  it('replaces a key in place and drops its later duplicates, so compose cannot read a stale value', () => {
    const text = '# head\nA=1\nINSTALLER_SERVICE_TOKEN=old\nB=2\nINSTALLER_SERVICE_TOKEN=older\n';
    const out = applyEnvChanges(text, { INSTALLER_SERVICE_TOKEN: TOKEN }, []);
    expect(out).toBe(`# head\nA=1\nINSTALLER_SERVICE_TOKEN=${TOKEN}\nB=2\n`);
    expect(parseEnv(out).filter((e) => e.key === 'INSTALLER_SERVICE_TOKEN')).toEqual([{ key: 'INSTALLER_SERVICE_TOKEN', value: TOKEN }]);
  });

  it('appends a key the text does not have, once', () => {
    expect(applyEnvChanges('A=1\n', { INSTALLER_URL: 'http://installer-backend:8080' }, [])).toBe('A=1\nINSTALLER_URL=http://installer-backend:8080\n');
  });
});

describe("the installer's keys", () => {
  it('carry the first accepted service token (the current one while a rotation keeps the previous)', () => {
    expect(installerEnvFor('http://installer-backend:8080', [TOKEN, 'previous-service-token-0123456789abcdef'])).toEqual({
      env: { INSTALLER_URL: 'http://installer-backend:8080', INSTALLER_SERVICE_TOKEN: TOKEN, INSTALLER_TLS_FINGERPRINT256: '' },
      problem: null,
    });
  });

  it("carry the HTTPS certificate's fingerprint beside the https:// address, for the control plane to check before it sends the token", () => {
    const fingerprint = 'AB:'.repeat(31) + 'AB';
    expect(installerEnvFor('https://installer-backend:8443', [TOKEN], fingerprint).env).toEqual({
      INSTALLER_URL: 'https://installer-backend:8443',
      INSTALLER_SERVICE_TOKEN: TOKEN,
      INSTALLER_TLS_FINGERPRINT256: fingerprint,
    });
  });

  it('leave the token out, saying why, when no token is accepted (a broken token file)', () => {
    const r = installerEnvFor('http://installer-backend:8080', []);
    expect(r.env).toEqual({ INSTALLER_URL: 'http://installer-backend:8080', INSTALLER_TLS_FINGERPRINT256: '' });
    expect(r.problem).toContain('INSTALLER_SERVICE_TOKEN in the platform .env is left as it was');
  });

  it('are found in a template that defines them, and overwrite it without a duplicate', () => {
    const template = 'WEB_PORT=1\nINSTALLER_URL=http://wrong:1\n#INSTALLER_SERVICE_TOKEN=commented\n';
    expect(installerKeysIn(template)).toEqual(['INSTALLER_URL']);
    const env = applyEnvChanges(renderEnv(template, 'INSTALLER_SERVICE_TOKEN=stale-from-last-deploy\n', null), installerEnvFor('http://installer-backend:8080', [TOKEN]).env, []);
    expect(parseEnv(env)).toEqual([
      { key: 'WEB_PORT', value: '1' },
      { key: 'INSTALLER_URL', value: 'http://installer-backend:8080' },
      { key: 'INSTALLER_SERVICE_TOKEN', value: TOKEN },
      { key: 'INSTALLER_TLS_FINGERPRINT256', value: '' },
    ]);
  });
});

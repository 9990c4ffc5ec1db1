// The platform's .env as the installer sees it: which keys are the installer's own, and which
// values are masked wherever they are shown (docs/adr/0017-installer-keys-in-platform-env.md).

/**
 * Keys the installer itself writes into the platform's .env on every deploy and apply-config, so
 * that the control plane can call it: its address on the `platform` network, the current service
 * token, and the SHA-256 fingerprint of the certificate its HTTPS listener presents there, which the
 * control plane checks before it sends the token (empty without HTTPS;
 * docs/adr/0020-https-listeners.md). They are the installer's, not the operator's: never shown,
 * never set through the configuration API.
 */
export const INSTALLER_ENV_KEYS = { url: 'INSTALLER_URL', serviceToken: 'INSTALLER_SERVICE_TOKEN', tlsFingerprint: 'INSTALLER_TLS_FINGERPRINT256' } as const;
export const INSTALLER_KEYS: readonly string[] = Object.values(INSTALLER_ENV_KEYS);

/** What a masked value is shown as. */
export const MASK = '********';

/** Key names whose values are secrets by convention. */
const SECRET_KEY = /(PASS(WORD)?|SECRET|TOKEN|KEY|PRIVATE|CREDENTIAL|AUTH)/i;

/** Whether a value of the platform's .env is shown masked: a secret by its name, or the installer's own. */
export const isMaskedKey = (key: string): boolean => SECRET_KEY.test(key) || INSTALLER_KEYS.includes(key);

// What the installer accepts as a source of files it installs as root (the platform's templates,
// the published compose file), and how such a source is printed
// (docs/adr/0041-trusted-sources-and-staging.md). Pure rules: the config check at boot and the
// fetch itself use the same ones.

/** Hosts that plain http:// may name: the rig serves templates and compose files on loopback. */
export function isLoopbackHost(hostname: string): boolean {
  // WHATWG URL has already normalised the host: `0x7f.1` is `127.0.0.1`, `[0:0::1]` is `[::1]`.
  const host = hostname.toLowerCase();
  if (host === 'localhost' || host === '[::1]' || host === '::1') return true;
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

export const SOURCE_RULE = 'must be an https:// URL (plain http:// only to a loopback host: 127.0.0.0/8, ::1 or localhost)';

/** Why a URL may not be fetched from (null when it may): https anywhere, http to loopback only. */
export function remoteSourceProblem(url: URL): string | null {
  if (url.protocol === 'https:') return null;
  if (url.protocol === 'http:') return isLoopbackHost(url.hostname) ? null : `${SOURCE_RULE}; http:// to ${url.hostname} is refused`;
  return `${SOURCE_RULE}; ${url.protocol.replace(/:$/, '')}:// is refused`;
}

/**
 * A URL as it may be printed (logs, job events, errors, diagnostics): scheme, host, port and path,
 * never the user name, password, query string or fragment, which may hold credentials or a signature.
 */
export function printableUrl(url: string | URL): string {
  let u: URL;
  try {
    u = new URL(String(url));
  } catch {
    return '(an unparsable URL)';
  }
  if (u.protocol === 'file:') return `file://${u.pathname}`;
  return `${u.protocol}//${u.host}${u.pathname}`;
}

const SHA256 = /^[0-9a-f]{64}$/;

/** A sha256 pin as written in a setting: 64 hex digits, optionally prefixed `sha256:`; lower-cased. */
export function parseSha256(value: string): string | null {
  const v = value.trim().toLowerCase().replace(/^sha256:/, '');
  return SHA256.test(v) ? v : null;
}

/**
 * Pins of several files, written `<file>=<sha256>` and separated by commas or white space
 * (PLATFORM_TEMPLATES_SHA256). Returns the pins by file, or why the value is not such a list.
 */
export function parseFilePins(value: string, files: readonly string[]): { pins: Record<string, string> } | { problem: string } {
  const pins: Record<string, string> = {};
  const rule = `must pin ${files.join(' and ')} as <file>=<sha256>, separated by a comma`;
  for (const part of value.split(/[\s,]+/).filter(Boolean)) {
    const eq = part.indexOf('=');
    const file = eq > 0 ? part.slice(0, eq) : '';
    const digest = eq > 0 ? parseSha256(part.slice(eq + 1)) : null;
    if (!files.includes(file) || digest === null) return { problem: rule };
    if (file in pins) return { problem: `${rule}; ${file} is pinned twice` };
    pins[file] = digest;
  }
  const missing = files.filter((f) => !(f in pins));
  if (missing.length) return { problem: `${rule}; ${missing.join(' and ')} ${missing.length === 1 ? 'is' : 'are'} not pinned` };
  return { pins };
}

/** The words of a pin mismatch: what was fetched, the digest expected and the one received. */
export const pinMismatch = (what: string, expected: string, actual: string) =>
  `${what} does not match its sha256 pin: expected ${expected}, got ${actual}`;

// What sign-in throttling keys on (docs/adr/0016-user-management.md): the client, as its address
// (an IPv6 client by its /64, which one host usually holds whole), and the device: a browser or
// client that signed in as a user before carries a device token for that user, signed by the
// installer, and is throttled on its own instead of with every stranger who tries that user name.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { isIPv4, isIPv6 } from 'node:net';

/**
 * The counter key of a client address: an IPv4 address as it is (an IPv4-mapped IPv6 one too),
 * an IPv6 address by its first 64 bits.
 */
export function clientKey(address: string | undefined): string {
  const ip = (address ?? '').replace(/%.*$/, ''); // no zone id
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped && isIPv4(mapped[1]!)) return mapped[1]!;
  if (isIPv4(ip)) return ip;
  if (!isIPv6(ip)) return ip || 'unknown';
  return `${expandIPv6(ip).slice(0, 4).join(':')}::/64`;
}

/** The eight groups of an IPv6 address, as lower-case hex without leading zeros. */
function expandIPv6(ip: string): string[] {
  let text = ip.toLowerCase();
  // A trailing dotted IPv4 part stands for the last two groups.
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (v4) {
    const [a, b, c, d] = v4.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, v4.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split('::') as [string, string | undefined];
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const groups = tail === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  return groups.map((g) => parseInt(g, 16).toString(16));
}

/** The cookie that carries a device token for one user name (sent to the sign-in route only). */
export const deviceCookieName = (username: string) => `installer_device.${username}`;

/** How long a device token lasts; each sign-in with it renews it. */
export const DEVICE_TOKEN_DAYS = 30;

/** A device token's content once its signature is checked. */
export interface Device {
  id: string;
  /** The user row id it was issued to (a user removed and added again under the name is another). */
  uid: number;
}

/**
 * Device tokens: `<device id>.<user id>.<expiry, unix seconds>.<HMAC-SHA256>`, the MAC covering the
 * user name too. The key is derived from the JWT secret, for this use only: a device token is no
 * bearer token and a bearer token is no device token.
 */
export class DeviceTokens {
  private readonly key: Buffer;

  constructor(
    secret: string,
    private readonly nowMs: () => number = Date.now,
  ) {
    this.key = createHmac('sha256', secret).update('installer sign-in device token v1').digest();
  }

  private mac(username: string, id: string, uid: number, exp: number): Buffer {
    return createHmac('sha256', this.key).update(`${username}\n${id}\n${uid}\n${exp}`).digest();
  }

  /** A token for this user on this device (a new device id unless one is given). */
  issue(username: string, uid: number, deviceId?: string): { token: string; maxAgeSeconds: number } {
    const id = deviceId ?? randomBytes(12).toString('base64url');
    const maxAgeSeconds = DEVICE_TOKEN_DAYS * 24 * 3600;
    const exp = Math.floor(this.nowMs() / 1000) + maxAgeSeconds;
    return { token: `${id}.${uid}.${exp}.${this.mac(username, id, uid, exp).toString('base64url')}`, maxAgeSeconds };
  }

  /** The device, if `token` was issued for this user name and has not expired. */
  verify(username: string, token: string | undefined): Device | null {
    if (!token) return null;
    const m = /^([A-Za-z0-9_-]{16})\.(\d{1,10})\.(\d{1,12})\.([A-Za-z0-9_-]{43})$/.exec(token);
    if (!m) return null;
    const [, id, uidText, expText, macText] = m as unknown as [string, string, string, string, string];
    const uid = Number(uidText);
    const exp = Number(expText);
    const expected = this.mac(username, id, uid, exp);
    const given = Buffer.from(macText, 'base64url');
    // The 43rd character carries two bits no byte uses: a decoder ignores them, so one MAC has four
    // spellings. Only the one this side writes is the token.
    if (given.toString('base64url') !== macText) return null;
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
    if (exp * 1000 <= this.nowMs()) return null;
    return { id, uid };
  }
}

/** One cookie's value from a Cookie header, or undefined. */
export function cookieValue(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

// The keys sign-in throttling counts on: a client address (an IPv6 client by its /64) and the
// device token a browser gets at a successful sign-in (docs/adr/0016-user-management.md).
import { describe, expect, it } from 'vitest';
import { clientKey, cookieValue, DeviceTokens } from '../../src/auth/sign-in.ts';

describe('client keys', () => {
  it('keeps an IPv4 address, mapped or not, and takes an IPv6 address by its /64', () => {
    expect(clientKey('203.0.113.9')).toBe('203.0.113.9');
    expect(clientKey('::ffff:203.0.113.9')).toBe('203.0.113.9');
    expect(clientKey('::FFFF:203.0.113.9')).toBe('203.0.113.9');
    const prefix = '2001:db8:a:b::/64';
    for (const ip of ['2001:db8:a:b::1', '2001:0db8:000a:000b:ffff:ffff:ffff:ffff', '2001:DB8:A:B:1:2:3:4', '2001:db8:a:b::9%eth0', '2001:db8:a:b::192.0.2.1']) {
      expect(clientKey(ip), ip).toBe(prefix);
    }
    expect(clientKey('2001:db8:a:c::1')).toBe('2001:db8:a:c::/64');
    expect(clientKey('::1')).toBe('0:0:0:0::/64');
    expect(clientKey('2001:db8::')).toBe('2001:db8:0:0::/64');
    expect(clientKey(undefined)).toBe('unknown');
  });
});

describe('device tokens', () => {
  let now = Date.UTC(2026, 0, 1);
  const tokens = new DeviceTokens('a-secret-of-at-least-thirty-two-characters', () => now);

  it('verify for the user name and user id they were issued to, until they expire', () => {
    const { token, maxAgeSeconds } = tokens.issue('amy', 7);
    expect(maxAgeSeconds).toBe(30 * 24 * 3600);
    const device = tokens.verify('amy', token);
    expect(device).toEqual({ id: expect.stringMatching(/^[\w-]{16}$/), uid: 7 });
    // Renewed for the same device, the id stays.
    expect(tokens.verify('amy', tokens.issue('amy', 7, device!.id).token)?.id).toBe(device!.id);
    expect(tokens.verify('bob', token)).toBeNull();
    expect(new DeviceTokens('another-secret-of-at-least-thirty-two-chars', () => now).verify('amy', token)).toBeNull();
    const [id, uid, exp, mac] = token.split('.') as [string, string, string, string];
    expect(tokens.verify('amy', [id, '8', exp, mac].join('.'))).toBeNull();
    expect(tokens.verify('amy', [id, uid, String(Number(exp) + 1), mac].join('.'))).toBeNull();
    expect(tokens.verify('amy', `${token}x`)).toBeNull();
    // The last of the MAC's 43 characters holds two bits no byte uses: the other three spellings of
    // the same MAC decode to it, and are refused.
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const last = alphabet.indexOf(mac.at(-1)!);
    for (const spare of [1, 2, 3]) {
      const respelled = mac.slice(0, -1) + alphabet[last ^ spare];
      expect(Buffer.from(respelled, 'base64url')).toEqual(Buffer.from(mac, 'base64url'));
      expect(tokens.verify('amy', [id, uid, exp, respelled].join('.'))).toBeNull();
    }
    expect(tokens.verify('amy', undefined)).toBeNull();
    now += maxAgeSeconds * 1000 - 1000;
    expect(tokens.verify('amy', token)).not.toBeNull();
    now += 1000;
    expect(tokens.verify('amy', token)).toBeNull();
  });

  it('are read from the cookie named for the user', () => {
    expect(cookieValue('a=1; installer_device.amy=abc.def; b=2', 'installer_device.amy')).toBe('abc.def');
    expect(cookieValue('installer_device.amyx=abc', 'installer_device.amy')).toBeUndefined();
    expect(cookieValue(undefined, 'x')).toBeUndefined();
  });
});

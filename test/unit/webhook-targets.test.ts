// The address rule of webhooks (src/webhook-targets.ts): which addresses a delivery may not reach
// by default and why, including IPv4 carried inside IPv6 (mapped, compatible, NAT64, 6to4) and the
// installer's own networks as os.networkInterfaces() gives them; public addresses pass. And the
// signature's format, against the example the documentation gives receivers.
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { embeddedIPv4, localNetworks, refusalOf } from '../../src/webhook-targets.ts';
import { signature } from '../../src/adapters/webhook-sender.ts';

const own = localNetworks(() => ({
  eth0: [{ address: '198.18.7.2', netmask: '255.255.255.0', family: 'IPv4', mac: '02:00:00:00:00:01', internal: false, cidr: '198.18.7.2/24' }],
  eth1: [{ address: '2001:db8:aa::5', netmask: 'ffff:ffff:ffff:ffff::', family: 'IPv6', mac: '02:00:00:00:00:02', internal: false, cidr: '2001:db8:aa::5/64', scopeid: 0 }],
}));

describe('the webhook address rule', () => {
  it('names the kind of every address a webhook may not reach by default', () => {
    const cases: [string, string, string?][] = [
      ['127.0.0.1', 'loopback'], ['127.255.255.254', 'loopback'], ['::1', 'loopback'],
      ['0.0.0.0', 'unspecified'], ['0.1.2.3', 'unspecified'], ['::', 'unspecified'],
      ['169.254.169.254', 'link-local'], ['fe80::1', 'link-local'], ['fe80::1%eth0', 'link-local'], ['[fe80::abcd]', 'link-local'],
      ['10.0.0.1', 'private'], ['172.16.0.1', 'private'], ['172.31.255.255', 'private'], ['192.168.0.1', 'private'], ['fc00::1', 'private'], ['fd00:ec2::254', 'private'], ['fec0::1', 'private'],
      ['100.64.0.1', 'shared (CGNAT)'], ['100.127.255.254', 'shared (CGNAT)'],
      ['224.0.0.1', 'multicast'], ['ff02::1', 'multicast'], ['255.255.255.255', 'reserved'], ['240.0.0.1', 'reserved'],
      ['::ffff:127.0.0.1', 'loopback', '127.0.0.1'], ['::ffff:7f00:1', 'loopback', '127.0.0.1'], ['0:0:0:0:0:ffff:a9fe:a9fe', 'link-local', '169.254.169.254'],
      ['::ffff:10.1.1.1', 'private', '10.1.1.1'], ['::127.0.0.1', 'loopback', '127.0.0.1'], ['64:ff9b::a9fe:a9fe', 'link-local', '169.254.169.254'],
      ['2002:7f00:1::', 'loopback', '127.0.0.1'], ['2002:c0a8:101::1', 'private', '192.168.1.1'],
      ['198.18.7.200', 'own network'], ['2001:db8:aa::9', 'own network'], ['::ffff:198.18.7.9', 'own network', '198.18.7.9'],
      ['not-an-address', 'reserved'],
    ];
    for (const [address, kind, via] of cases) {
      const r = refusalOf(address, own);
      expect(r?.kind, address).toBe(kind);
      expect(r?.via, address).toBe(via);
    }
    expect(refusalOf('198.18.7.3', own)?.network).toEqual({ cidr: '198.18.7.2/24', interface: 'eth0' });
  });

  it('lets public addresses through, and neighbours of private ranges', () => {
    for (const address of ['8.8.8.8', '1.1.1.1', '198.51.100.7', '172.32.0.1', '172.15.255.255', '100.128.0.1', '100.63.255.255', '169.255.0.1', '192.169.0.1', '11.0.0.1', '198.18.8.1', '2606:4700:4700::1111', '2001:db8:ab::1', '::ffff:8.8.8.8', '64:ff9b::808:808', '2002:808:808::1']) {
      expect(refusalOf(address, own), address).toBeNull();
    }
  });

  it('reads the IPv4 address an IPv6 one carries', () => {
    expect(embeddedIPv4('::ffff:1.2.3.4')).toBe('1.2.3.4');
    expect(embeddedIPv4('::ffff:102:304')).toBe('1.2.3.4');
    expect(embeddedIPv4('64:ff9b::1.2.3.4')).toBe('1.2.3.4');
    expect(embeddedIPv4('2002:102:304::')).toBe('1.2.3.4');
    expect(embeddedIPv4('::1')).toBeNull();
    expect(embeddedIPv4('2001:db8::1')).toBeNull();
    expect(embeddedIPv4('1:2:3')).toBeNull();
  });
});

describe('the webhook signature', () => {
  it('is t=<timestamp>,v1=<HMAC-SHA256 of "<t>.<body>">, as the example in docs/notifications.md', () => {
    const secret = `whsec_${'0'.repeat(64)}`;
    const header = signature(secret, '1764021600', '{"id":"test:1","type":"test"}');
    expect(header).toBe('t=1764021600,v1=ab298363f77b9ab97cd0d84aa4af542614298ed2696a738bc2e519b777c0418e');
    expect(readFileSync(new URL('../../docs/notifications.md', import.meta.url), 'utf8')).toContain(header);
    // The timestamp is signed: the same body at another time has another signature.
    expect(signature(secret, '1764021601', '{"id":"test:1","type":"test"}').split(',v1=')[1]).not.toBe(header.split(',v1=')[1]);
  });
});

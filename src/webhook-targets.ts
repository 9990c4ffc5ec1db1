// Where a webhook may not go unless an admin allows it on that endpoint (docs/notifications.md,
// docs/adr/0027-webhook-notifications.md): loopback, unspecified, link-local, private, shared
// (CGNAT), multicast and reserved addresses, IPv4 addresses embedded in IPv6 (mapped, compatible,
// NAT64, 6to4) judged as the IPv4 address they carry, and the installer's own networks (the
// subnets of its interfaces: in a container, the Docker networks it is attached to). The installer
// holds the host's Docker socket: a delivery must not become a request to the engine's API on a
// TCP port, to cloud metadata or to the database. Pure: the caller passes the interfaces.
import { BlockList, isIP, isIPv4 } from 'node:net';
import { networkInterfaces, type NetworkInterfaceInfo } from 'node:os';

/** What an address is, when it is one a webhook may not reach by default. */
export type RefusedKind = 'loopback' | 'unspecified' | 'link-local' | 'private' | 'shared (CGNAT)' | 'multicast' | 'reserved' | 'own network';

interface Rule {
  kind: RefusedKind;
  v4: [string, number][];
  v6: [string, number][];
}

const RULES: Rule[] = [
  { kind: 'loopback', v4: [['127.0.0.0', 8]], v6: [['::1', 128]] },
  // 0.0.0.0/8 is "this network": connecting to 0.0.0.0 reaches the local host on Linux.
  { kind: 'unspecified', v4: [['0.0.0.0', 8]], v6: [['::', 128]] },
  { kind: 'link-local', v4: [['169.254.0.0', 16]], v6: [['fe80::', 10]] },
  // fec0::/10 is the deprecated site-local range, private in practice.
  { kind: 'private', v4: [['10.0.0.0', 8], ['172.16.0.0', 12], ['192.168.0.0', 16]], v6: [['fc00::', 7], ['fec0::', 10]] },
  { kind: 'shared (CGNAT)', v4: [['100.64.0.0', 10]], v6: [] },
  { kind: 'multicast', v4: [['224.0.0.0', 4]], v6: [['ff00::', 8]] },
  // 240.0.0.0/4 holds the broadcast address 255.255.255.255.
  { kind: 'reserved', v4: [['240.0.0.0', 4]], v6: [] },
];

const LISTS = RULES.map((r) => {
  const list = new BlockList();
  for (const [a, p] of r.v4) list.addSubnet(a, p, 'ipv4');
  for (const [a, p] of r.v6) list.addSubnet(a, p, 'ipv6');
  return { kind: r.kind, list };
});

/** What each kind means, for a message an admin reads. */
export const KIND_TEXT: Record<RefusedKind, string> = {
  loopback: 'a loopback address',
  unspecified: 'an unspecified address (it reaches the local host)',
  'link-local': 'a link-local address (cloud metadata services live there)',
  private: 'a private-network address',
  'shared (CGNAT)': 'a shared (CGNAT) address',
  multicast: 'a multicast address',
  reserved: 'a reserved address',
  'own network': "an address on one of the installer's own networks",
};

/** The rule as a sentence, for 400s and delivery errors. */
export const RULE_TEXT =
  "webhooks may not reach loopback, link-local, private or reserved addresses or the installer's own networks unless an admin sets allowPrivateNetwork on the endpoint";

/** One subnet of a local interface (`cidr` of os.networkInterfaces()). */
export interface LocalNetwork {
  cidr: string;
  interface: string;
}

/** The subnets of this process's interfaces, read now (networks are attached and detached at run time). */
export function localNetworks(read: () => NodeJS.Dict<NetworkInterfaceInfo[]> = networkInterfaces): LocalNetwork[] {
  const out: LocalNetwork[] = [];
  for (const [name, infos] of Object.entries(read())) for (const i of infos ?? []) if (i.cidr) out.push({ cidr: i.cidr, interface: name });
  return out;
}

/** 16 bytes of an IPv6 address (with or without an embedded dotted quad), or null. */
function ipv6Bytes(ip: string): number[] | null {
  let s = ip.split('%')[0]!;
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  let tail: number[] = [];
  if (dotted) {
    tail = dotted[1]!.split('.').map(Number);
    s = s.slice(0, -dotted[1]!.length) + '0:0';
  }
  const halves = s.split('::');
  if (halves.length > 2) return null;
  const words = (h: string) => (h === '' ? [] : h.split(':').map((w) => parseInt(w, 16)));
  const head = words(halves[0]!);
  const rest = halves.length === 2 ? words(halves[1]!) : [];
  const fill = 8 - head.length - rest.length;
  if (fill < 0 || (halves.length === 1 && fill !== 0)) return null;
  const all = [...head, ...Array<number>(halves.length === 2 ? fill : 0).fill(0), ...rest];
  if (all.some((w) => !Number.isInteger(w) || w < 0 || w > 0xffff)) return null;
  const bytes = all.flatMap((w) => [w >> 8, w & 0xff]);
  if (dotted) bytes.splice(12, 4, ...tail);
  return bytes;
}

/**
 * The IPv4 address an IPv6 address carries and that a connection to it may reach: IPv4-mapped
 * (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::a.b.c.d) and 6to4 (2002:AABB:CCDD::).
 */
export function embeddedIPv4(ip: string): string | null {
  const b = ipv6Bytes(ip);
  if (!b) return null;
  const zero = (from: number, to: number) => b.slice(from, to).every((x) => x === 0);
  const quad = (at: number) => b.slice(at, at + 4).join('.');
  if (zero(0, 10) && b[10] === 0xff && b[11] === 0xff) return quad(12);
  // ::a.b.c.d, but not :: and ::1 themselves (their own rules name them).
  if (zero(0, 12) && !zero(12, 15)) return quad(12);
  if (b[0] === 0x00 && b[1] === 0x64 && b[2] === 0xff && b[3] === 0x9b && zero(4, 12)) return quad(12);
  if (b[0] === 0x20 && b[1] === 0x02) return quad(2);
  return null;
}

function inCidr(ip: string, family: 'ipv4' | 'ipv6', cidr: string): boolean {
  const [net, bits] = cidr.split('/');
  if (!net || bits === undefined) return false;
  const netFamily = isIPv4(net) ? 'ipv4' : 'ipv6';
  if (netFamily !== family) return false;
  const list = new BlockList();
  try {
    list.addSubnet(net, Number(bits), netFamily);
  } catch {
    return false;
  }
  return list.check(ip, family);
}

export interface Refusal {
  address: string;
  kind: RefusedKind;
  /** The IPv4 address an IPv6 one carried, when that is what was judged. */
  via?: string;
  /** The local network that matched, for `own network`. */
  network?: LocalNetwork;
}

/**
 * Why a webhook may not connect to `address` by default, or null when it may. `local` is the
 * installer's own networks (localNetworks()). Anything that is not an IP address is refused as
 * reserved: the caller resolves names first.
 */
export function refusalOf(address: string, local: LocalNetwork[]): Refusal | null {
  const ip = address.replace(/^\[|\]$/g, '').split('%')[0]!;
  const v = isIP(ip);
  if (v === 0) return { address, kind: 'reserved' };
  const family = v === 4 ? 'ipv4' : 'ipv6';
  // An IPv6 address that carries an IPv4 one is judged as the address it reaches.
  const v4 = family === 'ipv6' ? embeddedIPv4(ip) : null;
  if (v4) {
    const inner = refusalOf(v4, local);
    if (inner) return { ...inner, address, via: v4 };
  }
  for (const { kind, list } of LISTS) if (list.check(ip, family)) return { address, kind };
  for (const n of local) if (inCidr(ip, family, n.cidr)) return { address, kind: 'own network', network: n };
  return null;
}

/**
 * `127.0.0.1 is a loopback address`, `::ffff:a00:1 (10.0.0.1) is a private-network address`; with
 * `resolvedFrom`, `localhost resolves to 127.0.0.1, a loopback address`.
 */
export function describeRefusal(r: Refusal, resolvedFrom?: string): string {
  const where = r.network ? ` (${r.network.cidr} on ${r.network.interface})` : '';
  const address = `${r.address}${r.via ? ` (${r.via})` : ''}`;
  return resolvedFrom && resolvedFrom !== r.address ? `${resolvedFrom} resolves to ${address}, ${KIND_TEXT[r.kind]}${where}` : `${address} is ${KIND_TEXT[r.kind]}${where}`;
}

/** The host of a URL when it is an IP literal (brackets removed), or null for a name. */
export function literalHost(url: string): string | null {
  let host: string;
  try {
    host = new URL(url).hostname;
  } catch {
    return null;
  }
  const bare = host.replace(/^\[|\]$/g, '');
  return isIP(bare) ? bare : null;
}

// An IPv4 address of this machine on an interface other than loopback: what a container reaches
// the host on, and what counts as one of the installer's own networks.
import { networkInterfaces } from 'node:os';

/** The first such address; throws, saying what needs it (`purpose`), when the machine has none. */
export function ownIPv4(purpose: string): string {
  for (const infos of Object.values(networkInterfaces())) {
    for (const i of infos ?? []) if (i.family === 'IPv4' && !i.internal && !i.address.startsWith('127.')) return i.address;
  }
  throw new Error(`this machine has no IPv4 address but loopback: ${purpose}`);
}

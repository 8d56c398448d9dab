// IP addresses between their text form and the raw bytes netlink carries (network byte order). Node
// has no inet_pton, and the core stores canonical text, so decoding yields RFC 5952 text (lowercase,
// longest zero run compressed) that compares equal to what the core stored.

import * as net from 'node:net';

export const AF_UNSPEC = 0;
export const AF_INET = 2;
export const AF_INET6 = 10;

export type AddressFamily = typeof AF_INET | typeof AF_INET6;

export function familyOf(address: string): AddressFamily {
  const v = net.isIP(address);
  if (v === 4) return AF_INET;
  if (v === 6) return AF_INET6;
  throw new TypeError(`not an IP address: "${address}"`);
}

export function addressBytes(address: string): Buffer {
  const v = net.isIP(address);
  if (v === 4) return ipv4Bytes(address);
  if (v === 6) return ipv6Bytes(address);
  throw new TypeError(`not an IP address: "${address}"`);
}

function ipv4Bytes(address: string): Buffer {
  return Buffer.from(address.split('.').map((p) => Number.parseInt(p, 10)));
}

function ipv6Bytes(address: string): Buffer {
  // Zone ids ("fe80::1%eth0") never reach netlink; drop one if a caller passes it.
  let text = address.split('%')[0] ?? address;
  const out = Buffer.alloc(16);
  // A trailing dotted quad ("::ffff:1.2.3.4") becomes the last two groups.
  const lastColon = text.lastIndexOf(':');
  const tail = text.slice(lastColon + 1);
  if (tail.includes('.')) {
    const v4 = ipv4Bytes(tail);
    text = `${text.slice(0, lastColon + 1)}${v4.readUInt16BE(0).toString(16)}:${v4.readUInt16BE(2).toString(16)}`;
  }
  const [head, rest] = text.split('::') as [string, string | undefined];
  const headGroups = head === '' ? [] : head.split(':');
  const restGroups = rest === undefined || rest === '' ? [] : rest.split(':');
  const groups =
    rest === undefined
      ? headGroups
      : [
          ...headGroups,
          ...new Array<string>(8 - headGroups.length - restGroups.length).fill('0'),
          ...restGroups,
        ];
  groups.forEach((g, i) => out.writeUInt16BE(Number.parseInt(g, 16), i * 2));
  return out;
}

/** Text form of 4 or 16 raw bytes. */
export function formatAddress(bytes: Buffer): string {
  if (bytes.length === 4) return `${bytes[0]}.${bytes[1]}.${bytes[2]}.${bytes[3]}`;
  if (bytes.length === 16) return formatIpv6(bytes);
  throw new RangeError(`an IP address has 4 or 16 bytes, not ${bytes.length}`);
}

function formatIpv6(bytes: Buffer): string {
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(bytes.readUInt16BE(i));
  // Longest run of two or more zero groups; the first one wins a tie (RFC 5952 §4.2.3).
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart === -1) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

/** Canonical text of any accepted spelling ("FD00:0::1" → "fd00::1"). */
export function canonicalAddress(address: string): string {
  return formatAddress(addressBytes(address));
}

/** Splits "10.0.0.0/24" into its address and prefix length. */
export function parseCidr(cidr: string): { address: string; prefixLength: number } {
  const slash = cidr.indexOf('/');
  if (slash === -1) throw new TypeError(`not a CIDR: "${cidr}"`);
  const address = cidr.slice(0, slash);
  const prefixLength = Number(cidr.slice(slash + 1));
  const max = familyOf(address) === AF_INET ? 32 : 128;
  if (!Number.isInteger(prefixLength) || prefixLength < 0 || prefixLength > max) {
    throw new TypeError(`bad prefix length in "${cidr}"`);
  }
  return { address, prefixLength };
}

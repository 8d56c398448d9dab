// IP addresses between their text form and the raw bytes netlink carries (network byte order). The
// core's address math does the parsing and RFC 5952 formatting, so text decoded from the kernel
// compares equal to what the core stored.

import { addressToBytes, formatAddress as formatValue, parseAddress } from '../cidr';

export const AF_UNSPEC = 0;
export const AF_INET = 2;
export const AF_INET6 = 10;

export type AddressFamily = typeof AF_INET | typeof AF_INET6;

export function familyOf(address: string): AddressFamily {
  return parseAddress(address).family === 4 ? AF_INET : AF_INET6;
}

export function addressBytes(address: string): Buffer {
  return addressToBytes(address);
}

/** Text form of 4 or 16 raw bytes. */
export function formatAddress(bytes: Buffer): string {
  if (bytes.length !== 4 && bytes.length !== 16)
    throw new RangeError(`an IP address has 4 or 16 bytes, not ${bytes.length}`);
  return formatValue(bytes.length === 4 ? 4 : 6, BigInt(`0x${bytes.toString('hex')}`));
}

/** Canonical text of any accepted spelling ("FD00:0::1" → "fd00::1"). */
export function canonicalAddress(address: string): string {
  const { family, value } = parseAddress(address);
  return formatValue(family, value);
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

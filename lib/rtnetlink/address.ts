// Interface addresses: RTM_NEWADDR / RTM_DELADDR / RTM_GETADDR.
// Body: struct ifaddrmsg {u8 family; u8 prefixlen; u8 flags; u8 scope; u32 index;} + IFA_* attributes.

import {
  attrBytes,
  attrString,
  attrU32,
  attributeMap,
  encodeAttributes,
  getString,
  getU32,
  readU32,
  writeU32,
} from './attributes';
import { AF_UNSPEC, addressBytes, familyOf, formatAddress, type AddressFamily } from './inet';
import {
  NLM_F_CREATE,
  NLM_F_DUMP,
  NLM_F_EXCL,
  NLM_F_REPLACE,
  type NetlinkMessage,
  type NetlinkRequest,
} from './message';
import type { NetlinkSocket } from './socket';

export const RTM_NEWADDR = 20;
export const RTM_DELADDR = 21;
export const RTM_GETADDR = 22;

export const IFA_ADDRESS = 1;
export const IFA_LOCAL = 2;
export const IFA_LABEL = 3;
export const IFA_BROADCAST = 4;
export const IFA_CACHEINFO = 6;
export const IFA_FLAGS = 8;

// Address flags (IFA_F_*).
export const IFA_F_SECONDARY = 0x01;
/** Skip duplicate address detection: the address is usable at once instead of after ~1 s. */
export const IFA_F_NODAD = 0x02;
export const IFA_F_DADFAILED = 0x08;
export const IFA_F_TENTATIVE = 0x40;
export const IFA_F_PERMANENT = 0x80;
/** Do not add the prefix route the kernel would otherwise derive from the prefix length. */
export const IFA_F_NOPREFIXROUTE = 0x200;

export const IFADDRMSG_LEN = 8;

export interface AddressSpec {
  /** ifindex of the interface. */
  index: number;
  address: string;
  prefixLength: number;
  /** IFA_F_* flags, e.g. IFA_F_NODAD. */
  flags?: number;
  /** RT_SCOPE_*; the kernel derives it for IPv6. */
  scope?: number;
  /** IPv4 label ("eth0:1"); must start with the interface name. */
  label?: string;
}

export interface Address {
  family: AddressFamily;
  index: number;
  address: string;
  /** IFA_LOCAL when it differs from IFA_ADDRESS (point-to-point peers). */
  local?: string;
  prefixLength: number;
  flags: number;
  scope: number;
  label?: string;
}

function ifaddrmsg(
  family: number,
  prefixLength: number,
  flags: number,
  scope: number,
  index: number,
): Buffer {
  const b = Buffer.alloc(IFADDRMSG_LEN);
  b.writeUInt8(family, 0);
  b.writeUInt8(prefixLength, 1);
  b.writeUInt8(flags & 0xff, 2);
  b.writeUInt8(scope, 3);
  writeU32(b, index, 4);
  return b;
}

function addressPayload(spec: AddressSpec): Buffer {
  const family = familyOf(spec.address);
  const bytes = addressBytes(spec.address);
  const flags = spec.flags ?? 0;
  const attrs = [attrBytes(IFA_LOCAL, bytes), attrBytes(IFA_ADDRESS, bytes)];
  // ifa_flags has only 8 bits; IFA_FLAGS carries the rest (NOPREFIXROUTE and up).
  if (flags > 0xff) attrs.push(attrU32(IFA_FLAGS, flags));
  if (spec.label !== undefined) attrs.push(attrString(IFA_LABEL, spec.label));
  return Buffer.concat([
    ifaddrmsg(family, spec.prefixLength, flags, spec.scope ?? 0, spec.index),
    encodeAttributes(attrs),
  ]);
}

/** RTM_NEWADDR; EEXIST if the address is already on the interface, unless `replace`. */
export function newAddressRequest(spec: AddressSpec, opts: { replace?: boolean } = {}): NetlinkRequest {
  return {
    type: RTM_NEWADDR,
    flags: NLM_F_CREATE | (opts.replace ? NLM_F_REPLACE : NLM_F_EXCL),
    payload: addressPayload(spec),
  };
}

/** RTM_DELADDR; EADDRNOTAVAIL when the address is not there. */
export function delAddressRequest(spec: AddressSpec): NetlinkRequest {
  return { type: RTM_DELADDR, flags: 0, payload: addressPayload(spec) };
}

/** RTM_GETADDR dump of all addresses of one family (or both with AF_UNSPEC). */
export function dumpAddressesRequest(family: number = AF_UNSPEC): NetlinkRequest {
  return { type: RTM_GETADDR, flags: NLM_F_DUMP, payload: ifaddrmsg(family, 0, 0, 0, 0) };
}

export function decodeAddress(msg: NetlinkMessage): Address {
  const p = msg.payload;
  if (p.length < IFADDRMSG_LEN) throw new RangeError('truncated ifaddrmsg');
  const attrs = attributeMap(p.subarray(IFADDRMSG_LEN));
  const addr = attrs.get(IFA_ADDRESS);
  const local = attrs.get(IFA_LOCAL);
  const primary = addr ?? local;
  if (!primary) throw new RangeError('address message without IFA_ADDRESS or IFA_LOCAL');
  const extFlags = attrs.get(IFA_FLAGS);
  const label = attrs.get(IFA_LABEL);
  const out: Address = {
    family: p.readUInt8(0) as AddressFamily,
    prefixLength: p.readUInt8(1),
    flags: extFlags ? getU32(extFlags) : p.readUInt8(2),
    scope: p.readUInt8(3),
    index: readU32(p, 4),
    address: formatAddress(primary),
  };
  if (local && addr && !local.equals(addr)) out.local = formatAddress(local);
  if (label) out.label = getString(label);
  return out;
}

/** Addresses in the socket's namespace, optionally only one family and/or interface. */
export async function listAddresses(
  sock: NetlinkSocket,
  filter: { family?: AddressFamily; index?: number } = {},
): Promise<Address[]> {
  const replies = await sock.dump(dumpAddressesRequest(filter.family ?? AF_UNSPEC));
  return replies
    .filter((m) => m.type === RTM_NEWADDR)
    .map(decodeAddress)
    .filter((a) => filter.index === undefined || a.index === filter.index);
}

// Neighbours: RTM_NEWNEIGH / RTM_DELNEIGH / RTM_GETNEIGH.
// Body: struct ndmsg {u8 family; u8 pad1; u16 pad2; s32 ifindex; u16 state; u8 flags; u8 type;} + NDA_*.
//
// The same messages carry two tables: the ARP/NDP table (family AF_INET / AF_INET6: an IP address and
// its MAC) and, with family AF_BRIDGE, a device's forwarding database (a MAC and, on a VXLAN device
// with NTF_SELF, the underlay address of the tunnel endpoint behind it).

import {
  attrBytes,
  attrU32,
  attributeMap,
  encodeAttributes,
  getU32,
  readS32,
  readU16,
  writeS32,
  writeU16,
  type Attribute,
} from './attributes';
import { AF_INET, AF_INET6, addressBytes, formatAddress } from './inet';
import { formatMac, macBytes } from './mac-address';
import {
  NLM_F_CREATE,
  NLM_F_DUMP,
  NLM_F_EXCL,
  NLM_F_REPLACE,
  type NetlinkMessage,
  type NetlinkRequest,
} from './message';
import type { NetlinkSocket } from './socket';

export const RTM_NEWNEIGH = 28;
export const RTM_DELNEIGH = 29;
export const RTM_GETNEIGH = 30;

export const AF_BRIDGE = 7;

export const NDA_DST = 1;
export const NDA_LLADDR = 2;
export const NDA_IFINDEX = 8;

// Neighbour states (NUD_*).
export const NUD_INCOMPLETE = 0x01;
export const NUD_REACHABLE = 0x02;
export const NUD_STALE = 0x04;
export const NUD_FAILED = 0x20;
export const NUD_NOARP = 0x40;
export const NUD_PERMANENT = 0x80;

// ndm_flags.
/** The entry belongs to the device itself (a VXLAN FDB), not to a bridge it is a port of. */
export const NTF_SELF = 0x02;
export const NTF_MASTER = 0x04;

export const NDMSG_LEN = 12;

export type NeighbourFamily = typeof AF_INET | typeof AF_INET6 | typeof AF_BRIDGE;

export interface NeighbourSpec {
  family: NeighbourFamily;
  ifindex: number;
  /** NDA_DST: the IP address (ARP/NDP), or a VXLAN FDB entry's remote underlay address. */
  dst?: string;
  /** NDA_LLADDR: the MAC. */
  mac?: string;
  /** NUD_*; default NUD_PERMANENT. */
  state?: number;
  /** NTF_*. */
  flags?: number;
}

export interface Neighbour {
  family: number;
  ifindex: number;
  state: number;
  flags: number;
  dst?: string;
  mac?: string;
}

function ndmsg(f: { family: number; ifindex: number; state: number; flags: number }): Buffer {
  const b = Buffer.alloc(NDMSG_LEN);
  b.writeUInt8(f.family, 0);
  writeS32(b, f.ifindex, 4);
  writeU16(b, f.state, 8);
  b.writeUInt8(f.flags, 10);
  return b;
}

function neighbourPayload(spec: NeighbourSpec, state: number): Buffer {
  const attrs: Attribute[] = [];
  if (spec.dst !== undefined) attrs.push(attrBytes(NDA_DST, addressBytes(spec.dst)));
  if (spec.mac !== undefined) attrs.push(attrBytes(NDA_LLADDR, macBytes(spec.mac)));
  return Buffer.concat([
    ndmsg({ family: spec.family, ifindex: spec.ifindex, state, flags: spec.flags ?? 0 }),
    encodeAttributes(attrs),
  ]);
}

/**
 * RTM_NEWNEIGH. With `replace` an existing entry for the same key (address, or MAC for an FDB entry)
 * takes the new values; without it an existing entry is EEXIST.
 */
export function newNeighbourRequest(spec: NeighbourSpec, opts: { replace?: boolean } = {}): NetlinkRequest {
  return {
    type: RTM_NEWNEIGH,
    flags: NLM_F_CREATE | (opts.replace ? NLM_F_REPLACE : NLM_F_EXCL),
    payload: neighbourPayload(spec, spec.state ?? NUD_PERMANENT),
  };
}

/** RTM_DELNEIGH; ENOENT when there is no such entry. */
export function delNeighbourRequest(spec: NeighbourSpec): NetlinkRequest {
  return { type: RTM_DELNEIGH, flags: 0, payload: neighbourPayload(spec, spec.state ?? 0) };
}

/** RTM_GETNEIGH dump of one family (AF_BRIDGE: every device's forwarding database). */
export function dumpNeighboursRequest(family: NeighbourFamily, ifindex?: number): NetlinkRequest {
  // The ifindex attribute narrows an ARP/NDP dump in the kernel; an FDB dump takes a bare ndmsg.
  const attrs = ifindex !== undefined && family !== AF_BRIDGE ? [attrU32(NDA_IFINDEX, ifindex)] : [];
  return {
    type: RTM_GETNEIGH,
    flags: NLM_F_DUMP,
    payload: Buffer.concat([ndmsg({ family, ifindex: 0, state: 0, flags: 0 }), encodeAttributes(attrs)]),
  };
}

export function decodeNeighbour(msg: NetlinkMessage): Neighbour {
  const p = msg.payload;
  if (p.length < NDMSG_LEN) throw new RangeError('truncated ndmsg');
  const n: Neighbour = {
    family: p.readUInt8(0),
    ifindex: readS32(p, 4),
    state: readU16(p, 8),
    flags: p.readUInt8(10),
  };
  const attrs = attributeMap(p.subarray(NDMSG_LEN));
  const dst = attrs.get(NDA_DST);
  if (dst && (dst.length === 4 || dst.length === 16)) n.dst = formatAddress(dst);
  const mac = attrs.get(NDA_LLADDR);
  if (mac && mac.length === 6) n.mac = formatMac(mac);
  const ifindex = attrs.get(NDA_IFINDEX);
  if (ifindex && n.ifindex === 0) n.ifindex = getU32(ifindex);
  return n;
}

/** Neighbours (or FDB entries) of one family, only those on `ifindex` when given. */
export async function listNeighbours(
  sock: NetlinkSocket,
  family: NeighbourFamily,
  filter: { ifindex?: number } = {},
): Promise<Neighbour[]> {
  const replies = await sock.dump(dumpNeighboursRequest(family, filter.ifindex));
  return replies
    .filter((m) => m.type === RTM_NEWNEIGH)
    .map(decodeNeighbour)
    .filter((n) => n.family === family && (filter.ifindex === undefined || n.ifindex === filter.ifindex));
}

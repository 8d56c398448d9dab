// Routes: RTM_NEWROUTE / RTM_DELROUTE / RTM_GETROUTE.
// Body: struct rtmsg {u8 family, dst_len, src_len, tos, table, protocol, scope, type; u32 flags;} + RTA_*.

import {
  attrBytes,
  attrNest,
  attrU32,
  attributeMap,
  encodeAttributes,
  getU32,
  readU32,
  writeU32,
  type Attribute,
} from './attributes';
import { NetlinkError } from './errors';
import {
  AF_INET,
  AF_INET6,
  addressBytes,
  familyOf,
  formatAddress,
  parseCidr,
  type AddressFamily,
} from './inet';
import {
  NLM_F_CREATE,
  NLM_F_DUMP,
  NLM_F_EXCL,
  NLM_F_REPLACE,
  type NetlinkMessage,
  type NetlinkRequest,
} from './message';
import type { NetlinkSocket } from './socket';

export const RTM_NEWROUTE = 24;
export const RTM_DELROUTE = 25;
export const RTM_GETROUTE = 26;

export const RTA_DST = 1;
export const RTA_SRC = 2;
export const RTA_IIF = 3;
export const RTA_OIF = 4;
export const RTA_GATEWAY = 5;
export const RTA_PRIORITY = 6;
export const RTA_PREFSRC = 7;
export const RTA_METRICS = 8;
export const RTA_TABLE = 15;

/** Inside RTA_METRICS (enum RTAX_*): the path MTU of packets taking the route. */
export const RTAX_MTU = 2;

export const RT_TABLE_UNSPEC = 0;
export const RT_TABLE_MAIN = 254;
export const RT_TABLE_LOCAL = 255;

export const RTPROT_UNSPEC = 0;
export const RTPROT_KERNEL = 2;
export const RTPROT_BOOT = 3;
export const RTPROT_STATIC = 4;
/**
 * Our own protocol number on the fabric's routes (rtm_protocol is only a label to the kernel): a route
 * carrying it is ours to change or remove, any other is left alone. 0x77 ("w") is unassigned in
 * /etc/iproute2/rt_protos and by the routing daemons that use this field (bird 12, zebra 11, …).
 */
export const RTPROT_WORKLOADNET = 0x77;

export const RT_SCOPE_UNIVERSE = 0;
export const RT_SCOPE_LINK = 253;
export const RT_SCOPE_HOST = 254;
/** In a delete: match a route of any scope. */
export const RT_SCOPE_NOWHERE = 255;

export const RTN_UNICAST = 1;
export const RTN_LOCAL = 2;
export const RTN_BLACKHOLE = 6;
/** Traffic to the destination is refused at once with "network unreachable" (ICMP or ENETUNREACH). */
export const RTN_UNREACHABLE = 7;

/** rtm_flags: the gateway is on the link even though no route says so. */
export const RTNH_F_ONLINK = 0x4;
/** rtm_flags on a GETROUTE lookup: answer with the matching FIB entry, not a resolved /32 result. */
export const RTM_F_FIB_MATCH = 0x2000;

export const RTMSG_LEN = 12;

export interface RouteSpec {
  /** "10.0.0.0/24", "10.0.0.5/32", or "default" (needs `family`, else derived from the gateway). */
  destination: string;
  family?: AddressFamily;
  gateway?: string;
  /** Output interface ifindex. */
  oif?: number;
  /** RT_SCOPE_*; defaults to LINK for a route without a gateway, UNIVERSE otherwise. */
  scope?: number;
  table?: number;
  protocol?: number;
  type?: number;
  /** Treat the gateway as directly reachable on `oif` (RTNH_F_ONLINK). */
  onlink?: boolean;
  priority?: number;
  prefsrc?: string;
  /** Path MTU of the route (RTA_METRICS → RTAX_MTU). */
  mtu?: number;
}

export interface Route {
  family: AddressFamily;
  /** "10.0.0.0/24", "0.0.0.0/0", "::/0". */
  destination: string;
  gateway?: string;
  oif?: number;
  table: number;
  protocol: number;
  scope: number;
  type: number;
  flags: number;
  priority?: number;
  prefsrc?: string;
  mtu?: number;
}

function resolveDestination(spec: RouteSpec): { family: AddressFamily; dst?: Buffer; dstLen: number } {
  if (spec.destination === 'default') {
    const family = spec.family ?? (spec.gateway !== undefined ? familyOf(spec.gateway) : undefined);
    if (family === undefined) throw new TypeError('a default route needs a family or a gateway');
    return { family, dstLen: 0 };
  }
  const { address, prefixLength } = parseCidr(spec.destination);
  return { family: familyOf(address), dst: addressBytes(address), dstLen: prefixLength };
}

function rtmsg(f: {
  family: number;
  dstLen: number;
  table: number;
  protocol: number;
  scope: number;
  type: number;
  flags: number;
}): Buffer {
  const b = Buffer.alloc(RTMSG_LEN);
  b.writeUInt8(f.family, 0);
  b.writeUInt8(f.dstLen, 1);
  b.writeUInt8(0, 2); // src_len
  b.writeUInt8(0, 3); // tos
  b.writeUInt8(f.table > 255 ? RT_TABLE_UNSPEC : f.table, 4);
  b.writeUInt8(f.protocol, 5);
  b.writeUInt8(f.scope, 6);
  b.writeUInt8(f.type, 7);
  writeU32(b, f.flags, 8);
  return b;
}

function routePayload(spec: RouteSpec, defaults: { protocol: number; type: number }): Buffer {
  const { family, dst, dstLen } = resolveDestination(spec);
  const table = spec.table ?? RT_TABLE_MAIN;
  const attrs: Attribute[] = [];
  if (dst) attrs.push(attrBytes(RTA_DST, dst));
  if (spec.gateway !== undefined) {
    if (familyOf(spec.gateway) !== family)
      throw new TypeError(`gateway ${spec.gateway} is not in the route's family`);
    attrs.push(attrBytes(RTA_GATEWAY, addressBytes(spec.gateway)));
  }
  if (spec.oif !== undefined) attrs.push(attrU32(RTA_OIF, spec.oif));
  if (spec.priority !== undefined) attrs.push(attrU32(RTA_PRIORITY, spec.priority));
  if (spec.prefsrc !== undefined) attrs.push(attrBytes(RTA_PREFSRC, addressBytes(spec.prefsrc)));
  if (spec.mtu !== undefined) attrs.push(attrNest(RTA_METRICS, [attrU32(RTAX_MTU, spec.mtu)]));
  // Tables above 255 only fit in RTA_TABLE; sending it always is harmless.
  attrs.push(attrU32(RTA_TABLE, table));
  const type = spec.type ?? defaults.type;
  // A route without a gateway is on-link, except the ones that go nowhere (unreachable, blackhole):
  // `ip route` gives those universe scope too.
  const linkScoped = spec.gateway === undefined && (type === RTN_UNICAST || type === 0);
  const scope = spec.scope ?? (linkScoped ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE);
  return Buffer.concat([
    rtmsg({
      family,
      dstLen,
      table,
      protocol: spec.protocol ?? defaults.protocol,
      scope,
      type,
      flags: spec.onlink ? RTNH_F_ONLINK : 0,
    }),
    encodeAttributes(attrs),
  ]);
}

/** RTM_NEWROUTE; EEXIST if the same route exists, unless `replace`. */
export function newRouteRequest(spec: RouteSpec, opts: { replace?: boolean } = {}): NetlinkRequest {
  return {
    type: RTM_NEWROUTE,
    flags: NLM_F_CREATE | (opts.replace ? NLM_F_REPLACE : NLM_F_EXCL),
    payload: routePayload(spec, { protocol: RTPROT_BOOT, type: RTN_UNICAST }),
  };
}

/** RTM_DELROUTE; ESRCH when no such route exists. Unset fields match any value. */
export function delRouteRequest(spec: RouteSpec): NetlinkRequest {
  return {
    type: RTM_DELROUTE,
    flags: 0,
    payload: routePayload({ scope: RT_SCOPE_NOWHERE, ...spec }, { protocol: RTPROT_UNSPEC, type: 0 }),
  };
}

/** RTM_GETROUTE dump of one family's routes (all tables). */
export function dumpRoutesRequest(family: AddressFamily): NetlinkRequest {
  return {
    type: RTM_GETROUTE,
    flags: NLM_F_DUMP,
    payload: rtmsg({ family, dstLen: 0, table: 0, protocol: 0, scope: 0, type: 0, flags: 0 }),
  };
}

/** RTM_GETROUTE lookup: which FIB entry would carry traffic to `address`. */
export function lookupRouteRequest(address: string): NetlinkRequest {
  const family = familyOf(address);
  return {
    type: RTM_GETROUTE,
    flags: 0,
    payload: Buffer.concat([
      rtmsg({
        family,
        dstLen: family === AF_INET ? 32 : 128,
        table: 0,
        protocol: 0,
        scope: 0,
        type: 0,
        flags: RTM_F_FIB_MATCH,
      }),
      encodeAttributes([attrBytes(RTA_DST, addressBytes(address))]),
    ]),
  };
}

export function decodeRoute(msg: NetlinkMessage): Route {
  const p = msg.payload;
  if (p.length < RTMSG_LEN) throw new RangeError('truncated rtmsg');
  const family = p.readUInt8(0) as AddressFamily;
  const dstLen = p.readUInt8(1);
  const attrs = attributeMap(p.subarray(RTMSG_LEN));
  const dst = attrs.get(RTA_DST);
  const zero = family === AF_INET6 ? '::' : '0.0.0.0';
  const table = attrs.get(RTA_TABLE);
  const route: Route = {
    family,
    destination: `${dst ? formatAddress(dst) : zero}/${dstLen}`,
    table: table ? getU32(table) : p.readUInt8(4),
    protocol: p.readUInt8(5),
    scope: p.readUInt8(6),
    type: p.readUInt8(7),
    flags: readU32(p, 8),
  };
  const gw = attrs.get(RTA_GATEWAY);
  if (gw) route.gateway = formatAddress(gw);
  const oif = attrs.get(RTA_OIF);
  if (oif) route.oif = getU32(oif);
  const prio = attrs.get(RTA_PRIORITY);
  if (prio) route.priority = getU32(prio);
  const prefsrc = attrs.get(RTA_PREFSRC);
  if (prefsrc) route.prefsrc = formatAddress(prefsrc);
  const metrics = attrs.get(RTA_METRICS);
  const mtu = metrics ? attributeMap(metrics).get(RTAX_MTU) : undefined;
  if (mtu) route.mtu = getU32(mtu);
  return route;
}

/** Routes of one family, by default only the main table's unicast routes (what `ip route` shows). */
export async function listRoutes(
  sock: NetlinkSocket,
  family: AddressFamily,
  filter: { table?: number; oif?: number; protocol?: number; type?: number } = {},
): Promise<Route[]> {
  const table = filter.table ?? RT_TABLE_MAIN;
  const replies = await sock.dump(dumpRoutesRequest(family));
  return replies
    .filter((m) => m.type === RTM_NEWROUTE)
    .map(decodeRoute)
    .filter(
      (r) =>
        r.table === table &&
        (filter.oif === undefined || r.oif === filter.oif) &&
        (filter.protocol === undefined || r.protocol === filter.protocol) &&
        (filter.type === undefined || r.type === filter.type),
    );
}

/** The FIB entry traffic to `address` would use, or undefined when there is none (ENETUNREACH). */
export async function lookupRoute(sock: NetlinkSocket, address: string): Promise<Route | undefined> {
  try {
    const replies = await sock.request(lookupRouteRequest(address));
    const msg = replies.find((m) => m.type === RTM_NEWROUTE);
    return msg ? decodeRoute(msg) : undefined;
  } catch (err) {
    if (err instanceof NetlinkError && (err.code === 'ENETUNREACH' || err.code === 'EHOSTUNREACH'))
      return undefined;
    throw err;
  }
}

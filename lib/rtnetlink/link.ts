// Links (network interfaces): RTM_NEWLINK / RTM_SETLINK / RTM_DELLINK / RTM_GETLINK. A veth pair's
// create is in veth.ts, a vxlan link's settings in vxlan.ts.
// Body: struct ifinfomsg {u8 family; u8 pad; u16 type; s32 index; u32 flags; u32 change;} + IFLA_* attributes.

import {
  attrBytes,
  attrNest,
  attrString,
  attrU32,
  attrU8,
  attributeMap,
  decodeAttributes,
  encodeAttributes,
  getS32,
  getString,
  getU32,
  getU8,
  readS32,
  readU32,
  writeS32,
  writeU16,
  writeU32,
  type Attribute,
} from './attributes';
import { NetlinkError } from './errors';
import { AF_INET, AF_INET6, AF_UNSPEC } from './inet';
import { formatMac, macBytes } from './mac-address';
import {
  NLM_F_CREATE,
  NLM_F_DUMP,
  NLM_F_ECHO,
  NLM_F_EXCL,
  type NetlinkMessage,
  type NetlinkRequest,
} from './message';
import type { NetlinkSocket } from './socket';
import { decodeVxlanInfo, type VxlanInfo } from './vxlan';

export const RTM_NEWLINK = 16;
export const RTM_DELLINK = 17;
export const RTM_GETLINK = 18;
export const RTM_SETLINK = 19;

// Interface flags (net/if.h).
export const IFF_UP = 0x1;
export const IFF_BROADCAST = 0x2;
export const IFF_LOOPBACK = 0x8;
export const IFF_POINTOPOINT = 0x10;
export const IFF_RUNNING = 0x40;
export const IFF_NOARP = 0x80;
export const IFF_LOWER_UP = 0x10000;

// enum IFLA_* (linux/if_link.h), the ones we read or write.
export const IFLA_ADDRESS = 1;
export const IFLA_IFNAME = 3;
export const IFLA_MTU = 4;
export const IFLA_LINK = 5;
export const IFLA_MASTER = 10;
export const IFLA_TXQLEN = 13;
export const IFLA_OPERSTATE = 16;
export const IFLA_LINKINFO = 18;
export const IFLA_IFALIAS = 20;
export const IFLA_AF_SPEC = 26;
export const IFLA_GROUP = 27;
export const IFLA_NET_NS_FD = 28;
export const IFLA_EXT_MASK = 29;
export const IFLA_NUM_TX_QUEUES = 31;
export const IFLA_NUM_RX_QUEUES = 32;
export const IFLA_CARRIER = 33;
export const IFLA_LINK_NETNSID = 37;

// Inside IFLA_LINKINFO.
export const IFLA_INFO_KIND = 1;
export const IFLA_INFO_DATA = 2;

// Inside IFLA_AF_SPEC → AF_INET / AF_INET6.
export const IFLA_INET_CONF = 1;
export const IFLA_INET6_CONF = 1;
export const IFLA_INET6_ADDR_GEN_MODE = 8;
/** enum in6_addr_gen_mode: no automatic link-local (or other) address at all. */
export const IN6_ADDR_GEN_MODE_NONE = 1;

/** Per-interface IPv4 settings (enum IPV4_DEVCONF_*; /proc/sys/net/ipv4/conf/<if>/…). */
export const IPV4_DEVCONF_FORWARDING = 1;
export const IPV4_DEVCONF_PROXY_ARP = 3;
export const IPV4_DEVCONF_RP_FILTER = 8;

/** IFLA_EXT_MASK bit: leave the (large) statistics out of GETLINK answers. */
export const RTEXT_FILTER_SKIP_STATS = 1 << 3;

export const IFINFOMSG_LEN = 16;

/** Which link a request is about: by index (preferred, cannot be raced by a rename) or by name. */
export interface LinkSelector {
  index?: number;
  name?: string;
}

/** Properties that can be set on creation or later with RTM_SETLINK. */
export interface LinkSettings {
  /** New name (with `index` in the selector this renames). */
  name?: string;
  mtu?: number;
  /** "aa:bb:cc:dd:ee:ff". */
  mac?: string;
  group?: number;
  /** IFLA_IFALIAS, free text up to 255 bytes. An empty string removes the alias. */
  alias?: string;
  /** Move the link into the namespace behind this fd (IFLA_NET_NS_FD). */
  netnsFd?: number;
  /** IFF_UP on (true) or off (false); undefined leaves it. */
  up?: boolean;
  txQueueLen?: number;
  /**
   * IPv4 per-interface settings by IPV4_DEVCONF_* id, e.g. {[IPV4_DEVCONF_PROXY_ARP]: 1}. The kernel
   * refuses these on a create (EAFNOSUPPORT), so send them in a follow-up RTM_SETLINK.
   */
  inetConf?: Readonly<Record<number, number>>;
  /** IPv6 address generation mode (IN6_ADDR_GEN_MODE_*); the only IPv6 knob SETLINK accepts. */
  inet6AddrGenMode?: number;
}

/** RTM_NEWLINK for a new interface of a given kind. */
export interface NewLinkSpec extends LinkSettings {
  name: string;
  kind: string;
  /** IFLA_INFO_DATA content, kind-specific. */
  infoData?: readonly Attribute[];
  /** Transmit and receive queues (IFLA_NUM_TX_QUEUES, IFLA_NUM_RX_QUEUES); only a create sets them. */
  queues?: number;
}

/** A link as the kernel reports it. */
export interface Link {
  index: number;
  name: string;
  flags: number;
  /** IFF_UP is set. */
  up: boolean;
  mtu: number;
  mac?: string;
  group: number;
  alias?: string;
  /** IFLA_LINK: for a veth, the peer's ifindex (in the peer's namespace). */
  linkIndex?: number;
  /** IFLA_LINK_NETNSID: the namespace id of `linkIndex`, relative to the socket's namespace. */
  linkNetnsId?: number;
  masterIndex?: number;
  kind?: string;
  operstate?: number;
  carrier?: boolean;
  /** IPv4 per-interface settings, indexed by IPV4_DEVCONF_* id (index 0 unused). */
  inetConf?: number[];
  /** A vxlan link's settings (kind "vxlan"). */
  vxlan?: VxlanInfo;
}

// ---- wire encoding ----

export function encodeIfinfomsg(
  fields: { family?: number; type?: number; index?: number; flags?: number; change?: number } = {},
): Buffer {
  const b = Buffer.alloc(IFINFOMSG_LEN);
  b.writeUInt8(fields.family ?? AF_UNSPEC, 0);
  writeU16(b, fields.type ?? 0, 2);
  writeS32(b, fields.index ?? 0, 4);
  writeU32(b, fields.flags ?? 0, 8);
  writeU32(b, fields.change ?? 0, 12);
  return b;
}

function upFlags(up: boolean | undefined): { flags: number; change: number } {
  if (up === undefined) return { flags: 0, change: 0 };
  return { flags: up ? IFF_UP : 0, change: IFF_UP };
}

function settingsAttributes(s: LinkSettings): Attribute[] {
  const attrs: Attribute[] = [];
  if (s.name !== undefined) attrs.push(attrString(IFLA_IFNAME, s.name));
  if (s.mtu !== undefined) attrs.push(attrU32(IFLA_MTU, s.mtu));
  if (s.mac !== undefined) attrs.push(attrBytes(IFLA_ADDRESS, macBytes(s.mac)));
  if (s.group !== undefined) attrs.push(attrU32(IFLA_GROUP, s.group));
  if (s.txQueueLen !== undefined) attrs.push(attrU32(IFLA_TXQLEN, s.txQueueLen));
  // The alias is a plain NLA_STRING of at most IFALIASZ-1 bytes; without a NUL an empty one clears it.
  if (s.alias !== undefined) attrs.push(attrBytes(IFLA_IFALIAS, Buffer.from(s.alias, 'utf8')));
  if (s.netnsFd !== undefined) attrs.push(attrU32(IFLA_NET_NS_FD, s.netnsFd));
  const af: Attribute[] = [];
  if (s.inetConf !== undefined) {
    const conf = Object.entries(s.inetConf).map(([id, v]) => attrU32(Number(id), v));
    af.push(attrNest(AF_INET, [attrNest(IFLA_INET_CONF, conf)]));
  }
  if (s.inet6AddrGenMode !== undefined) {
    af.push(attrNest(AF_INET6, [attrU8(IFLA_INET6_ADDR_GEN_MODE, s.inet6AddrGenMode)]));
  }
  if (af.length > 0) attrs.push(attrNest(IFLA_AF_SPEC, af));
  return attrs;
}

/** IFLA_NUM_TX_QUEUES and IFLA_NUM_RX_QUEUES, both `queues`: only a create sets them. */
export function queueAttributes(queues: number | undefined): Attribute[] {
  if (queues === undefined) return [];
  return [attrU32(IFLA_NUM_TX_QUEUES, queues), attrU32(IFLA_NUM_RX_QUEUES, queues)];
}

function selectorHeader(sel: LinkSelector, extra: { flags: number; change: number }): Buffer {
  if (sel.index === undefined && sel.name === undefined)
    throw new TypeError('a link selector needs an index or a name');
  return encodeIfinfomsg({ index: sel.index ?? 0, ...extra });
}

function selectorAttributes(sel: LinkSelector): Attribute[] {
  // With an index the kernel ignores IFLA_IFNAME for lookup and treats it as a rename, so only send
  // the name when it is the selector.
  return sel.index === undefined && sel.name !== undefined ? [attrString(IFLA_IFNAME, sel.name)] : [];
}

/** RTM_NEWLINK creating a link; fails with EEXIST rather than modifying one that exists. */
export function newLinkRequest(spec: NewLinkSpec, opts: { echo?: boolean } = {}): NetlinkRequest {
  const { kind, infoData, queues, ...settings } = spec;
  const linkinfo: Attribute[] = [attrString(IFLA_INFO_KIND, kind)];
  if (infoData) linkinfo.push(attrNest(IFLA_INFO_DATA, infoData));
  const payload = Buffer.concat([
    encodeIfinfomsg(upFlags(settings.up)),
    encodeAttributes([
      ...settingsAttributes(settings),
      ...queueAttributes(queues),
      attrNest(IFLA_LINKINFO, linkinfo),
    ]),
  ]);
  return { type: RTM_NEWLINK, flags: NLM_F_CREATE | NLM_F_EXCL | (opts.echo ? NLM_F_ECHO : 0), payload };
}

/** RTM_SETLINK: change settings of an existing link. */
export function setLinkRequest(sel: LinkSelector, change: LinkSettings): NetlinkRequest {
  const { up, ...rest } = change;
  const payload = Buffer.concat([
    selectorHeader(sel, upFlags(up)),
    encodeAttributes([...selectorAttributes(sel), ...settingsAttributes(rest)]),
  ]);
  return { type: RTM_SETLINK, flags: 0, payload };
}

/** RTM_DELLINK. Deleting either end of a veth deletes the pair. */
export function delLinkRequest(sel: LinkSelector): NetlinkRequest {
  const payload = Buffer.concat([
    selectorHeader(sel, { flags: 0, change: 0 }),
    encodeAttributes(selectorAttributes(sel)),
  ]);
  return { type: RTM_DELLINK, flags: 0, payload };
}

/**
 * RTM_DELLINK of every link in a group (ENODEV when the group is empty). The kernel unregisters them
 * in one unregister_netdevice_many(), paying its RCU waits once for all of them.
 */
export function delLinkGroupRequest(group: number): NetlinkRequest {
  if (!Number.isInteger(group) || group < 1 || group > 0xffffffff)
    throw new TypeError(`link group must be in 1..4294967295, not ${group}`);
  const payload = Buffer.concat([
    encodeIfinfomsg({ index: 0, flags: 0, change: 0 }),
    encodeAttributes([attrU32(IFLA_GROUP, group)]),
  ]);
  return { type: RTM_DELLINK, flags: 0, payload };
}

/** RTM_GETLINK for one link; ENODEV when it does not exist. */
export function getLinkRequest(sel: LinkSelector): NetlinkRequest {
  const payload = Buffer.concat([
    selectorHeader(sel, { flags: 0, change: 0 }),
    encodeAttributes([...selectorAttributes(sel), attrU32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS)]),
  ]);
  return { type: RTM_GETLINK, flags: 0, payload };
}

/** RTM_GETLINK dump of every link in the namespace (statistics left out to keep replies small). */
export function dumpLinksRequest(): NetlinkRequest {
  const payload = Buffer.concat([
    encodeIfinfomsg(),
    encodeAttributes([attrU32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS)]),
  ]);
  return { type: RTM_GETLINK, flags: NLM_F_DUMP, payload };
}

// ---- decoding ----

export function decodeLink(msg: NetlinkMessage): Link {
  const p = msg.payload;
  if (p.length < IFINFOMSG_LEN) throw new RangeError('truncated ifinfomsg');
  const flags = readU32(p, 8);
  const link: Link = {
    index: readS32(p, 4),
    name: '',
    flags,
    up: (flags & IFF_UP) !== 0,
    mtu: 0,
    group: 0,
  };
  const attrs = attributeMap(p.subarray(IFINFOMSG_LEN));
  for (const [type, v] of attrs) {
    switch (type) {
      case IFLA_IFNAME:
        link.name = getString(v);
        break;
      case IFLA_MTU:
        link.mtu = getU32(v);
        break;
      case IFLA_ADDRESS:
        link.mac = formatMac(v);
        break;
      case IFLA_GROUP:
        link.group = getU32(v);
        break;
      case IFLA_IFALIAS:
        link.alias = getString(v);
        break;
      case IFLA_LINK:
        link.linkIndex = getU32(v);
        break;
      case IFLA_LINK_NETNSID:
        link.linkNetnsId = getS32(v);
        break;
      case IFLA_MASTER:
        link.masterIndex = getU32(v);
        break;
      case IFLA_OPERSTATE:
        link.operstate = getU8(v);
        break;
      case IFLA_CARRIER:
        link.carrier = getU8(v) !== 0;
        break;
      case IFLA_LINKINFO: {
        const info = attributeMap(v);
        const kind = info.get(IFLA_INFO_KIND);
        if (kind) link.kind = getString(kind);
        const data = info.get(IFLA_INFO_DATA);
        if (link.kind === 'vxlan' && data) link.vxlan = decodeVxlanInfo(data);
        break;
      }
      case IFLA_AF_SPEC:
        link.inetConf = decodeInetConf(v);
        break;
    }
  }
  return link;
}

function decodeInetConf(afSpec: Buffer): number[] | undefined {
  for (const af of decodeAttributes(afSpec)) {
    if (af.type !== AF_INET) continue;
    const conf = attributeMap(af.value).get(IFLA_INET_CONF);
    if (!conf) return undefined;
    // In answers IFLA_INET_CONF is a flat u32 array where element i holds setting id i+1 (unlike
    // requests, which carry one attribute per id).
    const out = [0];
    for (let off = 0; off + 4 <= conf.length; off += 4) out.push(readU32(conf, off));
    return out;
  }
  return undefined;
}

// ---- operations on a socket ----

/** One link, or undefined when it does not exist (ENODEV). */
export async function getLink(sock: NetlinkSocket, sel: LinkSelector): Promise<Link | undefined> {
  try {
    const replies = await sock.request(getLinkRequest(sel));
    const msg = replies.find((m) => m.type === RTM_NEWLINK);
    return msg ? decodeLink(msg) : undefined;
  } catch (err) {
    if (err instanceof NetlinkError && err.notFound) return undefined;
    throw err;
  }
}

/** Every link in the socket's namespace, in one dump. */
export async function listLinks(sock: NetlinkSocket): Promise<Link[]> {
  const replies = await sock.dump(dumpLinksRequest());
  return replies.filter((m) => m.type === RTM_NEWLINK).map(decodeLink);
}

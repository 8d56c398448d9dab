// VXLAN links: the IFLA_INFO_DATA of an RTM_NEWLINK with IFLA_INFO_KIND "vxlan" (enum IFLA_VXLAN_* in
// linux/if_link.h), built for a create and decoded from a link dump, so a device can be checked before
// it is adopted.

import { attrBytes, attrU32, attrU8, attributeMap, getU32, getU8, type Attribute } from './attributes';
import { addressBytes, familyOf, formatAddress, AF_INET } from './inet';

export const IFLA_VXLAN_ID = 1;
export const IFLA_VXLAN_GROUP = 2;
export const IFLA_VXLAN_LINK = 3;
export const IFLA_VXLAN_LOCAL = 4;
export const IFLA_VXLAN_TTL = 5;
export const IFLA_VXLAN_LEARNING = 7;
export const IFLA_VXLAN_PORT = 15;
export const IFLA_VXLAN_GROUP6 = 16;
export const IFLA_VXLAN_LOCAL6 = 17;

/** The kernel's default destination port when IFLA_VXLAN_PORT is absent (IANA's is 4789). */
export const VXLAN_KERNEL_DEFAULT_PORT = 8472;

export interface VxlanSpec {
  /** VXLAN network identifier, 24 bits. */
  vni: number;
  /** UDP destination port (and the port the device listens on). */
  port: number;
  /** Source address of outer packets (IPv4 or IPv6). */
  local?: string;
  /** ifindex of the underlay device outer packets leave by. */
  link?: number;
  /** Learn remote MACs from received packets; off for a device programmed entirely by us. */
  learning: boolean;
}

export interface VxlanInfo {
  vni?: number;
  port: number;
  local?: string;
  link?: number;
  learning: boolean;
}

/** IFLA_INFO_DATA of a vxlan create. */
export function vxlanInfoData(spec: VxlanSpec): Attribute[] {
  if (!Number.isInteger(spec.vni) || spec.vni < 0 || spec.vni > 0xffffff)
    throw new TypeError(`VXLAN VNI must be in 0..16777215, not ${spec.vni}`);
  if (!Number.isInteger(spec.port) || spec.port < 1 || spec.port > 0xffff)
    throw new TypeError(`VXLAN port must be in 1..65535, not ${spec.port}`);
  const port = Buffer.alloc(2);
  // The only big-endian attribute of the family: it goes into the UDP header as it is.
  port.writeUInt16BE(spec.port, 0);
  const attrs: Attribute[] = [attrU32(IFLA_VXLAN_ID, spec.vni), attrBytes(IFLA_VXLAN_PORT, port)];
  if (spec.local !== undefined) {
    const type = familyOf(spec.local) === AF_INET ? IFLA_VXLAN_LOCAL : IFLA_VXLAN_LOCAL6;
    attrs.push(attrBytes(type, addressBytes(spec.local)));
  }
  if (spec.link !== undefined) attrs.push(attrU32(IFLA_VXLAN_LINK, spec.link));
  attrs.push(attrU8(IFLA_VXLAN_LEARNING, spec.learning ? 1 : 0));
  return attrs;
}

/** The settings of a vxlan link, from its IFLA_INFO_DATA. */
export function decodeVxlanInfo(data: Buffer): VxlanInfo {
  const attrs = attributeMap(data);
  const info: VxlanInfo = { port: VXLAN_KERNEL_DEFAULT_PORT, learning: true };
  const id = attrs.get(IFLA_VXLAN_ID);
  if (id) info.vni = getU32(id);
  const port = attrs.get(IFLA_VXLAN_PORT);
  if (port && port.length >= 2) info.port = port.readUInt16BE(0);
  const local = attrs.get(IFLA_VXLAN_LOCAL) ?? attrs.get(IFLA_VXLAN_LOCAL6);
  // An unset local address comes back as all zeros.
  if (local && local.some((b) => b !== 0)) info.local = formatAddress(local);
  const link = attrs.get(IFLA_VXLAN_LINK);
  if (link && getU32(link) !== 0) info.link = getU32(link);
  const learning = attrs.get(IFLA_VXLAN_LEARNING);
  if (learning) info.learning = getU8(learning) !== 0;
  return info;
}

// Where this node sits on the underlay: the address peers reach it at, the interface that holds it
// (the uplink), that interface's MTU and the subnets directly connected on it. Read from the kernel
// of the host namespace, never assumed: the operator's --node-ip, else the interface holding the
// default route, as flannel and Calico's autodetection do.

import { failedPrecondition, invalidArgument } from '../../../core/errors';
import { cidrContains, familyBits, formatAddress, parseAddress, type Cidr } from '../../../lib/cidr';
import {
  AF_INET,
  AF_INET6,
  RTN_UNICAST,
  canonicalAddress,
  familyOf,
  getLink,
  listAddresses,
  listRoutes,
  type AddressFamily,
  type Link,
  type NetlinkSocket,
} from '../../../lib/rtnetlink';

export interface Underlay {
  /** The node address outer packets and direct routes use. */
  address: string;
  family: AddressFamily;
  uplink: Link;
  /** Subnets of the uplink's addresses of that family (a /32 or /128 gives none). */
  subnets: Cidr[];
}

function subnetOf(address: string, prefixLength: number): Cidr {
  const { family, value } = parseAddress(address);
  const host = BigInt(familyBits(family) - prefixLength);
  const network = (value >> host) << host;
  return { family, network, prefixLength, text: `${formatAddress(family, network)}/${prefixLength}` };
}

/** Whether `address` lies in one of the subnets directly connected on the uplink. */
export function onLink(underlay: Underlay, address: string): boolean {
  const { family, value } = parseAddress(address);
  return underlay.subnets.some((s) => s.family === family && cidrContains(s, value));
}

/**
 * Finds the underlay. With `nodeIp` the interface holding that address; without, the interface of the
 * main table's IPv4 default route (IPv6 when there is none) and its first global address.
 */
export async function discoverUnderlay(sock: NetlinkSocket, nodeIp: string): Promise<Underlay> {
  let address: string;
  let ifindex: number;
  if (nodeIp !== '') {
    let wanted: string;
    try {
      wanted = canonicalAddress(nodeIp);
    } catch {
      throw invalidArgument(`fabric: node IP "${nodeIp}" is not an IP address`);
    }
    const family = familyOf(wanted);
    const held = (await listAddresses(sock, { family })).find((a) => canonicalAddress(a.address) === wanted);
    if (!held)
      throw failedPrecondition(
        `fabric: node IP ${wanted} is not an address of any interface in ${sock.label}; pick one that is (--node-ip)`,
      );
    address = wanted;
    ifindex = held.index;
  } else {
    let found: { address: string; index: number } | undefined;
    for (const family of [AF_INET, AF_INET6] as const) {
      const route = (await listRoutes(sock, family)).find(
        (r) => r.destination.endsWith('/0') && r.oif !== undefined && r.type === RTN_UNICAST,
      );
      if (route?.oif === undefined) continue;
      const addr = (await listAddresses(sock, { family })).find(
        (a) => a.index === route.oif && a.scope === 0,
      );
      if (addr) {
        found = { address: canonicalAddress(addr.address), index: addr.index };
        break;
      }
    }
    if (!found)
      throw failedPrecondition(
        `fabric: no default route with an addressed interface in ${sock.label} to take the node address from; set --node-ip`,
      );
    address = found.address;
    ifindex = found.index;
  }
  const uplink = await getLink(sock, { index: ifindex });
  if (!uplink) throw failedPrecondition(`fabric: the interface holding ${address} disappeared; retry`);
  const family = familyOf(address);
  const maxLen = family === AF_INET ? 32 : 128;
  const subnets = (await listAddresses(sock, { family, index: ifindex }))
    .filter((a) => a.prefixLength < maxLen)
    .map((a) => subnetOf(a.address, a.prefixLength));
  return { address, family, uplink, subnets };
}

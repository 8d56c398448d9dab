import {
  AF_INET,
  AF_INET6,
  RT_SCOPE_UNIVERSE,
  canonicalAddress,
  getLink,
  listAddresses,
  listRoutes,
  type NetlinkSocket,
} from '../../lib/rtnetlink';
import type { Uplink } from './dataplane';

// The DPU's uplink, as a real DPU's agent would report it: the interface of the DPU namespace that holds
// its default route (IPv4's first, then IPv6's), its global addresses (IPv4 first) and its MTU. An
// operator may name the address instead (--vtep-address); the MTU is then the interface's holding it.

export async function discoverUplink(sock: NetlinkSocket, vtepAddress?: string): Promise<Uplink> {
  if (vtepAddress !== undefined) {
    const want = canonicalAddress(vtepAddress);
    const holder = (await listAddresses(sock)).find((a) => canonicalAddress(a.address) === want);
    const link = holder ? await getLink(sock, { index: holder.index }) : undefined;
    return { addresses: [want], mtu: link?.mtu ?? 0 };
  }
  for (const family of [AF_INET, AF_INET6] as const) {
    const defaults = (await listRoutes(sock, family))
      .filter((r) => r.destination.endsWith('/0') && r.oif !== undefined)
      .sort((a, b) => (a.priority ?? 0) - (b.priority ?? 0));
    const oif = defaults[0]?.oif;
    if (oif === undefined) continue;
    const link = await getLink(sock, { index: oif });
    const addrs = (await listAddresses(sock, { index: oif }))
      .filter((a) => a.scope === RT_SCOPE_UNIVERSE)
      .sort((a, b) => a.family - b.family)
      .map((a) => a.address);
    return { addresses: addrs, mtu: link?.mtu ?? 0 };
  }
  return { addresses: [], mtu: 0 };
}

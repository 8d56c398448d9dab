import { AF_INET, AF_INET6 } from '../../lib/rtnetlink/inet';
import { setLinkRequest, type Link } from '../../lib/rtnetlink/link';
import { RTNH_F_ONLINK, listRoutes, newRouteRequest, type Route } from '../../lib/rtnetlink/route';
import type { NetlinkSocket } from '../../lib/rtnetlink/socket';

// The workload's end of an interface given another MTU in place, whichever backend made it (a veth
// end, a DPU's VF): the link, and the routes on it that carry an MTU of their own. The other end (the
// host's veth end, the DPU's representor) is the backend's; it orders the two so that no end receives
// frames larger than its MTU: going down, the workload's end first; going up, the other end first.

/**
 * Gives the workload's end `link` the MTU `mtu`, with its routes whose MTU follows the interface's (in
 * one write: routes first when it shrinks, so that nothing is sent larger than the link then takes).
 * Returns how many routes it rewrote.
 */
export async function setWorkloadEndMtu(sock: NetlinkSocket, link: Link, mtu: number): Promise<number> {
  const routes = await routesToChange(sock, link, mtu);
  const end = link.mtu === mtu ? [] : [setLinkRequest({ index: link.index }, { mtu })];
  const rewritten = routes.map((r) => newRouteRequest({ ...routeSpec(r), mtu }, { replace: true }));
  const reqs = mtu < link.mtu ? [...rewritten, ...end] : [...end, ...rewritten];
  if (reqs.length > 0) await sock.batchOrThrow(reqs);
  return routes.length;
}

/**
 * The routes on the workload's end whose MTU follows the interface's: ours carry none (they take the
 * interface's), but one that does — set by a chained plugin or by hand — and says the interface's old
 * MTU, or more than the new one (its packets would be dropped by the other end), gets the new one. A
 * route given a smaller MTU on purpose keeps it.
 */
async function routesToChange(sock: NetlinkSocket, link: Link, mtu: number): Promise<Route[]> {
  const out: Route[] = [];
  for (const family of [AF_INET, AF_INET6] as const) {
    for (const r of await listRoutes(sock, family, { oif: link.index })) {
      if (r.mtu === undefined || r.mtu === mtu) continue;
      if (r.mtu === link.mtu || r.mtu > mtu) out.push(r);
    }
  }
  return out;
}

/** A route as it is, to be written again with another MTU. */
function routeSpec(r: Route): Parameters<typeof newRouteRequest>[0] {
  return {
    destination: r.destination,
    family: r.family,
    ...(r.gateway !== undefined ? { gateway: r.gateway } : {}),
    ...(r.oif !== undefined ? { oif: r.oif } : {}),
    scope: r.scope,
    table: r.table,
    protocol: r.protocol,
    type: r.type,
    ...((r.flags & RTNH_F_ONLINK) !== 0 ? { onlink: true } : {}),
    ...(r.priority !== undefined ? { priority: r.priority } : {}),
    ...(r.prefsrc !== undefined ? { prefsrc: r.prefsrc } : {}),
  };
}

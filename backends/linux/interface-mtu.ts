// A running attachment's MTU changed in place (the network's MTU, or what the fabric carries, changed
// since it was attached): both ends of the pair and the routes on the workload's end that carry an MTU
// of their own. Re-attaching would give the workload a new interface (new ifindex, its sockets'
// routes gone, a moment without network); changing the MTU is what `ip link set mtu` does to a running
// interface.
//
// Order matters for packets in flight: a veth drops a frame larger than the MTU of the end that
// receives it. Going down, the workload's routes and end shrink first, so it stops sending what the
// host end would drop; going up, the host end grows first.

import { failedPrecondition } from '../../core/errors';
import { AF_INET, AF_INET6 } from '../../lib/rtnetlink/inet';
import { getLink, setLinkRequest, type Link } from '../../lib/rtnetlink/link';
import type { NetlinkRequest } from '../../lib/rtnetlink/message';
import { RTNH_F_ONLINK, listRoutes, newRouteRequest, type Route } from '../../lib/rtnetlink/route';
import type { NetlinkSocket } from '../../lib/rtnetlink/socket';
import type { AttachPlan } from './attach-plan';

/** Below this an interface loses its IPv6 configuration (RFC 8200's minimum link MTU). */
export const IPV6_MIN_MTU = 1280;

export interface InterfaceMtuSockets {
  /** In the host namespace. */
  host: NetlinkSocket;
  /** In the workload's namespace. */
  workload: NetlinkSocket;
}

/** What a change did: the MTU the workload's end had, and the routes it rewrote. */
export interface InterfaceMtuChange {
  before: number;
  routes: number;
}

/**
 * Sets `mtu` on the attachment's pair, after checking that the two ends are still the pair attach
 * made (the host end labelled with this key, the workload's end its peer): anything else is not ours
 * to change and fails with the reason.
 */
export async function setInterfaceMtu(
  socks: InterfaceMtuSockets,
  plan: AttachPlan,
  hostName: string,
  mtu: number,
): Promise<InterfaceMtuChange> {
  if (mtu < IPV6_MIN_MTU && plan.v6.length > 0)
    throw failedPrecondition(
      `${plan.key}: MTU ${mtu} is below IPv6's minimum (${IPV6_MIN_MTU}); the interface would lose its IPv6 addresses`,
    );
  const hostLink = await getLink(socks.host, { name: hostName });
  if (!hostLink) throw failedPrecondition(`${plan.key}: host interface ${hostName} is missing`);
  if (hostLink.alias !== plan.alias)
    throw failedPrecondition(
      `${plan.key}: host interface ${hostName} is not labelled as this attachment's (alias ${JSON.stringify(hostLink.alias ?? '')}); not changing it`,
    );
  const podLink = await getLink(socks.workload, { name: plan.ifName });
  if (!podLink || podLink.index !== hostLink.linkIndex)
    throw failedPrecondition(
      `${plan.key}: ${plan.ifName} in the workload's namespace is ${podLink ? 'not the peer of' : 'missing beside'} host interface ${hostName}; not changing it`,
    );
  const routes = await routesToChange(socks.workload, podLink, mtu);
  const host = (): Promise<unknown> =>
    hostLink.mtu === mtu
      ? Promise.resolve()
      : socks.host.request(setLinkRequest({ index: hostLink.index }, { mtu }));
  const workloadEnd: NetlinkRequest[] = [
    ...(podLink.mtu === mtu ? [] : [setLinkRequest({ index: podLink.index }, { mtu })]),
  ];
  const routeRequests = routes.map((r) => newRouteRequest({ ...routeSpec(r), mtu }, { replace: true }));
  if (mtu < podLink.mtu) {
    await socks.workload.batchOrThrow([...routeRequests, ...workloadEnd]);
    await host();
  } else {
    await host();
    await socks.workload.batchOrThrow([...workloadEnd, ...routeRequests]);
  }
  return { before: podLink.mtu, routes: routes.length };
}

/**
 * The routes on the workload's end whose MTU follows the interface's: ours carry none (they take the
 * interface's), but one that does — set by a chained plugin or by hand — and says the interface's old
 * MTU, or more than the new one (its packets would be dropped by the host end), gets the new one. A
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

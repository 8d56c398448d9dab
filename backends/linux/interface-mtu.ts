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
import { getLink, setLinkRequest } from '../../lib/rtnetlink/link';
import type { NetlinkSocket } from '../../lib/rtnetlink/socket';
import { IPV6_MIN_MTU } from '../interface/link-local';
import { setWorkloadEndMtu } from '../interface/workload-mtu';
import type { AttachPlan } from './attach-plan';

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
  const host = (): Promise<unknown> =>
    hostLink.mtu === mtu
      ? Promise.resolve()
      : socks.host.request(setLinkRequest({ index: hostLink.index }, { mtu }));
  let routes: number;
  if (mtu < podLink.mtu) {
    routes = await setWorkloadEndMtu(socks.workload, podLink, mtu);
    await host();
  } else {
    await host();
    routes = await setWorkloadEndMtu(socks.workload, podLink, mtu);
  }
  return { before: podLink.mtu, routes };
}

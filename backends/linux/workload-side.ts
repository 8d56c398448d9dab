// The workload end of the pair, inside the workload's namespace: loopback up, the interface up, its
// /32 and /128 addresses, and routes through the link-local gateway. The gateway is not on any
// subnet of the workload, so a "scope link" host route to it comes first: it tells the kernel that
// the gateway is directly on eth0, after which the default route via it is accepted.

import type { Drift } from '../../core/backend';
import type { AttachPlan } from './attach-plan';
import { IFA_F_NODAD, listAddresses, newAddressRequest } from './rtnetlink/address';
import { AF_INET, AF_INET6 } from './rtnetlink/inet';
import { getLink, setLinkRequest } from './rtnetlink/link';
import type { NetlinkRequest } from './rtnetlink/message';
import { RT_SCOPE_LINK, RTPROT_STATIC, listRoutes, newRouteRequest } from './rtnetlink/route';
import type { NetlinkSocket } from './rtnetlink/socket';

/** All requests for the workload side, in order, for one write. `peerIndex` is the ifindex in the namespace. */
export function workloadSideRequests(plan: AttachPlan, peerIndex: number): NetlinkRequest[] {
  const reqs: NetlinkRequest[] = [
    setLinkRequest({ name: 'lo' }, { up: true }),
    setLinkRequest({ index: peerIndex }, { up: true }),
  ];
  for (const a of [...plan.v4, ...plan.v6]) {
    // NODAD: the address must work the moment Attach returns, not after duplicate detection.
    reqs.push(
      newAddressRequest({
        index: peerIndex,
        address: a.address,
        prefixLength: a.prefixLength,
        flags: IFA_F_NODAD,
      }),
    );
  }
  if (plan.v4.length > 0) {
    reqs.push(
      newRouteRequest({
        destination: `${plan.gatewayV4}/32`,
        oif: peerIndex,
        scope: RT_SCOPE_LINK,
        protocol: RTPROT_STATIC,
      }),
      newRouteRequest({
        destination: 'default',
        gateway: plan.gatewayV4,
        oif: peerIndex,
        protocol: RTPROT_STATIC,
      }),
    );
  }
  if (plan.v6.length > 0) {
    reqs.push(
      newRouteRequest({
        destination: 'default',
        gateway: plan.gatewayV6,
        oif: peerIndex,
        protocol: RTPROT_STATIC,
      }),
    );
  }
  return reqs;
}

/** Differences between the workload namespace and the plan. */
export async function checkWorkloadSide(
  sock: NetlinkSocket,
  plan: AttachPlan,
  expectedMac?: string,
): Promise<Drift[]> {
  const link = await getLink(sock, { name: plan.ifName });
  if (!link) {
    return [
      {
        kind: 'interface-missing',
        message: `interface ${plan.ifName} is missing from the workload's namespace`,
      },
    ];
  }
  const drift: Drift[] = [];
  if (!link.up) drift.push({ kind: 'interface-down', message: `interface ${plan.ifName} is down` });
  if (link.mtu !== plan.mtu) {
    drift.push({
      kind: 'mtu-changed',
      message: `interface ${plan.ifName} has MTU ${link.mtu}, expected ${plan.mtu}`,
    });
  }
  if (expectedMac && link.mac !== expectedMac) {
    drift.push({
      kind: 'mac-changed',
      message: `interface ${plan.ifName} has MAC ${link.mac ?? '(none)'}, expected ${expectedMac}`,
    });
  }
  const addrs = await listAddresses(sock, { index: link.index });
  for (const want of [...plan.v4, ...plan.v6]) {
    const have = addrs.filter((a) => a.address === want.address);
    if (have.length === 0) {
      drift.push({
        kind: 'address-missing',
        message: `${want.address}/${want.prefixLength} is missing from ${plan.ifName}`,
      });
    } else if (!have.some((a) => a.prefixLength === want.prefixLength)) {
      drift.push({
        kind: 'address-changed',
        message: `${want.address} on ${plan.ifName} has prefix /${have[0]?.prefixLength}, expected /${want.prefixLength}`,
      });
    }
  }
  if (plan.v4.length > 0) {
    const routes = await listRoutes(sock, AF_INET, { oif: link.index });
    if (!routes.some((r) => r.destination === `${plan.gatewayV4}/32` && r.gateway === undefined)) {
      drift.push({
        kind: 'route-missing',
        message: `route to the gateway ${plan.gatewayV4} via ${plan.ifName} is missing`,
      });
    }
    if (!routes.some((r) => r.destination === '0.0.0.0/0' && r.gateway === plan.gatewayV4)) {
      drift.push({
        kind: 'route-missing',
        message: `IPv4 default route via ${plan.gatewayV4} dev ${plan.ifName} is missing`,
      });
    }
  }
  if (plan.v6.length > 0) {
    const routes = await listRoutes(sock, AF_INET6, { oif: link.index });
    if (!routes.some((r) => r.destination === '::/0' && r.gateway === plan.gatewayV6)) {
      drift.push({
        kind: 'route-missing',
        message: `IPv6 default route via ${plan.gatewayV6} dev ${plan.ifName} is missing`,
      });
    }
  }
  return drift;
}

// The host end of the pair, in the host namespace. Routed model, no bridge: the host end carries no
// IPv4 address. It answers the workload's ARP for the link-local gateway by proxy ARP (so every
// workload can use the same gateway address), forwards, and a /32 (/128) route per workload address
// points at it. For IPv6 the host end holds the gateway address itself (fe80::1/64), since NDP has
// no proxy equivalent that works without per-address entries.

import type { Drift } from '../../core/backend';
import type { AttachPlan } from './attach-plan';
import { noLinkLocalRequests } from '../interface/link-local';
import { IFA_F_NODAD, newAddressRequest } from '../../lib/rtnetlink/address';
import {
  IPV4_DEVCONF_FORWARDING,
  IPV4_DEVCONF_PROXY_ARP,
  getLink,
  setLinkRequest,
} from '../../lib/rtnetlink/link';
import type { NetlinkRequest } from '../../lib/rtnetlink/message';
import {
  RT_SCOPE_LINK,
  RTM_NEWROUTE,
  RTPROT_STATIC,
  decodeRoute,
  lookupRouteRequest,
  newRouteRequest,
} from '../../lib/rtnetlink/route';
import type { NetlinkSocket } from '../../lib/rtnetlink/socket';

const NO_ROUTE = new Set(['ENETUNREACH', 'EHOSTUNREACH', 'ESRCH']);

/** All requests for the host side, in order, for one write. */
export function hostSideRequests(plan: AttachPlan, hostIndex: number): NetlinkRequest[] {
  const reqs: NetlinkRequest[] = [
    // Before the workload end comes up and gives this end its carrier (link-local.ts). A request of its
    // own: an IPv6 refusal must not cost the IPv4 settings below.
    ...noLinkLocalRequests(hostIndex, plan),
    // Per-interface inet settings cannot ride on the create (EAFNOSUPPORT), hence this SETLINK.
    setLinkRequest(
      { index: hostIndex },
      { inetConf: { [IPV4_DEVCONF_PROXY_ARP]: 1, [IPV4_DEVCONF_FORWARDING]: 1 } },
    ),
  ];
  if (plan.v6.length > 0) {
    reqs.push(
      newAddressRequest({ index: hostIndex, address: plan.gatewayV6, prefixLength: 64, flags: IFA_F_NODAD }),
    );
  }
  for (const a of [...plan.v4, ...plan.v6]) {
    // REPLACE: a stale route to a reused address (an orphan not yet reconciled) must not block the
    // new workload; the address belongs to this attachment now.
    reqs.push(
      newRouteRequest(
        {
          destination: `${a.address}/${a.prefixLength}`,
          oif: hostIndex,
          scope: RT_SCOPE_LINK,
          protocol: RTPROT_STATIC,
        },
        { replace: true },
      ),
    );
  }
  return reqs;
}

/** Differences between the host namespace and the plan (link, settings, routes), in one batch. */
export async function checkHostSide(sock: NetlinkSocket, plan: AttachPlan): Promise<Drift[]> {
  const link = await getLink(sock, { name: plan.hostName });
  if (!link) return [{ kind: 'host-link-missing', message: `host interface ${plan.hostName} is missing` }];
  const drift: Drift[] = [];
  if (!link.up) drift.push({ kind: 'host-link-down', message: `host interface ${plan.hostName} is down` });
  if (link.mtu !== plan.mtu) {
    drift.push({
      kind: 'mtu-changed',
      message: `host interface ${plan.hostName} has MTU ${link.mtu}, expected ${plan.mtu}`,
    });
  }
  if (link.inetConf && link.inetConf[IPV4_DEVCONF_PROXY_ARP] !== 1 && plan.v4.length > 0) {
    drift.push({ kind: 'proxy-arp-off', message: `proxy_arp is off on host interface ${plan.hostName}` });
  }
  const addresses = [...plan.v4, ...plan.v6];
  const outcomes = await sock.batch(addresses.map((a) => lookupRouteRequest(a.address)));
  addresses.forEach((a, i) => {
    const o = outcomes[i];
    // "No route" is drift; anything else (a dead socket) is a failure of the check itself.
    if (o && !o.ok && !NO_ROUTE.has(o.error.code)) throw o.error;
    const msg = o?.ok ? o.replies.find((m) => m.type === RTM_NEWROUTE) : undefined;
    const route = msg ? decodeRoute(msg) : undefined;
    if (!route || route.oif !== link.index || route.destination !== `${a.address}/${a.prefixLength}`) {
      drift.push({
        kind: 'route-missing',
        message: `host route ${a.address}/${a.prefixLength} dev ${plan.hostName} is missing`,
      });
    }
  });
  return drift;
}

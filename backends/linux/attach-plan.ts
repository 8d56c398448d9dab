// Everything attach, check and detach need to know about one attachment, worked out once from the
// spec and the options: names, addresses, gateways, and the routes the workload gets.

import * as crypto from 'node:crypto';
import type { IpAssignment, RouteInfo } from '../../core/backend';
import { hostLinkAlias, hostLinkName } from './host-link-name';
import type { ResolvedLinuxBackendOptions } from './linux-backend-options';
import { canonicalAddress } from './rtnetlink/inet';

export interface PlannedAddress {
  /** Canonical text. */
  address: string;
  /** 32 or 128: routed model, every workload address is a host route. */
  prefixLength: number;
}

export interface AttachPlan {
  key: string;
  /** Interface inside the workload namespace. */
  ifName: string;
  mtu: number;
  hostName: string;
  alias: string;
  linkGroup: number;
  v4: PlannedAddress[];
  v6: PlannedAddress[];
  /** Link-local gateway the workload routes through; the host end answers for it. */
  gatewayV4: string;
  gatewayV6: string;
}

/** What a plan is made from: an AttachSpec or a stored AttachmentView. */
export interface PlanInput {
  key: string;
  ifName: string;
  ips: readonly IpAssignment[];
  mtu: number;
}

export function planAttachment(input: PlanInput, opts: ResolvedLinuxBackendOptions): AttachPlan {
  const v4 = input.ips.filter((ip) => ip.family === 4);
  const v6 = input.ips.filter((ip) => ip.family === 6);
  return {
    key: input.key,
    ifName: input.ifName,
    mtu: input.mtu,
    hostName: hostLinkName(opts.hostIfPrefix, input.key),
    alias: hostLinkAlias(input.key),
    linkGroup: opts.linkGroup,
    v4: v4.map((ip) => ({ address: canonicalAddress(ip.address), prefixLength: 32 })),
    v6: v6.map((ip) => ({ address: canonicalAddress(ip.address), prefixLength: 128 })),
    // The core hands out the gateway with each address; the options only fill in when it is blank.
    gatewayV4: canonicalAddress(v4[0]?.gateway || opts.gatewayV4),
    gatewayV6: canonicalAddress(v6[0]?.gateway || opts.gatewayV6),
  };
}

/** Routes programmed inside the workload namespace, as reported in results. */
export function workloadRoutes(plan: AttachPlan): RouteInfo[] {
  const routes: RouteInfo[] = [];
  if (plan.v4.length > 0) {
    routes.push({ destination: `${plan.gatewayV4}/32` });
    routes.push({ destination: '0.0.0.0/0', gateway: plan.gatewayV4 });
  }
  if (plan.v6.length > 0) routes.push({ destination: '::/0', gateway: plan.gatewayV6 });
  return routes;
}

/**
 * A random locally administered unicast MAC for the workload end. Choosing it ourselves (instead of
 * letting the kernel pick) means the result needs no GETLINK inside the workload namespace.
 */
export function randomMac(): string {
  const b = crypto.randomBytes(6);
  b[0] = ((b[0] ?? 0) & 0xfe) | 0x02;
  return [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
}

// What the kernel of this host should hold for a peer table, per mode, as plain data: the routes,
// neighbours and FDB entries of ours, and how each peer is reached (or why not). No I/O here, so every
// decision of the modes reads in this folder; this file composes the parts, peer by peer in name order,
// and closes the cluster's ranges with a catch-all.
//
// The VXLAN model is flannel's: a remote prefix is routed `via <gateway> dev wn-vxlan onlink`, where
// the gateway is a key of the peer's (gateway-keys.ts) that a permanent neighbour maps to the peer's
// VTEP MAC, and the FDB entry for that MAC names the peer's underlay address. So one neighbour and one
// FDB entry per peer, and one route per remote prefix (tunnel-target.ts). A peer's tunnel endpoints
// (its DPUs, each with its own VTEP) are targets of their own (peer-targets.ts). Routed and hybrid
// modes route a peer on the uplink's subnet straight to its underlay address (reach-target.ts). Each
// identity a target programs has one holder, the incumbent first (identity-claims.ts).
//
// The parts: peer-targets.ts (a peer as its targets), gateway-keys.ts (the neighbour keys),
// reach-target.ts (direct or tunnel), tunnel-target.ts (the VXLAN entries), route-mtu.ts (what the
// routes carry), peer-plan.ts (one peer whole, and its Status), wanted.ts (what a plan holds).

import type { Peer } from '../../../../core/peer-source';
import { parseCidr } from '../../../../lib/cidr';
import { CATCH_ALL_METRIC } from '../../../../lib/overlay';
import { AF_INET, AF_INET6, RTN_UNREACHABLE } from '../../../../lib/rtnetlink';
import { Claims } from '../identity-claims';
import { planPeer } from './peer-plan';
import type { FabricPlan, PlanContext, WantedRoute } from './wanted';

export function planHostFabric(ctx: PlanContext, peers: readonly Peer[]): FabricPlan {
  // Prefixes, MACs, underlay addresses and neighbour keys: a second target on one would take the
  // first's traffic, so each has one holder, the incumbent first (identity-claims.ts).
  const claims = new Claims(ctx.holders, peers);
  const plan: FabricPlan = { routes: [], neighbours: [], fdb: [], peers: [], holders: claims.held };
  const sorted = [...peers].sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
  for (const peer of sorted) plan.peers.push(planPeer({ ctx, claims, plan }, peer));
  if (ctx.mode !== 'external') plan.routes.push(...ctx.clusterCidrs.map(catchAll));
  return plan;
}

/** An unreachable route to a cluster range: a cluster address no peer route covers goes nowhere else. */
function catchAll(cidr: string): WantedRoute {
  const c = parseCidr(cidr);
  return {
    family: c.family === 4 ? AF_INET : AF_INET6,
    destination: c.text,
    type: RTN_UNREACHABLE,
    priority: CATCH_ALL_METRIC,
    onlink: false,
  };
}

// What a host fabric plan holds: the routes, neighbours and FDB entries of ours the kernel should hold,
// how each peer is reached, and the keys the kernel diff and the drift monitor match entries by. Its
// own file because the planner's parts write it and the diff, the monitor and the prober read it.

import type { FabricMode, PeerPath } from '../../../../core/fabric-dataplane';
import {
  PEER_ROUTE_METRIC,
  type OverlayFdb,
  type OverlayNeighbour,
  type OverlayRoute,
} from '../../../../lib/overlay';
import { RTN_UNICAST } from '../../../../lib/rtnetlink';
import type { Claims, Holders } from '../identity-claims';
import type { Underlay } from '../underlay';

/** A route of ours (lib/overlay); `peer` is absent for the catch-all. */
export type WantedRoute = OverlayRoute;
/** A neighbour of ours, for the peer whose routes use its gateway key. */
export type WantedNeighbour = OverlayNeighbour & { peer: string };
/** An FDB entry of ours, for the peer whose VTEP MAC it maps. */
export type WantedFdb = OverlayFdb & { peer: string };

export interface FabricPlan {
  routes: WantedRoute[];
  neighbours: WantedNeighbour[];
  fdb: WantedFdb[];
  peers: PeerPath[];
  /** Who holds each identity this plan programs (identity-claims.ts): the next plan's incumbents. */
  holders?: Holders;
}

export interface PlanContext {
  mode: Exclude<FabricMode, 'off'>;
  underlay: Underlay;
  /** The VXLAN device's ifindex, in modes that run one. */
  vxlanIndex?: number;
  vni: number;
  port: number;
  /** Our own VTEP MAC: a peer claiming it is a misconfiguration, not a peer. */
  ownMac?: string;
  /** Our pod MTU: no remote-prefix route carries more (a peer publishing a smaller uplink, less). */
  routeMtu: number;
  clusterCidrs: string[];
  /** Who held each identity in the last plan: they keep it against a newcomer (identity-claims.ts). */
  holders?: Holders;
}

/** A plan being written: its context, the claims taken so far and what it holds so far. */
export interface Planning {
  ctx: PlanContext;
  claims: Claims;
  plan: FabricPlan;
}

/** One route of ours to a peer's prefix: through the uplink to its underlay, or through our device. */
export function peerRoute(
  family: WantedRoute['family'],
  destination: string,
  via: Pick<WantedRoute, 'gateway' | 'oif' | 'onlink'>,
  mtu: number,
  peer: string,
): WantedRoute {
  return { family, destination, type: RTN_UNICAST, priority: PEER_ROUTE_METRIC, ...via, mtu, peer };
}

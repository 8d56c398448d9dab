// What a host fabric plan holds: the routes, neighbours and FDB entries of ours the kernel should hold,
// how each peer is reached, and the keys the kernel diff and the drift monitor match entries by. Its
// own file because the planner's parts write it and the diff, the monitor and the prober read it.

import type { FabricMode, PeerPath } from '../../../../core/fabric-dataplane';
import { RTN_UNICAST, type AddressFamily } from '../../../../lib/rtnetlink';
import type { Claims, Holders } from '../identity-claims';
import type { Underlay } from '../underlay';

/** Metric of our routes to peers' prefixes. A foreign route to the same prefix with a lower one wins. */
export const PEER_ROUTE_METRIC = 1024;
/** The catch-all: the lowest priority there is, so any other route to a cluster address wins. */
export const CATCH_ALL_METRIC = 4294967295;

export interface WantedRoute {
  family: AddressFamily;
  destination: string;
  type: number;
  priority: number;
  gateway?: string;
  oif?: number;
  onlink: boolean;
  mtu?: number;
  /** The peer it serves; absent for the catch-all. */
  peer?: string;
}

export interface WantedNeighbour {
  family: AddressFamily;
  /** The gateway address the peer's routes use. */
  dst: string;
  mac: string;
  peer: string;
}

export interface WantedFdb {
  mac: string;
  /** The peer's underlay address. */
  dst: string;
  peer: string;
}

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

export const routeKey = (r: { family: number; destination: string; priority?: number }): string =>
  `${r.family}|${r.destination}|${r.priority ?? 0}`;
export const neighbourKey = (n: { family: number; dst?: string }): string => `${n.family}|${n.dst ?? ''}`;
export const fdbKey = (f: { mac?: string }): string => f.mac ?? '';

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

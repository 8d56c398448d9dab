// The entries a VXLAN overlay holds in a kernel, as plain data: routes to remote prefixes (over the
// device, or straight to a peer's underlay address), the permanent neighbours that map a route's
// gateway key to a peer's VTEP MAC, and the FDB entries that map that MAC to the peer's underlay
// address. Its own file because every writer of the overlay (the Linux fabric's planner, the
// simulator's netns fabric) produces these, and the kernel diff, the requests and the drift monitor
// read them by the same keys.

import type { AddressFamily } from '../rtnetlink';

/** Metric of our routes to peers' prefixes. A foreign route to the same prefix with a lower one wins. */
export const PEER_ROUTE_METRIC = 1024;
/** The catch-all: the lowest priority there is, so any other route to the same addresses wins. */
export const CATCH_ALL_METRIC = 4294967295;

export interface OverlayRoute {
  family: AddressFamily;
  destination: string;
  type: number;
  priority: number;
  gateway?: string;
  oif?: number;
  onlink: boolean;
  mtu?: number;
  /** The peer it serves, when it serves one (named in what is reported of it). */
  peer?: string;
}

export interface OverlayNeighbour {
  family: AddressFamily;
  /** The gateway address the peer's routes use. */
  dst: string;
  mac: string;
  peer?: string;
}

export interface OverlayFdb {
  mac: string;
  /** The peer's underlay address. */
  dst: string;
  peer?: string;
}

/** What the kernel should hold of ours, all of it. */
export interface OverlayEntries {
  routes: readonly OverlayRoute[];
  neighbours: readonly OverlayNeighbour[];
  fdb: readonly OverlayFdb[];
}

/** The kernel holds one route per (family, prefix, metric) in a table. */
export const routeKey = (r: { family: number; destination: string; priority?: number }): string =>
  `${r.family}|${r.destination}|${r.priority ?? 0}`;
/** One neighbour per (family, address) on a device. */
export const neighbourKey = (n: { family: number; dst?: string }): string => `${n.family}|${n.dst ?? ''}`;
/** One FDB entry per MAC on our device (a second remote is appended beside it, a stray). */
export const fdbKey = (f: { mac?: string }): string => f.mac ?? '';

/** An entry's id among entries of every kind ("route|…", "neighbour|…", "fdb|…"): one map can hold them all. */
export const routeId = (r: Parameters<typeof routeKey>[0]): string => `route|${routeKey(r)}`;
export const neighbourId = (n: Parameters<typeof neighbourKey>[0]): string => `neighbour|${neighbourKey(n)}`;
export const fdbId = (f: Parameters<typeof fdbKey>[0]): string => `fdb|${fdbKey(f)}`;

const forPeer = (peer: string | undefined): string => (peer ? ` (${peer})` : '');

/** An entry as a person reads it in a log or a status: what `ip route`, `ip neigh`, `bridge fdb` show. */
export function describeRoute(r: OverlayRoute): string {
  const via = r.gateway ? ` via ${r.gateway}` : '';
  return `route ${r.destination}${via} metric ${r.priority}${forPeer(r.peer)}`;
}

export function describeNeighbour(n: OverlayNeighbour): string {
  return `neighbour ${n.dst} lladdr ${n.mac}${forPeer(n.peer)}`;
}

export function describeFdb(f: OverlayFdb): string {
  return `fdb ${f.mac} dst ${f.dst}${forPeer(f.peer)}`;
}

// The rtnetlink requests that add and remove overlay entries of ours. Its own file because the whole-
// plan kernel diff (kernel-diff.ts) and the simulator's per-object convergence send the same requests,
// and "ours" is decided here once: every route carries our protocol in the main table, every neighbour
// and FDB entry sits on our own device and is permanent.

import {
  AF_BRIDGE,
  NTF_SELF,
  NUD_PERMANENT,
  RTPROT_WORKLOADNET,
  RT_TABLE_MAIN,
  delNeighbourRequest,
  delRouteRequest,
  newNeighbourRequest,
  newRouteRequest,
  type AddressFamily,
  type NetlinkRequest,
} from '../rtnetlink';
import type { OverlayFdb, OverlayNeighbour, OverlayRoute } from './entries';

/**
 * Adds a route of ours, or replaces one. Replace only a route found to be ours: a create is exclusive,
 * so a foreign route holding the same prefix and metric makes it fail (EEXIST) rather than be
 * overwritten.
 */
export function addRouteRequest(r: OverlayRoute, opts: { replace: boolean }): NetlinkRequest {
  return newRouteRequest(
    {
      destination: r.destination,
      family: r.family,
      gateway: r.gateway,
      oif: r.oif,
      type: r.type,
      priority: r.priority,
      protocol: RTPROT_WORKLOADNET,
      table: RT_TABLE_MAIN,
      onlink: r.onlink,
      mtu: r.mtu,
    },
    opts,
  );
}

/** Removes our route to a prefix at a metric (only one of our protocol matches). */
export function deleteRouteRequest(r: {
  family: AddressFamily;
  destination: string;
  priority?: number;
}): NetlinkRequest {
  return delRouteRequest({
    destination: r.destination,
    family: r.family,
    priority: r.priority,
    protocol: RTPROT_WORKLOADNET,
    table: RT_TABLE_MAIN,
  });
}

/** Sets a permanent neighbour on our device (created or replaced). */
export function setNeighbourRequest(ifindex: number, n: OverlayNeighbour): NetlinkRequest {
  return newNeighbourRequest(
    { family: n.family, ifindex, dst: n.dst, mac: n.mac, state: NUD_PERMANENT },
    { replace: true },
  );
}

export function deleteNeighbourRequest(
  ifindex: number,
  n: { family: AddressFamily; dst?: string },
): NetlinkRequest {
  return delNeighbourRequest({ family: n.family, ifindex, dst: n.dst });
}

/** Sets the permanent FDB entry of a MAC on our device: a replace moves it to its new destination. */
export function setFdbRequest(ifindex: number, f: OverlayFdb): NetlinkRequest {
  return newNeighbourRequest(
    { family: AF_BRIDGE, ifindex, mac: f.mac, dst: f.dst, flags: NTF_SELF, state: NUD_PERMANENT },
    { replace: true },
  );
}

/** Removes one remote of a MAC (a MAC may hold several: `bridge fdb append`). */
export function deleteFdbRequest(ifindex: number, f: { mac?: string; dst?: string }): NetlinkRequest {
  return delNeighbourRequest({ family: AF_BRIDGE, ifindex, mac: f.mac, dst: f.dst, flags: NTF_SELF });
}

import { formatAddress, parseCidr } from '../../lib/cidr';
import {
  CATCH_ALL_METRIC,
  PEER_ROUTE_METRIC,
  fdbId,
  neighbourId,
  routeId,
  type OverlayFdb,
  type OverlayNeighbour,
  type OverlayRoute,
} from '../../lib/overlay';
import {
  AF_INET,
  AF_INET6,
  RTN_UNICAST,
  RTN_UNREACHABLE,
  familyOf,
  type AddressFamily,
} from '../../lib/rtnetlink';
import { RouteVia, type FabricObject } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { FabricTable } from './fabric-table';

// What the kernel of the DPU namespace must hold for one fabric object, as plain data (no I/O), so the
// whole scheme reads in one place. Its entries are the overlay's (lib/overlay/entries.ts), the host
// fabric's (backends/linux/fabric/plan/), flannel's VXLAN model, so that a DPU and a node on the Linux
// backend carry each other's packets:
// - the LocalVtep is our device wn-vxlan (VNI, UDP port, local address, MAC, MTU; learning off);
// - a FabricPeer is one permanent FDB entry on it: the peer's VTEP MAC → the peer's underlay address;
// - a PeerRoute (encap) is `<prefix> via <gateway> dev wn-vxlan onlink`, where the gateway is the
//   prefix's network address (flannel's .0): never an address on the wire, only a key that a permanent
//   neighbour entry maps to the peer's VTEP MAC. Encapsulated frames thus leave with the peer's VTEP
//   MAC as destination and the pod's address inside, exactly as a Linux node sends them. (The host
//   fabric keys the neighbour on the peer's first prefix; keying it on each route's own prefix makes a
//   route's objects depend on that route and its peer only, and is the same on the wire.)
// - a PeerRoute (direct) is `<prefix> via <peer underlay address>`, no encapsulation;
// - a LocalPrefix is `unreachable <prefix>` at the lowest priority (the overlay's catch-all metric):
//   decapsulated packets for a pod follow its host route to its representor, and one for an address no
//   pod holds ends here with an ICMP error instead of going back out of the default route.
// Every route carries our protocol (RTPROT_WORKLOADNET) in the main table.

/** Keyed by the entries' ids (lib/overlay): one map holds which object holds each entry of every kind. */
export interface WantedFdb extends OverlayFdb {
  kind: 'fdb';
  key: string;
}

export interface WantedNeighbour extends OverlayNeighbour {
  kind: 'neighbour';
  key: string;
}

export interface WantedRoute extends Omit<OverlayRoute, 'oif' | 'peer'> {
  kind: 'route';
  key: string;
  /** Set for routes over wn-vxlan (their oif is its ifindex, filled in when sent). */
  overVxlan: boolean;
}

export type Wanted = WantedFdb | WantedNeighbour | WantedRoute;

export interface Wants {
  objects: Wanted[];
  /** Why (some of) the object is not programmed: waiting for another object, or in conflict. */
  blocked?: string;
  /** The object contradicts what the DPU holds (not a matter of waiting): acked INVALID. */
  conflict?: boolean;
}

export const fdbKey = (mac: string): string => fdbId({ mac });
export const neighbourKey = (family: number, dst: string): string => neighbourId({ family, dst });
export const routeKey = (family: number, destination: string, priority: number): string =>
  routeId({ family, destination, priority });

const familyName = (f: AddressFamily): string => (f === AF_INET ? 'IPv4' : 'IPv6');

function peerWants(o: FabricObject, vtep: FabricObject | undefined): Wants {
  const p = o.peer!;
  const v = vtep?.localVtep;
  if (!v) return { objects: [], blocked: 'waiting for the local VTEP (object "vtep")' };
  if (p.vni !== v.vni || p.port !== v.port)
    return {
      objects: [],
      conflict: true,
      blocked: `VTEP VNI ${p.vni} port ${p.port} differs from the local VTEP's (VNI ${v.vni} port ${v.port}); wn-vxlan carries one`,
    };
  if (familyOf(p.address) !== familyOf(v.address))
    return {
      objects: [],
      conflict: true,
      blocked: `underlay ${p.address} is not ${familyName(familyOf(v.address))} like the local VTEP's ${v.address}`,
    };
  if (p.mac.toLowerCase() === v.mac.toLowerCase())
    return { objects: [], conflict: true, blocked: `VTEP MAC ${p.mac} is the local VTEP's own` };
  const mac = p.mac.toLowerCase();
  return { objects: [{ kind: 'fdb', key: fdbKey(mac), mac, dst: p.address }] };
}

function routeWants(o: FabricObject, table: FabricTable): Wants {
  const r = o.peerRoute!;
  const c = parseCidr(r.prefix);
  const family: AddressFamily = c.family === 4 ? AF_INET : AF_INET6;
  const mtu = r.mtu || undefined;
  const peer = table.get(r.peer);
  if (!peer?.peer) return { objects: [], blocked: `waiting for its peer ${r.peer}` };
  if (r.via === RouteVia.ROUTE_VIA_DIRECT) {
    if (familyOf(peer.peer.address) !== family)
      return {
        objects: [],
        conflict: true,
        blocked: `a direct route to ${familyName(family)} needs an ${familyName(family)} peer address, not ${peer.peer.address}`,
      };
    return {
      objects: [
        {
          kind: 'route',
          key: routeKey(family, c.text, PEER_ROUTE_METRIC),
          family,
          destination: c.text,
          type: RTN_UNICAST,
          priority: PEER_ROUTE_METRIC,
          gateway: peer.peer.address,
          overVxlan: false,
          onlink: false,
          mtu,
        },
      ],
    };
  }
  const peerState = peerWants(peer, table.vtep());
  if (peerState.blocked)
    return { objects: [], blocked: `its peer ${r.peer} is not programmed: ${peerState.blocked}` };
  const gateway = formatAddress(c.family, c.network);
  const mac = peer.peer.mac.toLowerCase();
  return {
    objects: [
      { kind: 'neighbour', key: neighbourKey(family, gateway), family, dst: gateway, mac },
      {
        kind: 'route',
        key: routeKey(family, c.text, PEER_ROUTE_METRIC),
        family,
        destination: c.text,
        type: RTN_UNICAST,
        priority: PEER_ROUTE_METRIC,
        gateway,
        overVxlan: true,
        onlink: true,
        mtu,
      },
    ],
  };
}

/** The kernel objects `name` wants given everything the table holds (none for a missing name). */
export function wantsOf(table: FabricTable, name: string): Wants {
  const o = table.get(name);
  if (!o) return { objects: [] };
  if (o.peer) return peerWants(o, table.vtep());
  if (o.peerRoute) return routeWants(o, table);
  if (o.localPrefix) {
    const c = parseCidr(o.localPrefix.prefix);
    const family: AddressFamily = c.family === 4 ? AF_INET : AF_INET6;
    return {
      objects: [
        {
          kind: 'route',
          key: routeKey(family, c.text, CATCH_ALL_METRIC),
          family,
          destination: c.text,
          type: RTN_UNREACHABLE,
          priority: CATCH_ALL_METRIC,
          overVxlan: false,
          onlink: false,
        },
      ],
    };
  }
  return { objects: [] };
}

/**
 * The names whose kernel objects a change of `name` may change: itself, and for a peer its routes, and
 * for the VTEP every peer and route (they hang on the device).
 */
export function dependentsOf(table: FabricTable, name: string, kind: string | undefined): string[] {
  if (kind === 'vtep') return table.names().filter((n) => n !== name);
  if (kind === 'peer') return table.routesOf(name);
  return [];
}

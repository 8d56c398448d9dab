// What the kernel should hold for a peer table, per mode, as plain data: the routes, neighbours and FDB
// entries of ours, and how each peer is reached (or why not). No I/O here, so every decision of the
// modes reads in one place.
//
// The VXLAN model is flannel's: a remote prefix is routed `via <gateway> dev wn-vxlan onlink`, where
// the gateway is the first address of the peer's first prefix of that family (flannel uses the .0 of
// the peer's subnet). It is never an address a pod holds on the peer, only a key: a permanent
// neighbour maps it to the peer's VTEP MAC, and the FDB entry for that MAC names the peer's underlay
// address. So one neighbour and one FDB entry per peer, and one route per remote prefix.

import type { Peer } from '../../../core/fabric/peer-source';
import type { FabricMode, PeerPath } from '../../../core/fabric/fabric-dataplane';
import { parseCidr } from '../../../lib/cidr';
import {
  AF_BRIDGE,
  AF_INET,
  AF_INET6,
  NTF_SELF,
  NUD_PERMANENT,
  RTN_UNICAST,
  RTN_UNREACHABLE,
  RTPROT_WORKLOADNET,
  RT_TABLE_MAIN,
  canonicalAddress,
  familyOf,
  type AddressFamily,
} from '../../../lib/rtnetlink';
import { onLink, type Underlay } from './underlay';

/** Metric of our routes to peers' prefixes. A foreign route to the same prefix with a lower one wins. */
export const PEER_ROUTE_METRIC = 1024;
/** The catch-all: the lowest priority there is, so any other route to a cluster address wins. */
export const CATCH_ALL_METRIC = 4294967295;
/** Bytes VXLAN adds to an inner packet: outer IP + UDP (8) + VXLAN (8) + inner Ethernet (14). */
export const VXLAN_OVERHEAD = { [AF_INET]: 50, [AF_INET6]: 70 } as const;

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
  /** MTU carried by every remote-prefix route (the pod MTU). */
  routeMtu: number;
  clusterCidrs: string[];
}

export const routeKey = (r: { family: number; destination: string; priority?: number }): string =>
  `${r.family}|${r.destination}|${r.priority ?? 0}`;
export const neighbourKey = (n: { family: number; dst?: string }): string => `${n.family}|${n.dst ?? ''}`;
export const fdbKey = (f: { mac?: string }): string => f.mac ?? '';

/** The pod MTU for a mode: the uplink's less what the encapsulation adds on the paths the mode uses. */
export function podMtu(mode: Exclude<FabricMode, 'off'>, underlay: Underlay): number {
  if (mode === 'routed' || mode === 'external') return underlay.uplink.mtu;
  return underlay.uplink.mtu - VXLAN_OVERHEAD[underlay.family];
}

/** The gateway key of a peer's prefix family: the first address of its first prefix of that family. */
function gatewayOf(prefixes: string[], family: AddressFamily): string | undefined {
  const first = prefixes.find((p) => familyOf(p.slice(0, p.indexOf('/'))) === family);
  return first === undefined ? undefined : canonicalAddress(first.slice(0, first.indexOf('/')));
}

/** The peer's underlay address in our underlay's family. */
function peerUnderlay(peer: Peer, family: AddressFamily): string | undefined {
  const a = peer.underlay.find((u) => {
    try {
      return familyOf(u) === family;
    } catch {
      return false;
    }
  });
  return a === undefined ? undefined : canonicalAddress(a);
}

function canonicalPrefixes(peer: Peer): { ok: string[]; bad: string[] } {
  const ok: string[] = [];
  const bad: string[] = [];
  for (const p of peer.prefixes) {
    try {
      ok.push(parseCidr(p).text);
    } catch {
      bad.push(p);
    }
  }
  return { ok, bad };
}

export function planFabric(ctx: PlanContext, peers: readonly Peer[]): FabricPlan {
  const plan: FabricPlan = { routes: [], neighbours: [], fdb: [], peers: [] };
  const routed = new Map<string, string>();
  const macs = new Map<string, string>();
  const sorted = [...peers].sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
  for (const peer of sorted) {
    const { ok: prefixes, bad } = canonicalPrefixes(peer);
    const path = (p: PeerPath['path'], reason?: string): PeerPath => {
      const reasons = [
        reason,
        bad.length > 0 ? `ignored prefixes that are not CIDRs: ${bad.join(', ')}` : undefined,
      ];
      const text = reasons.filter((r) => r !== undefined).join('; ');
      return text === ''
        ? { node: peer.node, path: p, prefixes }
        : { node: peer.node, path: p, reason: text, prefixes };
    };
    if (ctx.mode === 'external') {
      plan.peers.push(path('external'));
      continue;
    }
    const underlay = peerUnderlay(peer, ctx.underlay.family);
    if (underlay === undefined) {
      plan.peers.push(
        path(
          'unreachable',
          `no underlay address of IPv${ctx.underlay.family === AF_INET ? 4 : 6}, the family of this node's (${ctx.underlay.address})`,
        ),
      );
      continue;
    }
    const direct = onLink(ctx.underlay, underlay);
    // Claimed twice: the first peer (by name) keeps the prefix; traffic cannot go to both.
    const taken = prefixes.filter((p) => routed.has(p));
    const own = prefixes.filter((p) => !routed.has(p));
    const clash =
      taken.length > 0
        ? `prefixes also announced by ${taken.map((p) => `${routed.get(p)} (${p})`).join(', ')}`
        : undefined;
    if (ctx.mode === 'routed' || (ctx.mode === 'hybrid' && direct)) {
      if (!direct) {
        plan.peers.push(
          path(
            'unreachable',
            `underlay ${underlay} is not on a subnet of uplink ${ctx.underlay.uplink.name} (${ctx.underlay.subnets.map((s) => s.text).join(', ') || 'none'}); ` +
              `routed mode routes only directly connected peers, never via a gateway (use hybrid or vxlan)`,
          ),
        );
        continue;
      }
      for (const prefix of own) {
        const family = familyOf(prefix.slice(0, prefix.indexOf('/')));
        // A direct next hop must be of the prefix's family; IPv6 prefixes over an IPv4 underlay need VXLAN.
        if (family !== ctx.underlay.family) continue;
        routed.set(prefix, peer.node);
        plan.routes.push(
          peerRoute(
            family,
            prefix,
            { gateway: underlay, oif: ctx.underlay.uplink.index, onlink: false },
            ctx.routeMtu,
            peer.node,
          ),
        );
      }
      const skipped = own.filter((p) => familyOf(p.slice(0, p.indexOf('/'))) !== ctx.underlay.family);
      const why = [
        clash,
        skipped.length > 0
          ? `not routed directly (another family than the underlay): ${skipped.join(', ')}`
          : undefined,
      ]
        .filter((r) => r !== undefined)
        .join('; ');
      plan.peers.push(path('direct', why === '' ? undefined : why));
      continue;
    }
    // vxlan, or hybrid across a router.
    if (ctx.vxlanIndex === undefined) {
      plan.peers.push(path('unreachable', 'no VXLAN device'));
      continue;
    }
    const vtep = peer.vtep;
    if (!vtep) {
      plan.peers.push(path('unreachable', 'the peer publishes no VTEP (it runs no VXLAN device)'));
      continue;
    }
    if (vtep.vni !== ctx.vni || vtep.port !== ctx.port) {
      plan.peers.push(
        path(
          'unreachable',
          `VTEP VNI ${vtep.vni} port ${vtep.port} differs from ours (VNI ${ctx.vni} port ${ctx.port})`,
        ),
      );
      continue;
    }
    const mac = vtep.mac.toLowerCase();
    const macOwner = macs.get(mac);
    if (macOwner !== undefined || mac === ctx.ownMac) {
      plan.peers.push(path('unreachable', `VTEP MAC ${mac} is also used by ${macOwner ?? 'this node'}`));
      continue;
    }
    if (own.length === 0) {
      plan.peers.push(path('vxlan', clash));
      continue;
    }
    macs.set(mac, peer.node);
    plan.fdb.push({ mac, dst: underlay, peer: peer.node });
    for (const family of [AF_INET, AF_INET6] as const) {
      const gateway = gatewayOf(own, family);
      if (gateway === undefined) continue;
      plan.neighbours.push({ family, dst: gateway, mac, peer: peer.node });
      for (const prefix of own) {
        if (familyOf(prefix.slice(0, prefix.indexOf('/'))) !== family) continue;
        routed.set(prefix, peer.node);
        plan.routes.push(
          peerRoute(family, prefix, { gateway, oif: ctx.vxlanIndex, onlink: true }, ctx.routeMtu, peer.node),
        );
      }
    }
    plan.peers.push(path('vxlan', clash));
  }
  if (ctx.mode !== 'external') {
    for (const cidr of ctx.clusterCidrs) {
      const c = parseCidr(cidr);
      plan.routes.push({
        family: c.family === 4 ? AF_INET : AF_INET6,
        destination: c.text,
        type: RTN_UNREACHABLE,
        priority: CATCH_ALL_METRIC,
        onlink: false,
      });
    }
  }
  return plan;
}

/** Constants every object of ours carries (for the kernel diff). */
export const OURS = {
  protocol: RTPROT_WORKLOADNET,
  table: RT_TABLE_MAIN,
  neighbourState: NUD_PERMANENT,
  fdbFlags: NTF_SELF,
  fdbFamily: AF_BRIDGE,
} as const;

/** One route of ours to a peer's prefix: through the uplink to its underlay, or through our device. */
function peerRoute(
  family: WantedRoute['family'],
  destination: string,
  via: Pick<WantedRoute, 'gateway' | 'oif' | 'onlink'>,
  mtu: number,
  peer: string,
): WantedRoute {
  return { family, destination, type: RTN_UNICAST, priority: PEER_ROUTE_METRIC, ...via, mtu, peer };
}

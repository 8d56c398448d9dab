// What the kernel should hold for a peer table, per mode, as plain data: the routes, neighbours and FDB
// entries of ours, and how each peer is reached (or why not). No I/O here, so every decision of the
// modes reads in one place.
//
// The VXLAN model is flannel's: a remote prefix is routed `via <gateway> dev wn-vxlan onlink`, where
// the gateway is the first address of the peer's lowest prefix of that family (flannel uses the .0 of
// the peer's subnet). It is never an address a pod holds on the peer: a permanent neighbour maps it
// to the peer's VTEP MAC, and the FDB entry for that MAC names the peer's underlay address. So one
// neighbour and one FDB entry per peer, and one route per remote prefix. Each node also puts its own
// key on its device (ownGatewayKeys), as flannel does: traffic the node itself sends to a remote pod
// then leaves with that source, which the peer routes back through its device (strict rp_filter
// passes), and the peer's kernel answers the data-path probes sent to it.
//
// A peer's tunnel endpoints (its DPUs, each with its own VTEP) are tunnel targets of their own: per
// endpoint one neighbour and one FDB entry, and one route per slice (or borrowed /32) it holds, to
// its VTEP (or directly to its underlay address, as for a peer). What of the peer's prefixes no
// endpoint covers goes to the peer's own VTEP; the whole prefix is routed there and the endpoints'
// longer prefixes win. Gateway keys never repeat: the peer's lies in what no endpoint covers, an
// endpoint's is the first address of its first slice.
//
// A peer whose pools hand out every address (etcd blocks) publishes its tunnel address instead
// (Vtep.gateways, core/ipam/tunnel-addresses.ts), as Calico's VXLAN tunnel address: it is the key when
// it lies in what of the peer's own prefixes no endpoint covers; an older record keeps the first address.
//
// A route carries the smaller of our pod MTU and what the pods behind its target carry, from the uplink
// MTU the target publishes: a packet that fits our pods but not theirs would be dropped past the tunnel.

import type { Peer, Vtep } from '../../../core/fabric/peer-source';
import type { ClaimKind, FabricMode, PeerPath, RefusedClaim } from '../../../core/fabric/fabric-dataplane';
import { podMtu as carriedMtu } from '../../../core/fabric/pod-mtu';
import { formatAddress, parseCidr, type Cidr } from '../../../lib/cidr';
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
import { Claims, refusalReason, type Holders } from './identity-claims';
import { byAddress, inside, remainder } from './prefix-remainder';
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

export const routeKey = (r: { family: number; destination: string; priority?: number }): string =>
  `${r.family}|${r.destination}|${r.priority ?? 0}`;
export const neighbourKey = (n: { family: number; dst?: string }): string => `${n.family}|${n.dst ?? ''}`;
export const fdbKey = (f: { mac?: string }): string => f.mac ?? '';

/** The pod MTU for a mode: the uplink's less what the encapsulation adds on the paths the mode uses. */
export function podMtu(mode: Exclude<FabricMode, 'off'>, underlay: Underlay): number {
  if (mode === 'routed' || mode === 'external') return underlay.uplink.mtu;
  return underlay.uplink.mtu - VXLAN_OVERHEAD[underlay.family];
}

/** The first of a peer's (or endpoint's) underlay addresses in our underlay's family. */
function peerUnderlay(addresses: readonly string[], family: AddressFamily): string | undefined {
  const a = addresses.find((u) => {
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

/** A place prefixes are tunnelled or routed to: a peer's own VTEP, or one of its endpoints (DPUs). */
interface Target {
  /** The peer's name, or `<peer>/<endpoint id>`. */
  label: string;
  node: string;
  /** Its underlay address in our underlay's family, if it has one. */
  underlay?: string;
  vtep?: Peer['vtep'];
  /** The uplink MTU it publishes; a DPU (`dpu`) encapsulates its pods' packets whatever the mode. */
  mtu: number;
  dpu: boolean;
  /** What is routed to it. */
  prefixes: string[];
  /** The neighbour key per family: an address none of another target's routes uses. */
  gateways: Partial<Record<AddressFamily, string>>;
  /** Gateway keys it could have had that another target holds. */
  blocked?: RefusedClaim[];
}

interface TargetOutcome {
  path: 'direct' | 'vxlan' | 'unreachable';
  reason?: string;
  refused?: RefusedClaim[];
}

const refuse = (claim: ClaimKind, value: string, holder: string): TargetOutcome => {
  const r: RefusedClaim = { claim, value, holder };
  return { path: 'unreachable', reason: refusalReason(r), refused: [r] };
};

const familyOfPrefix = (p: string): AddressFamily => familyOf(p.slice(0, p.indexOf('/')));
/**
 * The gateway keys peers use for this node's own VTEP (planFabric's choice, seen from the node itself):
 * per family, the first address of the lowest of its prefixes, or of what of it no endpoint (DPU)
 * covers. The allocator never hands that address out (core/ipam/ip-pool.ts, offset 0), so putting it
 * on our device takes nothing from a pod.
 */
export function ownGatewayKeys(
  ranges: readonly string[],
  endpointPrefixes: readonly string[] = [],
): Partial<Record<AddressFamily, string>> {
  const parse = (texts: readonly string[]): Cidr[] =>
    texts.flatMap((t) => {
      try {
        return [parseCidr(t)];
      } catch {
        return [];
      }
    });
  const slices = parse(endpointPrefixes);
  const candidates = parse(ranges)
    .flatMap((r) => remainder(r, slices).slice(0, 1))
    .sort(byAddress);
  const out: Partial<Record<AddressFamily, string>> = {};
  for (const c of candidates) {
    const f = c.family === 4 ? AF_INET : AF_INET6;
    out[f] ??= formatAddress(c.family, c.network);
  }
  return out;
}

export function planFabric(ctx: PlanContext, peers: readonly Peer[]): FabricPlan {
  // Prefixes, MACs, underlay addresses and neighbour keys: a second target on one would take the
  // first's traffic, so each has one holder, the incumbent first (identity-claims.ts).
  const claims = new Claims(ctx.holders, peers);
  const plan: FabricPlan = { routes: [], neighbours: [], fdb: [], peers: [], holders: claims.held };
  const family = ctx.underlay.family;
  const sorted = [...peers].sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));

  /** The MTU of the routes to a target: ours, or what its pods carry when that is less. */
  const mtuOf = (t: Target & { underlay: string }): number =>
    Math.min(ctx.routeMtu, carriedMtu(t.dpu ? 'vxlan' : ctx.mode, { mtu: t.mtu, underlay: [t.underlay] }));

  /** Programs the routes (and VXLAN entries) to one target; says how it is reached or why not. */
  const reach = (t: Target): TargetOutcome => {
    const underlay = t.underlay;
    if (underlay === undefined)
      return {
        path: 'unreachable',
        reason: `no underlay address of IPv${family === AF_INET ? 4 : 6}, the family of this node's (${ctx.underlay.address})`,
      };
    const squatted =
      underlay === ctx.underlay.address ? 'this node' : claims.holder('underlay', underlay, t.label);
    if (squatted !== undefined) return refuse('underlay', underlay, squatted);
    const direct = onLink(ctx.underlay, underlay);
    if (ctx.mode === 'routed' || (ctx.mode === 'hybrid' && direct)) {
      if (!direct)
        return {
          path: 'unreachable',
          reason:
            `underlay ${underlay} is not on a subnet of uplink ${ctx.underlay.uplink.name} (${ctx.underlay.subnets.map((x) => x.text).join(', ') || 'none'}); ` +
            `routed mode routes only directly connected peers, never via a gateway (use hybrid or vxlan)`,
        };
      const skipped: string[] = [];
      for (const prefix of t.prefixes) {
        const f = familyOfPrefix(prefix);
        // A direct next hop must be of the prefix's family; IPv6 prefixes over an IPv4 underlay need VXLAN.
        if (f !== family) {
          skipped.push(prefix);
          continue;
        }
        claims.take('prefix', prefix, t.node);
        claims.take('underlay', underlay, t.label);
        plan.routes.push(
          peerRoute(
            f,
            prefix,
            { gateway: underlay, oif: ctx.underlay.uplink.index, onlink: false },
            mtuOf({ ...t, underlay }),
            t.node,
          ),
        );
      }
      if (skipped.length === 0) return { path: 'direct' };
      // Hybrid has a tunnel: the other family crosses it, even to a peer on the subnet (IPv6 pods
      // over an IPv4 underlay), so that every pod reaches every pod.
      const other = family === AF_INET ? AF_INET6 : AF_INET;
      const tunnelled =
        ctx.mode === 'hybrid'
          ? tunnel({ ...t, underlay, prefixes: skipped, gateways: { [other]: t.gateways[other] } })
          : undefined;
      if (tunnelled && tunnelled.path !== 'unreachable') return { path: 'direct' };
      return {
        path: 'direct',
        ...(tunnelled?.refused ? { refused: tunnelled.refused } : {}),
        reason:
          `not routed directly (another family than the underlay): ${skipped.join(', ')}` +
          (tunnelled?.reason ? `; not over VXLAN either: ${tunnelled.reason}` : ''),
      };
    }
    return tunnel({ ...t, underlay });
  };

  /** Routes a target's prefixes through our VXLAN device: vxlan mode, or hybrid across a router. */
  const tunnel = (t: Target & { underlay: string }): TargetOutcome => {
    if (ctx.vxlanIndex === undefined) return { path: 'unreachable', reason: 'no VXLAN device' };
    const vtep = t.vtep;
    if (!vtep) return { path: 'unreachable', reason: 'the peer publishes no VTEP (it runs no VXLAN device)' };
    if (vtep.vni !== ctx.vni || vtep.port !== ctx.port)
      return {
        path: 'unreachable',
        reason: `VTEP VNI ${vtep.vni} port ${vtep.port} differs from ours (VNI ${ctx.vni} port ${ctx.port})`,
      };
    const mac = vtep.mac.toLowerCase();
    const macHolder = mac === ctx.ownMac ? 'this node' : claims.holder('mac', mac, t.label);
    if (macHolder !== undefined) return refuse('mac', mac, macHolder);
    if (t.prefixes.length === 0) return { path: 'vxlan' };
    // A family without a free gateway key has no neighbour to route through: said, never silent.
    const unkeyed = t.prefixes.filter((p) => t.gateways[familyOfPrefix(p)] === undefined);
    const noKey =
      unkeyed.length === 0
        ? undefined
        : {
            reason: `not routed, no gateway key free: ${unkeyed.join(', ')}${(t.blocked ?? []).map((b) => `; ${refusalReason(b)}`).join('')}`,
            ...(t.blocked && t.blocked.length > 0 ? { refused: t.blocked } : {}),
          };
    if (noKey && unkeyed.length === t.prefixes.length) return { path: 'unreachable', ...noKey };
    claims.take('mac', mac, t.label);
    claims.take('underlay', t.underlay, t.label);
    plan.fdb.push({ mac, dst: t.underlay, peer: t.label });
    for (const f of [AF_INET, AF_INET6] as const) {
      const gateway = t.gateways[f];
      if (gateway === undefined) continue;
      claims.programmed('gateway', gateway, t.label);
      plan.neighbours.push({ family: f, dst: gateway, mac, peer: t.label });
      for (const prefix of t.prefixes) {
        if (familyOfPrefix(prefix) !== f) continue;
        claims.take('prefix', prefix, t.node);
        plan.routes.push(
          peerRoute(f, prefix, { gateway, oif: ctx.vxlanIndex, onlink: true }, mtuOf(t), t.node),
        );
      }
    }
    return { path: 'vxlan', ...noKey };
  };

  /**
   * Per family, the tunnel address the peer publishes when it lies in `candidates` (what of its own
   * prefixes this target serves) and no target uses it yet; else the first address of one of
   * `candidates` (in order) that no target uses yet.
   */
  const pickGateways = (
    label: string,
    candidates: readonly Cidr[],
    published?: { gateways?: Vtep['gateways']; within: readonly Cidr[]; ignored: string[] },
  ): Pick<Target, 'gateways' | 'blocked'> => {
    const out: Target['gateways'] = {};
    const blocked: RefusedClaim[] = [];
    /** Whether `address` is free for this target; if another holds it, that is kept for the reason. */
    const free = (address: string): boolean => {
      const holder = claims.holder('gateway', address, label);
      if (holder !== undefined) blocked.push({ claim: 'gateway', value: address, holder });
      return holder === undefined;
    };
    for (const [k, a] of Object.entries(published?.gateways ?? {})) {
      let address: string;
      try {
        address = canonicalAddress(a);
      } catch {
        continue;
      }
      const f = k === '4' ? AF_INET : AF_INET6;
      const value = parseCidr(`${address}/${k === '4' ? 32 : 128}`);
      if (!published?.within.some((c) => inside(value, c)) || !free(address)) {
        published?.ignored.push(address);
        continue;
      }
      out[f] = address;
      claims.take('gateway', address, label, false);
    }
    for (const c of candidates) {
      const f = c.family === 4 ? AF_INET : AF_INET6;
      const address = formatAddress(c.family, c.network);
      if (out[f] !== undefined || !free(address)) continue;
      out[f] = address;
      claims.take('gateway', address, label, false);
    }
    return blocked.length === 0 ? { gateways: out } : { gateways: out, blocked };
  };

  for (const peer of sorted) {
    const { ok: prefixes, bad } = canonicalPrefixes(peer);
    const path = (p: PeerPath['path'], reason?: string): PeerPath => {
      const reasons = [
        reason,
        bad.length > 0 ? `ignored prefixes that are not CIDRs: ${bad.join(', ')}` : undefined,
      ];
      const text = reasons.filter((r) => r !== undefined && r !== '').join('; ');
      const out: PeerPath = { node: peer.node, path: p, prefixes };
      if (text !== '') out.reason = text;
      if (refused.length > 0) out.refused = refused;
      return out;
    };
    const refused: RefusedClaim[] = [];
    if (ctx.mode === 'external') {
      plan.peers.push(path('external'));
      continue;
    }
    const underlay = peerUnderlay(peer.underlay, family);
    // Claimed twice: the incumbent (else the first peer by name) keeps the prefix; traffic cannot go to both.
    const taken: RefusedClaim[] = [];
    const own: Cidr[] = [];
    for (const p of prefixes) {
      const holder = claims.holder('prefix', p, peer.node);
      if (holder === undefined) own.push(parseCidr(p));
      else taken.push({ claim: 'prefix', value: p, holder });
    }
    const clash =
      taken.length > 0
        ? `prefixes also announced by ${taken.map((r) => `${r.holder} (${r.value})`).join(', ')}, which keeps them`
        : undefined;
    refused.push(...taken);
    // The endpoints' prefixes (slices and borrowed /32), each only inside a prefix this peer holds.
    const endpoints: Array<{
      id: string;
      underlay?: string;
      mtu: number;
      vtep: Peer['vtep'];
      prefixes: Cidr[];
    }> = [];
    const notOwn: string[] = [];
    const claimed = new Set<string>();
    for (const e of peer.endpoints ?? []) {
      const mine: Cidr[] = [];
      for (const text of e.prefixes) {
        let c: Cidr;
        try {
          c = parseCidr(text);
        } catch {
          notOwn.push(`${e.id}: ${text}`);
          continue;
        }
        if (claimed.has(c.text) || !own.some((o) => inside(c, o))) {
          notOwn.push(`${e.id}: ${c.text}`);
          continue;
        }
        claimed.add(c.text);
        mine.push(c);
      }
      endpoints.push({
        id: e.id,
        underlay: peerUnderlay([e.underlay], family),
        mtu: e.mtu,
        vtep: e.vtep,
        prefixes: mine,
      });
    }
    const slices = endpoints.flatMap((e) => e.prefixes);
    // What of each prefix no endpoint covers goes to the peer itself: the whole prefix is routed
    // there (the endpoints' longer prefixes win), and its gateway key lies outside every slice.
    const rest = own.map((o) => ({ prefix: o, left: remainder(o, slices) })).filter((r) => r.left.length > 0);
    const outcomes: string[] = [];
    const ignoredTunnel: string[] = [];
    let host: TargetOutcome | undefined;
    if (endpoints.length === 0 || rest.length > 0) {
      host = reach({
        label: peer.node,
        node: peer.node,
        underlay,
        vtep: peer.vtep,
        mtu: peer.mtu,
        dpu: false,
        prefixes: rest.map((r) => r.prefix.text),
        ...pickGateways(peer.node, rest.flatMap((r) => r.left.slice(0, 1)).sort(byAddress), {
          gateways: peer.vtep?.gateways,
          within: rest.flatMap((r) => r.left),
          ignored: ignoredTunnel,
        }),
      });
      refused.push(...(host.refused ?? []));
      if (endpoints.length > 0 && host.path === 'unreachable')
        outcomes.push(
          `unreachable, covered by no endpoint: ${rest.flatMap((r) => r.left.map((c) => c.text)).join(', ')} (${host.reason ?? ''})`,
        );
      else if (host.reason !== undefined) outcomes.push(host.reason);
    }
    const paths: Array<TargetOutcome['path']> = host ? [host.path] : [];
    for (const e of endpoints) {
      if (e.prefixes.length === 0) continue;
      // Slices first: a slice's first address is never a pod's, a borrowed /32 is.
      const byLength = [...e.prefixes].sort((a, b) => a.prefixLength - b.prefixLength);
      const label = `${peer.node}/${e.id}`;
      const o = reach({
        label,
        node: peer.node,
        underlay: e.underlay,
        vtep: e.vtep,
        mtu: e.mtu,
        dpu: true,
        prefixes: e.prefixes.map((c) => c.text),
        ...pickGateways(label, byLength),
      });
      refused.push(...(o.refused ?? []));
      paths.push(o.path);
      if (o.path === 'unreachable')
        outcomes.push(
          `endpoint ${e.id} (${e.prefixes.map((c) => c.text).join(', ')}) unreachable: ${o.reason ?? ''}`,
        );
      else if (o.reason !== undefined) outcomes.push(`endpoint ${e.id}: ${o.reason}`);
    }
    if (notOwn.length > 0)
      outcomes.push(`endpoint prefixes outside the peer's own prefixes, not routed: ${notOwn.join(', ')}`);
    const overall: PeerPath['path'] = paths.includes('vxlan')
      ? 'vxlan'
      : paths.includes('direct')
        ? 'direct'
        : 'unreachable';
    if (endpoints.length === 0 && host) {
      // A peer without endpoints reads as it always did.
      plan.peers.push(
        path(
          host.path,
          [clash, host.reason, tunnelNote(ignoredTunnel)].filter((r) => r !== undefined).join('; '),
        ),
      );
      continue;
    }
    plan.peers.push(
      path(
        overall,
        [clash, ...outcomes, tunnelNote(ignoredTunnel)].filter((r) => r !== undefined).join('; '),
      ),
    );
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

/** Why a peer is keyed on its first address although it publishes a tunnel address. */
function tunnelNote(ignored: readonly string[]): string | undefined {
  return ignored.length === 0
    ? undefined
    : `published tunnel address ${ignored.join(', ')} ignored: not inside its own prefixes (or another peer's key); keyed on its first address`;
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

/**
 * Where each peer is probed over the path the plan gives it: over VXLAN its gateway key (IPv4 first),
 * which the peer holds on its device (gateway-address.ts), so its kernel answers through the tunnel;
 * routed, its underlay address via the direct route. A peer reached only through its DPUs, or not at
 * all, is not probed.
 */
export function probeTargets(plan: FabricPlan): Array<{ node: string; address: string; family: 4 | 6 }> {
  const out: Array<{ node: string; address: string; family: 4 | 6 }> = [];
  const keys = new Map<string, WantedNeighbour>();
  for (const n of plan.neighbours) {
    const had = keys.get(n.peer);
    if (!had || (had.family !== AF_INET && n.family === AF_INET)) keys.set(n.peer, n);
  }
  const direct = new Map<string, string>();
  for (const r of plan.routes)
    if (r.peer !== undefined && r.gateway !== undefined && !r.onlink && !direct.has(r.peer))
      direct.set(r.peer, r.gateway);
  for (const p of plan.peers) {
    if (p.path === 'vxlan') {
      const k = keys.get(p.node);
      if (k) out.push({ node: p.node, address: k.dst, family: k.family === AF_INET ? 4 : 6 });
    } else if (p.path === 'direct') {
      const gw = direct.get(p.node);
      if (gw !== undefined) out.push({ node: p.node, address: gw, family: familyOf(gw) === AF_INET ? 4 : 6 });
    }
  }
  return out;
}

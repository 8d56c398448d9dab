import { isIP } from 'node:net';
import type { FabricSettings, OwnPrefixes } from '../../core/fabric-dataplane';
import type { Peer } from '../../core/peer-source';
import { encapsulationOverhead } from '../../core/fabric/pod-mtu';
import { cidrContains, formatAddress, parseAddress, parseCidr, type Cidr } from '../../lib/cidr';
import { dpuVtepMac } from '../../lib/vtep-mac';
import { RouteVia, type FabricObject } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// What one agent must hold for the fabric, from the peer table, this node's prefixes as the core cut
// them, and the node's other DPUs: its own VTEP, its slices, every remote tunnel endpoint (another
// node's VXLAN device, another node's DPU, a DPU of this node beside it) and one route per remote
// prefix. A pure function of its input: the same input gives the same objects, so an apply that changes
// nothing sends nothing.
//
// Every tunnel endpoint is one FDB entry on the DPU, keyed by its VTEP MAC, towards its address: two
// endpoints stating one MAC or one address cannot both be held. The incumbent keeps it: the endpoint
// that held that MAC or address in the previous plan (`held`), else the agent's own VTEP, then the
// plan's order. A newcomer is left out, with its routes, until it no longer clashes; name order never
// lets a newcomer displace an established endpoint (a snapshot lists objects by name). Across a daemon
// restart `held` comes from the store (fabric-holders.ts).
//
// This node's DPUs' MACs are derived from the node's name (settings.nodeName, given with a source
// that publishes records), the agent's id and its address (dpuVtepMac), as endpoints() publishes them;
// a remote endpoint's MAC is the one its record states.
//
// A route carries the smaller of the agent's overlay MTU and its target's (the uplink MTU the target
// states, less the encapsulation): what the pods behind the target carry, and no more.

/** One of this node's agents that carries the fabric. */
export interface FabricAgent {
  id: string;
  /** Its uplink address: its VTEP's. */
  address: string;
  uplinkMtu: number;
}

export interface FabricPlanInput {
  /** This node's name, as peers know it. */
  node: string;
  /** The agent whose objects are planned. */
  agent: FabricAgent;
  /** Every agent of this node that carries the fabric (the planned one among them). */
  locals: readonly FabricAgent[];
  peers: readonly Peer[];
  own: OwnPrefixes;
  settings: Pick<FabricSettings, 'vni' | 'port' | 'nodeName'>;
  /** Who held each identity in the previous plan (identityOwners() of it); none: a first plan. */
  held?: ReadonlyMap<string, string>;
}

/** A fabric object as desired, before it is given a generation. */
export type FabricBody = Omit<FabricObject, 'generation'>;

export const VTEP_OBJECT = 'vtep';
export const prefixObject = (cidr: string): string => `prefix/${cidr}`;
export const routeObject = (cidr: string): string => `route/${cidr}`;
/** "peer/<node>" for a node's own VXLAN device, "peer/<node>/<endpoint>" for one of its DPUs. */
export const peerObject = (node: string, endpoint?: string): string =>
  endpoint ? `peer/${node}/${endpoint}` : `peer/${node}`;

/** The node a "peer/<node>[/<endpoint>]" name points at, or undefined for another kind of name. */
export function peerNodeOf(name: string): string | undefined {
  if (!name.startsWith('peer/')) return undefined;
  const rest = name.slice('peer/'.length);
  const slash = rest.indexOf('/');
  return slash < 0 ? rest : rest.slice(0, slash);
}

/** MTU of an agent's overlay: its uplink's less the encapsulation. */
export function overlayMtu(agent: FabricAgent): number {
  return tunnelMtu(agent.uplinkMtu, agent.address);
}

/** What a tunnel endpoint at `address` with an uplink of `uplinkMtu` carries for its pods. */
function tunnelMtu(uplinkMtu: number, address: string): number {
  return uplinkMtu - encapsulationOverhead('vxlan', { underlay: [address] });
}

/** A route a part asks for: its prefix, the FabricPeer it goes to, and what that peer's pods carry. */
export interface PartRoute {
  prefix: string;
  peer: string;
  mtu: number;
}

/**
 * What one source of the plan contributes: its FabricPeer objects, and the routes it asks for in its
 * order of preference (each prefix once). A route goes to the first part that asks for its prefix, in
 * the plan's order (planParts), unless it is one of the agent's own prefixes.
 */
export interface PlanPart {
  objects: FabricBody[];
  routes: PartRoute[];
}

/** The agent's own objects: its VTEP and its slices (whose prefixes are never routed elsewhere). */
export function planOwn(input: Pick<FabricPlanInput, 'agent' | 'own' | 'settings'>): {
  objects: FabricBody[];
  prefixes: string[];
} {
  const { agent, settings } = input;
  const vtep: FabricBody = {
    name: VTEP_OBJECT,
    localVtep: {
      address: agent.address,
      mac: dpuVtepMac(agent.address, settings.nodeName, agent.id),
      vni: settings.vni,
      port: settings.port,
      mtu: overlayMtu(agent),
    },
  };
  const mine = canonical(input.own.byEndpoint.get(agent.id) ?? []).map((p) => p.text);
  const prefixes = mine.map((text): FabricBody => ({
    name: prefixObject(text),
    localPrefix: { prefix: text },
  }));
  return { objects: [vtep, ...prefixes], prefixes: mine };
}

/** Another DPU of this node, beside the agent: traffic between the two crosses the fabric as well. */
export function planLocalPart(
  input: Pick<FabricPlanInput, 'node' | 'own' | 'settings'>,
  other: FabricAgent,
): PlanPart {
  const { node, settings } = input;
  const name = peerObject(node, other.id);
  return {
    objects: [
      {
        name,
        peer: {
          node,
          endpoint: other.id,
          address: other.address,
          mac: dpuVtepMac(other.address, settings.nodeName, other.id),
          vni: settings.vni,
          port: settings.port,
        },
      },
    ],
    routes: unique(
      canonical(input.own.byEndpoint.get(other.id) ?? []).map((p) => ({
        prefix: p.text,
        peer: name,
        mtu: overlayMtu(other),
      })),
    ),
  };
}

/** A remote node: each of its DPUs, its own VXLAN device when it has one, and their prefixes. */
export function planRemotePart(agent: FabricAgent, peer: Peer): PlanPart {
  const objects: FabricBody[] = [];
  const routes: PartRoute[] = [];
  const claimed: Cidr[] = [];
  for (const e of [...(peer.endpoints ?? [])].sort(byId)) {
    if (!isIP(e.underlay)) continue;
    const name = peerObject(peer.node, e.id);
    objects.push({
      name,
      peer: {
        node: peer.node,
        endpoint: e.id,
        address: e.underlay,
        mac: e.vtep.mac,
        vni: e.vtep.vni,
        port: e.vtep.port,
      },
    });
    const mtu = tunnelMtu(e.mtu, e.underlay);
    for (const p of canonical(e.prefixes)) {
      claimed.push(p);
      routes.push({ prefix: p.text, peer: name, mtu });
    }
  }
  const address = sameFamily(peer.underlay, agent.address);
  if (peer.vtep && address) {
    const name = peerObject(peer.node);
    objects.push({
      name,
      peer: {
        node: peer.node,
        endpoint: '',
        address,
        mac: peer.vtep.mac,
        vni: peer.vtep.vni,
        port: peer.vtep.port,
      },
    });
    // What no endpoint claims goes to the node's own device; a slice of a node range is more specific
    // than the range, so the range's route does not take the slices' traffic.
    const mtu = tunnelMtu(peer.mtu, address);
    for (const p of canonical(peer.prefixes))
      if (!claimed.some((c) => inside(p, c))) routes.push({ prefix: p.text, peer: name, mtu });
  }
  return { objects, routes: unique(routes) };
}

/** The part's route as the agent holds it: at its overlay MTU, or the target's when that is less. */
export function routeBody(agent: FabricAgent, r: PartRoute): FabricBody {
  return {
    name: routeObject(r.prefix),
    peerRoute: {
      prefix: r.prefix,
      peer: r.peer,
      via: RouteVia.ROUTE_VIA_ENCAP,
      mtu: Math.min(overlayMtu(agent), r.mtu),
    },
  };
}

/**
 * The order in which parts claim routes: this node's other agents by id, then peers by node name, so
 * that the result does not depend on the order the table arrived in. Keys compare as plain strings.
 */
export const localPartKey = (id: string): string => `1\0${id}`;
export const remotePartKey = (node: string): string => `2\0${node}`;

/** The identities a FabricPeer (or the LocalVtep) takes on the DPU: its VTEP MAC and its address. */
export function identityKeys(o: FabricBody): string[] {
  const e = o.peer ?? o.localVtep;
  return e ? [`mac|${e.mac.toLowerCase()}`, `address|${canonicalAddress(e.address)}`] : [];
}

/** Which object holds each identity in `plan`: the `held` of the next plan. */
export function identityOwners(plan: ReadonlyMap<string, FabricBody>): Map<string, string> {
  const out = new Map<string, string>();
  plan.forEach((o, name) => {
    for (const k of identityKeys(o)) out.set(k, name);
  });
  return out;
}

/**
 * Every fabric object `input.agent` must hold, by name. `refused`, when given, is told each endpoint
 * left out for an identity another holds: its object name → the holder's.
 */
export function planFabric(input: FabricPlanInput, refused?: Map<string, string>): Map<string, FabricBody> {
  const { node, agent } = input;
  const out = new Map<string, FabricBody>();
  const own = planOwn(input);
  for (const o of own.objects) out.set(o.name, o);
  // A prefix already routed (or this agent's own) is not routed again: the first claim wins.
  const routed = new Set(own.prefixes);
  const wanted: PlanPart[] = [
    ...[...input.locals]
      .filter((other) => other.id !== agent.id)
      .sort(byId)
      .map((other) => planLocalPart(input, other)),
    ...[...input.peers]
      .filter((peer) => peer.node !== node)
      .sort((x, y) => compare(x.node, y.node))
      .map((peer) => planRemotePart(agent, peer)),
  ];
  const parts = withoutClashes(own.objects, wanted, input.held ?? new Map(), refused);
  for (const part of parts) {
    for (const o of part.objects) out.set(o.name, o);
    for (const r of part.routes) {
      if (routed.has(r.prefix)) continue;
      routed.add(r.prefix);
      out.set(routeObject(r.prefix), routeBody(agent, r));
    }
  }
  return out;
}

/**
 * The parts without the endpoints that clash with an incumbent's identity (and without their routes).
 * Endpoints that held one of their identities in the previous plan choose first, in the plan's order,
 * then the others; each takes its identities unless one is taken by another object already.
 */
function withoutClashes(
  own: readonly FabricBody[],
  parts: readonly PlanPart[],
  held: ReadonlyMap<string, string>,
  refused: Map<string, string> | undefined,
): PlanPart[] {
  const taken = new Map<string, string>();
  for (const o of own) for (const k of identityKeys(o)) taken.set(k, o.name);
  const peers = parts.flatMap((part, i) => part.objects.map((o) => ({ o, i, keys: identityKeys(o) })));
  const incumbent = (x: (typeof peers)[number]): boolean => x.keys.some((k) => held.get(k) === x.o.name);
  const left = new Set<FabricBody>();
  for (const x of [...peers.filter(incumbent), ...peers.filter((x) => !incumbent(x))]) {
    const clash = x.keys.map((k) => taken.get(k)).find((owner) => owner !== undefined && owner !== x.o.name);
    if (clash !== undefined) {
      left.add(x.o);
      refused?.set(x.o.name, clash);
      continue;
    }
    for (const k of x.keys) taken.set(k, x.o.name);
  }
  if (left.size === 0) return [...parts];
  return parts.map((part) => {
    const out = new Set(part.objects.filter((o) => left.has(o)).map((o) => o.name));
    if (out.size === 0) return part;
    return {
      objects: part.objects.filter((o) => !left.has(o)),
      routes: part.routes.filter((r) => !out.has(r.peer)),
    };
  });
}

/** An address in its canonical text (IPv6 compressed, lower case); the text itself when it is none. */
export function canonicalAddress(text: string): string {
  try {
    const a = parseAddress(text);
    return formatAddress(a.family, a.value);
  } catch {
    return text;
  }
}

/** The first claim of each prefix within one part. */
function unique(routes: PartRoute[]): PartRoute[] {
  const seen = new Set<string>();
  return routes.filter((r) => !seen.has(r.prefix) && !!seen.add(r.prefix));
}

/** The prefixes that parse, canonical and sorted; a malformed one is left out (sources validate). */
function canonical(prefixes: readonly string[]): Cidr[] {
  const out: Cidr[] = [];
  for (const text of prefixes) {
    try {
      out.push(parseCidr(text));
    } catch {
      // A source vouches for its prefixes; one that does not parse cannot be routed anyway.
    }
  }
  return out.sort((a, b) => compare(a.text, b.text));
}

/** Whether `inner` lies inside `outer` (or equals it). */
function inside(inner: Cidr, outer: Cidr): boolean {
  return (
    inner.family === outer.family &&
    inner.prefixLength >= outer.prefixLength &&
    cidrContains(outer, inner.network)
  );
}

/** The peer's underlay address of the agent's family, else its preferred one. */
function sameFamily(underlay: readonly string[], address: string): string | undefined {
  const family = isIP(address);
  return underlay.find((a) => isIP(a) === family) ?? underlay.find((a) => isIP(a) !== 0);
}

function byId(a: { id: string }, b: { id: string }): number {
  return compare(a.id, b.id);
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

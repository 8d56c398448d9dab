import { isIP } from 'node:net';
import type { FabricSettings, OwnPrefixes } from '../../core/fabric/fabric-dataplane';
import type { Peer } from '../../core/fabric/peer-source';
import { encapsulationOverhead } from '../../core/fabric/pod-mtu';
import { cidrContains, parseCidr, type Cidr } from '../../lib/cidr';
import { vtepMac } from '../../lib/vtep-mac';
import { RouteVia, type FabricObject } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// What one agent must hold for the fabric, from the peer table, this node's prefixes as the core cut
// them, and the node's other DPUs: its own VTEP, its slices, every remote tunnel endpoint (another
// node's VXLAN device, another node's DPU, a DPU of this node beside it) and one route per remote
// prefix. A pure function of its input: the same input gives the same objects, so an apply that changes
// nothing sends nothing.

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
  settings: Pick<FabricSettings, 'vni' | 'port'>;
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
  return agent.uplinkMtu - encapsulationOverhead('vxlan', { underlay: [agent.address] });
}

/** Every fabric object `input.agent` must hold, by name. */
export function planFabric(input: FabricPlanInput): Map<string, FabricBody> {
  const { node, agent, settings } = input;
  const out = new Map<string, FabricBody>();
  const mtu = overlayMtu(agent);
  const vxlan = { vni: settings.vni, port: settings.port };
  out.set(VTEP_OBJECT, {
    name: VTEP_OBJECT,
    localVtep: { address: agent.address, mac: vtepMac(agent.address), ...vxlan, mtu },
  });
  const mine = canonical(input.own.byEndpoint.get(agent.id) ?? []);
  for (const p of mine)
    out.set(prefixObject(p.text), { name: prefixObject(p.text), localPrefix: { prefix: p.text } });

  // A prefix already routed (or this agent's own) is not routed again: the first claim wins, in the
  // order below (this node's agents, then peers by name), so that the result does not depend on the
  // order the table arrived in.
  const routed = new Set(mine.map((p) => p.text));
  const route = (prefix: string, peer: string): void => {
    if (routed.has(prefix)) return;
    routed.add(prefix);
    out.set(routeObject(prefix), {
      name: routeObject(prefix),
      peerRoute: { prefix, peer, via: RouteVia.ROUTE_VIA_ENCAP, mtu },
    });
  };

  // Traffic between two DPUs of this node crosses the fabric as well.
  for (const other of [...input.locals].sort(byId)) {
    if (other.id === agent.id) continue;
    const name = peerObject(node, other.id);
    out.set(name, {
      name,
      peer: { node, endpoint: other.id, address: other.address, mac: vtepMac(other.address), ...vxlan },
    });
    for (const p of canonical(input.own.byEndpoint.get(other.id) ?? [])) route(p.text, name);
  }

  for (const peer of [...input.peers].sort((a, b) => compare(a.node, b.node))) {
    if (peer.node === node) continue;
    const claimed: Cidr[] = [];
    for (const e of [...(peer.endpoints ?? [])].sort(byId)) {
      if (!isIP(e.underlay)) continue;
      const name = peerObject(peer.node, e.id);
      out.set(name, {
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
      for (const p of canonical(e.prefixes)) {
        claimed.push(p);
        route(p.text, name);
      }
    }
    const address = sameFamily(peer.underlay, agent.address);
    if (!peer.vtep || !address) continue;
    const name = peerObject(peer.node);
    out.set(name, {
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
    for (const p of canonical(peer.prefixes)) if (!claimed.some((c) => inside(p, c))) route(p.text, name);
  }
  return out;
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

// A peer as the places its prefixes are tunnelled or routed to: its own VTEP, and each of its tunnel
// endpoints (DPUs) with the slices (or borrowed /32) it holds. What of the peer's prefixes no endpoint
// covers stays the peer's own. Its own file because it decides what each target is asked to carry
// before any path is chosen (reach-target.ts) and before any claim is taken.

import type { ClaimKind, RefusedClaim } from '../../../../core/fabric-dataplane';
import type { Peer } from '../../../../core/peer-source';
import { parseCidr, type Cidr } from '../../../../lib/cidr';
import { canonicalAddress, familyOf, type AddressFamily } from '../../../../lib/rtnetlink';
import { refusalReason, type Claims } from '../identity-claims';
import { inside, remainder } from '../prefix-remainder';

/** A place prefixes are tunnelled or routed to: a peer's own VTEP, or one of its endpoints (DPUs). */
export interface Target {
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

/** How a target is reached, or why not, and the claims refused to it. */
export interface TargetOutcome {
  path: 'direct' | 'vxlan' | 'unreachable';
  reason?: string;
  refused?: RefusedClaim[];
}

export const refuse = (claim: ClaimKind, value: string, holder: string): TargetOutcome => {
  const r: RefusedClaim = { claim, value, holder };
  return { path: 'unreachable', reason: refusalReason(r), refused: [r] };
};

export const familyOfPrefix = (p: string): AddressFamily => familyOf(p.slice(0, p.indexOf('/')));

/** One of the peer's endpoints, with the prefixes of it that lie inside what the peer holds. */
export interface EndpointTarget {
  id: string;
  underlay?: string;
  mtu: number;
  vtep: Peer['vtep'];
  prefixes: Cidr[];
}

/** A peer cut into its targets' prefixes, and what of it could not be taken. */
export interface PeerTargets {
  /** The peer's prefixes that parse, canonical. */
  prefixes: string[];
  /** Those that do not parse. */
  bad: string[];
  /** Its underlay address in our underlay's family, if it has one. */
  underlay?: string;
  /** Prefixes another peer holds (the incumbent, else the first by name). */
  taken: RefusedClaim[];
  endpoints: EndpointTarget[];
  /** Endpoint prefixes outside the peer's own, or named twice: `<endpoint id>: <prefix>`. */
  notOwn: string[];
  /** Per prefix the peer holds that endpoints leave part of: that prefix, and what they leave. */
  rest: Array<{ prefix: Cidr; left: Cidr[] }>;
}

/** The first of a peer's (or endpoint's) underlay addresses in our underlay's family. */
export function peerUnderlay(addresses: readonly string[], family: AddressFamily): string | undefined {
  const a = addresses.find((u) => {
    try {
      return familyOf(u) === family;
    } catch {
      return false;
    }
  });
  return a === undefined ? undefined : canonicalAddress(a);
}

export function canonicalPrefixes(peer: Peer): { ok: string[]; bad: string[] } {
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

/** The peer's targets: reads the claims (who holds its prefixes), takes none. */
export function peerTargets(peer: Peer, family: AddressFamily, claims: Claims): PeerTargets {
  const { ok: prefixes, bad } = canonicalPrefixes(peer);
  // Claimed twice: the incumbent (else the first peer by name) keeps the prefix; traffic cannot go to both.
  const taken: RefusedClaim[] = [];
  const own: Cidr[] = [];
  for (const p of prefixes) {
    const holder = claims.holder('prefix', p, peer.node);
    if (holder === undefined) own.push(parseCidr(p));
    else taken.push({ claim: 'prefix', value: p, holder });
  }
  const { endpoints, notOwn } = endpointTargets(peer, own, family);
  const slices = endpoints.flatMap((e) => e.prefixes);
  // What of each prefix no endpoint covers goes to the peer itself: the whole prefix is routed
  // there (the endpoints' longer prefixes win), and its gateway key lies outside every slice.
  const rest = own.map((o) => ({ prefix: o, left: remainder(o, slices) })).filter((r) => r.left.length > 0);
  return { prefixes, bad, underlay: peerUnderlay(peer.underlay, family), taken, endpoints, notOwn, rest };
}

/** The endpoints' prefixes (slices and borrowed /32), each only inside a prefix this peer holds. */
function endpointTargets(
  peer: Peer,
  own: readonly Cidr[],
  family: AddressFamily,
): { endpoints: EndpointTarget[]; notOwn: string[] } {
  const endpoints: EndpointTarget[] = [];
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
  return { endpoints, notOwn };
}

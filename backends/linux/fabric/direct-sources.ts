// Who may send pod-range sources to us on the direct path of hybrid mode. A peer on our subnet sends
// its pods' packets as plain IP through the uplink; so can anyone else on the subnet, with any source,
// and strict rp_filter cannot tell them apart: the route back to every direct peer's prefix leaves by
// the same uplink. What tells them apart is the link layer: a packet from a peer's pod carries the
// peer's uplink MAC as its Ethernet source, the MAC the kernel resolved for the peer's underlay
// address (our routes to its prefixes go `via` that address, so the kernel keeps that entry anyway).
// So the filter admits a pod-range source from the uplink only with the MAC of the peer (or DPU) that
// owns the prefix, read from the neighbour table at every apply.
//
// This trusts the subnet as far as ARP (NDP) does: a host that can poison our neighbour entry for a
// peer could take that peer's traffic anyway. A peer whose MAC is not known yet is asked for
// (RTM_NEWNEIGH with NTF_USE makes the kernel resolve it) and, until it answers, its prefixes are
// admitted from any MAC: dropping a live peer's traffic on the strength of a cache miss would be an
// outage of our making (DESIGN.md, "Deleting live state").

import type { Peer } from '../../../core/peer-source';
import { familyBits, parseCidr, type Cidr } from '../../../lib/cidr';
import {
  AF_INET,
  AF_INET6,
  canonicalAddress,
  familyOf,
  listNeighbours,
  newNeighbourRequest,
  type NetlinkSocket,
} from '../../../lib/rtnetlink';
import { NUD_INCOMPLETE } from '../../../lib/rtnetlink/neighbour';
import { onLink, type Underlay } from './underlay';
import { outermost } from './vxlan-inner-sources';

/** ndm_flags: "use" the entry, which starts its resolution (linux/neighbour.h). */
const NTF_USE = 0x01;
/** How long an apply waits for the kernel to resolve a peer it has just asked for. */
const RESOLVE_WAIT_MS = 150;
const RESOLVE_POLL_MS = 15;

/** What the filter needs for the direct path: the uplink, what is guarded, and who owns what. */
export interface DirectSources {
  /** The uplink's name (the filter matches `iifname`, which survives the device being re-created). */
  uplink: string;
  /** The family of the underlay, the only one the direct path carries. */
  family: 4 | 6;
  /** Sources that arrive on the uplink only from their owner: the cluster ranges and every peer's prefixes. */
  guarded: Cidr[];
  /** Per MAC, the prefixes its owner holds (of the underlay's family). */
  owners: Map<string, Cidr[]>;
  /** Prefixes of direct peers whose MAC is not known yet: admitted from any MAC, for now. */
  unresolved: Cidr[];
  /** The uplink's ifindex and, per direct peer's underlay address, the MAC used (undefined: unresolved). */
  uplinkIndex: number;
  macs: Map<string, string | undefined>;
}

/**
 * Whether a neighbour notification changes what the direct path admits: a direct peer's entry on the
 * uplink resolved to another MAC than the filter holds (a replaced NIC, a first answer). The fabric
 * then applies again at once rather than dropping the peer's pods until the next pass.
 */
export function directNeighbourChanged(
  d: DirectSources | undefined,
  e: { ifindex?: number; dst?: string; mac?: string },
): boolean {
  if (!d || e.ifindex !== d.uplinkIndex || e.dst === undefined || e.mac === undefined) return false;
  let dst: string;
  try {
    dst = canonicalAddress(e.dst);
  } catch {
    return false;
  }
  return d.macs.has(dst) && d.macs.get(dst) !== e.mac;
}

function parse(texts: readonly string[]): Cidr[] {
  return texts.flatMap((t) => {
    try {
      return [parseCidr(t)];
    } catch {
      return [];
    }
  });
}

/** A direct target: the underlay address it sends from and the prefixes routed to it. */
interface Target {
  address: string;
  prefixes: Cidr[];
}

/** The peers (and DPUs) the plan routes directly: on one of the uplink's subnets. */
function directTargets(underlay: Underlay, peers: readonly Peer[]): Target[] {
  const fam = underlay.family === AF_INET ? 4 : 6;
  const usable = (a: string): string | undefined => {
    try {
      const c = canonicalAddress(a);
      return familyOf(c) === underlay.family && onLink(underlay, c) ? c : undefined;
    } catch {
      return undefined;
    }
  };
  const out: Target[] = [];
  const taken = new Set<string>();
  // The first peer by name keeps a prefix claimed twice, as the plan does.
  const sorted = [...peers].sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
  for (const p of sorted) {
    const own = parse(p.prefixes).filter((c) => c.family === fam && !taken.has(c.text));
    for (const c of own) taken.add(c.text);
    const host = p.underlay.map(usable).find((a) => a !== undefined);
    if (host !== undefined && own.length > 0) out.push({ address: host, prefixes: own });
    for (const e of p.endpoints ?? []) {
      const address = usable(e.underlay);
      const slices = parse(e.prefixes).filter(
        (c) => c.family === fam && own.some((o) => o.prefixLength <= c.prefixLength && inside(c, o)),
      );
      if (address !== undefined && slices.length > 0) out.push({ address, prefixes: slices });
    }
  }
  return out;
}

const inside = (inner: Cidr, outer: Cidr): boolean =>
  inner.family === outer.family &&
  inner.network >> BigInt(familyBits(outer.family) - outer.prefixLength) ===
    outer.network >> BigInt(familyBits(outer.family) - outer.prefixLength);

/** MACs the kernel knows for these addresses on the uplink (an entry still resolving has none). */
async function knownMacs(sock: NetlinkSocket, underlay: Underlay): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const n of await listNeighbours(sock, underlay.family, { ifindex: underlay.uplink.index }))
    if (n.dst !== undefined && n.mac !== undefined && (n.state & NUD_INCOMPLETE) === 0)
      out.set(canonicalAddress(n.dst), n.mac);
  return out;
}

/**
 * The direct path's sources for the filter. Asks the kernel to resolve direct peers it has no MAC
 * for (or whose entry failed) and waits a moment for the answers.
 */
export async function directSources(
  sock: NetlinkSocket,
  underlay: Underlay,
  peers: readonly Peer[],
  clusterCidrs: readonly string[],
): Promise<DirectSources> {
  const targets = directTargets(underlay, peers);
  let macs = await knownMacs(sock, underlay);
  const missing = targets.filter((t) => !macs.has(t.address));
  if (missing.length > 0) {
    for (const t of missing)
      await sock
        .request(
          newNeighbourRequest(
            {
              family: underlay.family,
              ifindex: underlay.uplink.index,
              dst: t.address,
              state: 0,
              flags: NTF_USE,
            },
            { replace: true },
          ),
        )
        .catch(() => undefined); // only a hint to the kernel: resolution is asked again at the next apply
    for (let waited = 0; waited < RESOLVE_WAIT_MS; waited += RESOLVE_POLL_MS) {
      await new Promise((r) => setTimeout(r, RESOLVE_POLL_MS));
      macs = await knownMacs(sock, underlay);
      if (missing.every((t) => macs.has(t.address))) break;
    }
  }
  const owners = new Map<string, Cidr[]>();
  const unresolved: Cidr[] = [];
  for (const t of targets) {
    const mac = macs.get(t.address);
    if (mac === undefined) unresolved.push(...t.prefixes);
    else owners.set(mac, [...(owners.get(mac) ?? []), ...t.prefixes]);
  }
  for (const [mac, list] of owners) owners.set(mac, outermost(list));
  // Never a range that overlaps the underlay's own subnets (a cluster range written too wide): the
  // nodes' own traffic comes from there, and no peer owns it.
  const overlapsUnderlay = (c: Cidr): boolean =>
    underlay.subnets.some((s) => s.family === c.family && (inside(c, s) || inside(s, c)));
  const guarded = outermost([...parse(clusterCidrs), ...peers.flatMap((p) => parse(p.prefixes))]).filter(
    (c) => !overlapsUnderlay(c),
  );
  return {
    uplink: underlay.uplink.name,
    family: underlay.family === AF_INET6 ? 6 : 4,
    guarded,
    owners,
    unresolved: outermost(unresolved),
    uplinkIndex: underlay.uplink.index,
    macs: new Map(targets.map((t) => [t.address, macs.get(t.address)])),
  };
}

import type { V1Node } from '@kubernetes/client-node';
import { formatAddress, parseAddress, parseCidr } from '../../lib/cidr';
import { vouchedEndpoints } from '../../core/fabric/endpoint-fields';
import type { Peer } from '../../core/peer-source';
import { PrefixLedger, type PrefixClaim, type Settled } from '../../core/fabric/prefix-ledger';
import { FABRIC_ANNOTATION, decodeAnnotation } from './fabric-annotation';

// The other nodes as the Kubernetes API says they are: one peer per Node, from what the cluster itself
// vouches for (spec.podCIDRs, assigned by the controller-manager's node IPAM; the InternalIP addresses
// the kubelet reports) plus what the node's daemon published in its annotation (VTEP, MTU, boot id).
// A Node without ranges or without an InternalIP cannot be routed to and yields no peer (said in
// Status). A Node whose annotation is missing or malformed still yields a peer, without a VTEP: its
// prefixes and address come from the API server, not from the annotation, so a direct route to it is
// right whatever the annotation says, and dropping it would cut its pods off from every node in its
// subnet; it is only unreachable over VXLAN (the fabric says so per peer). A malformed one is
// reported in `rejected`. The annotation's endpoints (the node's DPUs) may hold slices only of the
// Node's podCIDRs: an endpoint prefix outside them is dropped and reported, the rest stays.
//
// A podCIDR is the API server's word, but anyone who may write Nodes can write one: it is routed only
// as core/fabric/prefix-ledger.ts allows (inside fabric.clusterCidrs when set, over no InternalIP or
// DPU address, no range of this node, no podCIDR another Node holds). The incumbent is the Node that
// held it first in this daemon's life; of Nodes new in one list, the first listed. A refused podCIDR
// costs its Node only that prefix (none left: no peer), and is named in `rejected`; a Node whose
// InternalIP lies inside another Node's podCIDR is not routed at all. Each is routed again as soon as
// what blocked it goes.
//
// Each Node is worked out alone when it changes, so a watch event costs the same with 5 or 5,000 nodes.

/** MTU assumed for a peer that publishes none (the peers file's default). */
const DEFAULT_MTU = 1500;
/** How many names a status line lists before it only counts. */
const NAMES_SHOWN = 5;

/** What a Node says, before the ledger settles its podCIDRs. */
interface Outcome {
  /** With every parsed podCIDR, its endpoints not yet vouched. */
  peer?: Peer;
  /** Every InternalIP, canonical, and its DPUs' addresses: no peer's prefix may cover them. */
  addresses: string[];
  /** Why the Node yields no peer. */
  unroutable?: 'podCIDRs' | 'InternalIP';
  /** The Node publishes no annotation: reached only directly. */
  unannotated: boolean;
  rejected: string[];
}

export interface NodePeerTableOptions {
  /** The cluster's ranges (fabric.clusterCidrs); empty: podCIDRs are not held to any. */
  clusterCidrs?: readonly string[];
  /** This node's pools besides its Node's podCIDRs (the other networks' podCidrs). */
  ownRanges?: readonly string[];
}

export class NodePeerTable {
  private readonly outcomes = new Map<string, Outcome>();
  /** Each Node's lines of `rejected` as last worked out, the ledger's included. */
  private readonly lines = new Map<string, string[]>();
  private readonly texts = new Map<string, string>();
  private view = new Map<string, Peer>();
  /** Which Node holds which podCIDR: the incumbent keeps it (core/fabric/prefix-ledger.ts). */
  private readonly ledger: PrefixLedger;

  constructor(
    private readonly self: string,
    private readonly opts: NodePeerTableOptions = {},
  ) {
    this.ledger = new PrefixLedger({ cluster: opts.clusterCidrs ?? [], setting: 'fabric.clusterCidrs' });
  }

  /**
   * This node's own podCIDRs (its Node's, its DPUs' slices) and addresses: no peer's podCIDR may
   * overlap or cover them. True when peers() changed.
   */
  setSelf(own: readonly string[], underlay: readonly string[]): boolean {
    const ranges = [...(this.opts.ownRanges ?? []), ...own];
    return this.refresh(this.ledger.setSelf(ranges, underlay.map(canonical)));
  }

  /** Replaces the whole table with a full list; true when peers() changed. */
  replace(nodes: readonly V1Node[]): boolean {
    const names = new Set(nodes.map((n) => n.metadata?.name ?? ''));
    const touched = new Set<string>();
    for (const name of [...this.outcomes.keys()])
      if (!names.has(name)) {
        this.outcomes.delete(name);
        touched.add(name);
        for (const n of this.ledger.remove(name)) touched.add(n);
      }
    // In the list's order (the API server's, by name): of two Nodes new at once, the first wins.
    const claims: PrefixClaim[] = [];
    for (const node of nodes) {
      const name = node.metadata?.name;
      if (!name || name === this.self) continue;
      const outcome = outcomeOf(name, node);
      this.outcomes.set(name, outcome);
      touched.add(name);
      if (outcome.peer) claims.push(claimOf(outcome));
      else for (const n of this.ledger.remove(name)) touched.add(n);
    }
    for (const n of this.ledger.put(claims)) touched.add(n);
    return this.refresh(touched);
  }

  /** A Node as it is now; true when peers() changed. */
  put(node: V1Node): boolean {
    const name = node.metadata?.name;
    if (!name || name === this.self) return false;
    const outcome = outcomeOf(name, node);
    this.outcomes.set(name, outcome);
    const touched = outcome.peer ? this.ledger.put([claimOf(outcome)]) : this.ledger.remove(name);
    touched.add(name);
    return this.refresh(touched);
  }

  /** A Node is gone; true when peers() changed. */
  remove(name: string): boolean {
    this.outcomes.delete(name);
    const touched = this.ledger.remove(name);
    touched.add(name);
    return this.refresh(touched);
  }

  peers(): ReadonlyMap<string, Peer> {
    return this.view;
  }

  rejected(): string[] {
    return [...this.lines.values()].flat();
  }

  /** Works out the peers of the Nodes named again; true when peers() changed. */
  private refresh(names: Iterable<string>): boolean {
    let next: Map<string, Peer> | undefined;
    for (const name of names) {
      const outcome = this.outcomes.get(name);
      const { peer, rejected } = outcome
        ? routed(name, outcome, this.ledger.outcome(name))
        : { peer: undefined, rejected: [] };
      if (rejected.length > 0) this.lines.set(name, rejected);
      else this.lines.delete(name);
      const text = peer && JSON.stringify(peer);
      if (text === this.texts.get(name)) continue;
      // Copy on change: a table handed out by peers() never changes under its holder.
      next ??= new Map(this.view);
      if (peer) {
        next.set(name, peer);
        this.texts.set(name, text!);
      } else {
        next.delete(name);
        this.texts.delete(name);
      }
    }
    if (next) this.view = next;
    return next !== undefined;
  }

  /** Status lines: Nodes that yield no peer, and Nodes reached only directly. */
  reasons(): string[] {
    const by = (pick: (o: Outcome) => boolean): string[] =>
      [...this.outcomes].filter(([, o]) => pick(o)).map(([name]) => name);
    const out: string[] = [];
    const noRanges = by((o) => o.unroutable === 'podCIDRs');
    if (noRanges.length > 0)
      out.push(
        `Nodes without spec.podCIDRs are not routed to: ${names(noRanges)} ` +
          "(assigned by kube-controller-manager's node IPAM, --allocate-node-cidrs)",
      );
    const noAddress = by((o) => o.unroutable === 'InternalIP');
    if (noAddress.length > 0)
      out.push(
        `Nodes without an InternalIP address in status.addresses are not routed to: ${names(noAddress)}`,
      );
    const bare = by((o) => o.unannotated);
    if (bare.length > 0)
      out.push(
        `Nodes without a ${FABRIC_ANNOTATION} annotation are reached only directly, not over VXLAN: ` +
          `${names(bare)}; such a node runs without the fabric or has not published yet`,
      );
    return out;
  }
}

function outcomeOf(name: string, node: V1Node): Outcome {
  const rejected: string[] = [];
  const prefixes: string[] = [];
  const entries = node.spec?.podCIDRs ?? (node.spec?.podCIDR ? [node.spec.podCIDR] : []);
  for (const entry of entries) {
    try {
      const text = parseCidr(entry).text;
      if (!prefixes.includes(text)) prefixes.push(text);
    } catch (err) {
      rejected.push(`Node ${name}: podCIDRs entry "${entry}" ignored (${(err as Error).message})`);
    }
  }
  // One InternalIP per family, in the Node's order: the first is the preferred one. Every one is an
  // address the node is reached at, which no peer's prefix may cover.
  const underlay: string[] = [];
  const addresses: string[] = [];
  const families = new Set<number>();
  for (const a of node.status?.addresses ?? []) {
    if (a.type !== 'InternalIP') continue;
    let parsed;
    try {
      parsed = parseAddress(a.address);
    } catch (err) {
      rejected.push(`Node ${name}: InternalIP "${a.address}" ignored (${(err as Error).message})`);
      continue;
    }
    addresses.push(formatAddress(parsed.family, parsed.value));
    if (families.has(parsed.family)) continue;
    families.add(parsed.family);
    underlay.push(a.address);
  }
  const text = node.metadata?.annotations?.[FABRIC_ANNOTATION];
  let published;
  if (text !== undefined)
    try {
      published = decodeAnnotation(text);
    } catch (err) {
      rejected.push(
        `Node ${name}: its ${FABRIC_ANNOTATION} annotation ${(err as Error).message}; ` +
          'annotation ignored, the node is reached only directly',
      );
    }
  const unannotated = text === undefined;
  if (prefixes.length === 0) return { unroutable: 'podCIDRs', unannotated: false, addresses, rejected };
  if (underlay.length === 0) return { unroutable: 'InternalIP', unannotated: false, addresses, rejected };
  for (const e of published?.endpoints ?? []) addresses.push(canonical(e.underlay));
  const peer: Peer = {
    node: name,
    underlay,
    mtu: published?.mtu ?? DEFAULT_MTU,
    ...(published?.vtep ? { vtep: published.vtep } : {}),
    bootId: published?.bootId ?? '',
    ...(published?.endpoints ? { endpoints: published.endpoints } : {}),
    prefixes: sortPrefixes(prefixes),
  };
  return { peer, addresses, unannotated, rejected };
}

/** What a routable Node claims: its podCIDRs, over its addresses and its DPUs'. */
function claimOf(o: Outcome): PrefixClaim {
  return { node: o.peer!.node, prefixes: o.peer!.prefixes, underlay: o.addresses };
}

/**
 * The Node's peer as the ledger settled its podCIDRs (none when it refused them all, or the Node
 * whole), its DPUs' slices vouched against what is routed, and its lines of `rejected`.
 */
function routed(name: string, o: Outcome, settled: Settled | undefined): { peer?: Peer; rejected: string[] } {
  const rejected = [...o.rejected];
  if (!o.peer) return { rejected };
  if (settled?.whole !== undefined) {
    rejected.push(`Node ${name}: not routed: ${settled.whole}`);
    return { rejected };
  }
  const refused = settled?.refused ?? [];
  const prefixes = settled?.accepted ?? o.peer.prefixes;
  for (const why of refused)
    rejected.push(
      `Node ${name}: spec.podCIDRs: ${why}; ` +
        (prefixes.length > 0 ? "not routed, the Node's other podCIDRs are" : 'not routed, nor the Node'),
    );
  if (prefixes.length === 0) return { rejected };
  let endpoints;
  if (o.peer.endpoints) {
    const what = refused.length > 0 ? 'its routed spec.podCIDRs' : 'its spec.podCIDRs';
    const vouched = vouchedEndpoints(name, o.peer.endpoints, prefixes, what);
    endpoints = vouched.endpoints;
    rejected.push(...vouched.rejected.map((r) => r.replace(/^node /, 'Node ')));
  }
  const { endpoints: _published, ...rest } = o.peer;
  return { peer: { ...rest, ...(endpoints ? { endpoints } : {}), prefixes }, rejected };
}

/** The address as the ledger keys it; text that does not parse stays as it is (and covers nothing). */
function canonical(text: string): string {
  try {
    const { family, value } = parseAddress(text);
    return formatAddress(family, value);
  } catch {
    return text;
  }
}

function sortPrefixes(prefixes: string[]): string[] {
  return prefixes
    .map((p) => parseCidr(p))
    .sort((a, b) => a.family - b.family || (a.network < b.network ? -1 : a.network > b.network ? 1 : 0))
    .map((c) => c.text);
}

function names(list: string[]): string {
  const sorted = [...list].sort();
  const shown = sorted.slice(0, NAMES_SHOWN).join(', ');
  return sorted.length > NAMES_SHOWN ? `${shown} and ${sorted.length - NAMES_SHOWN} more` : shown;
}

import type { V1Node } from '@kubernetes/client-node';
import { parseAddress, parseCidr } from '../../lib/cidr';
import { vouchedEndpoints } from '../../core/fabric/endpoint-fields';
import type { Peer } from '../../core/fabric/peer-source';
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
// Each Node is worked out alone when it changes, so a watch event costs the same with 5 or 5,000 nodes.

/** MTU assumed for a peer that publishes none (the peers file's default). */
const DEFAULT_MTU = 1500;
/** How many names a status line lists before it only counts. */
const NAMES_SHOWN = 5;

interface Outcome {
  peer?: Peer;
  /** Why the Node yields no peer. */
  unroutable?: 'podCIDRs' | 'InternalIP';
  /** The Node publishes no annotation: reached only directly. */
  unannotated: boolean;
  rejected: string[];
}

export class NodePeerTable {
  private readonly outcomes = new Map<string, Outcome>();
  private readonly texts = new Map<string, string>();
  private view = new Map<string, Peer>();

  constructor(private readonly self: string) {}

  /** Replaces the whole table with a full list; true when peers() changed. */
  replace(nodes: readonly V1Node[]): boolean {
    const names = new Set(nodes.map((n) => n.metadata?.name ?? ''));
    let changed = false;
    for (const name of [...this.outcomes.keys()])
      if (!names.has(name)) changed = this.remove(name) || changed;
    for (const n of nodes) changed = this.put(n) || changed;
    return changed;
  }

  /** A Node as it is now; true when peers() changed. */
  put(node: V1Node): boolean {
    const name = node.metadata?.name;
    if (!name || name === this.self) return false;
    const outcome = outcomeOf(name, node);
    this.outcomes.set(name, outcome);
    const text = outcome.peer && JSON.stringify(outcome.peer);
    if (text === this.texts.get(name)) return false;
    // Copy on change: a table handed out by peers() never changes under its holder.
    const next = new Map(this.view);
    if (outcome.peer) {
      next.set(name, outcome.peer);
      this.texts.set(name, text!);
    } else {
      next.delete(name);
      this.texts.delete(name);
    }
    this.view = next;
    return true;
  }

  /** A Node is gone; true when peers() changed. */
  remove(name: string): boolean {
    this.outcomes.delete(name);
    if (!this.texts.delete(name)) return false;
    const next = new Map(this.view);
    next.delete(name);
    this.view = next;
    return true;
  }

  peers(): ReadonlyMap<string, Peer> {
    return this.view;
  }

  rejected(): string[] {
    return [...this.outcomes.values()].flatMap((o) => o.rejected);
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
  // One InternalIP per family, in the Node's order: the first is the preferred one.
  const underlay: string[] = [];
  const families = new Set<number>();
  for (const a of node.status?.addresses ?? []) {
    if (a.type !== 'InternalIP') continue;
    let family;
    try {
      family = parseAddress(a.address).family;
    } catch (err) {
      rejected.push(`Node ${name}: InternalIP "${a.address}" ignored (${(err as Error).message})`);
      continue;
    }
    if (families.has(family)) continue;
    families.add(family);
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
  if (prefixes.length === 0) return { unroutable: 'podCIDRs', unannotated: false, rejected };
  if (underlay.length === 0) return { unroutable: 'InternalIP', unannotated: false, rejected };
  const sorted = sortPrefixes(prefixes);
  let endpoints;
  if (published?.endpoints) {
    const vouched = vouchedEndpoints(name, published.endpoints, sorted, 'its spec.podCIDRs');
    endpoints = vouched.endpoints;
    rejected.push(...vouched.rejected.map((r) => r.replace(/^node /, 'Node ')));
  }
  const peer: Peer = {
    node: name,
    underlay,
    mtu: published?.mtu ?? DEFAULT_MTU,
    ...(published?.vtep ? { vtep: published.vtep } : {}),
    bootId: published?.bootId ?? '',
    ...(endpoints ? { endpoints } : {}),
    prefixes: sorted,
  };
  return { peer, unannotated, rejected };
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

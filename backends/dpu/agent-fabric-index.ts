import type { FabricObject } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// What one agent's fabric objects say per peer node, for the report: the FabricPeers it holds, and
// the prefixes its PeerRoutes send to each node. Made in one pass over the objects when they change
// (the report is asked for far more often than the objects change), so that a report at 5,000 peers
// is a lookup per peer, not a walk of ~10,000 objects per call.

export interface AgentFabricIndex {
  /** Names of the FabricPeers. */
  peerNames: ReadonlySet<string>;
  /** Per node with a FabricPeer: the prefixes routed through one of its FabricPeers, sorted. */
  prefixesByNode: ReadonlyMap<string, readonly string[]>;
}

export function indexFabric(objects: readonly FabricObject[]): AgentFabricIndex {
  const peerNames = new Set<string>();
  const nodeOf = new Map<string, string>();
  const byNode = new Map<string, Set<string>>();
  for (const o of objects) {
    if (!o.peer) continue;
    peerNames.add(o.name);
    nodeOf.set(o.name, o.peer.node);
    if (!byNode.has(o.peer.node)) byNode.set(o.peer.node, new Set());
  }
  for (const o of objects) {
    const node = o.peerRoute && nodeOf.get(o.peerRoute.peer);
    if (node !== undefined && o.peerRoute) byNode.get(node)?.add(o.peerRoute.prefix);
  }
  const prefixesByNode = new Map<string, string[]>();
  for (const [node, set] of byNode) prefixesByNode.set(node, [...set].sort());
  return { peerNames, prefixesByNode };
}

import type { FabricObject } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// What one agent's fabric objects say per peer node, for the report: the FabricPeers it holds, and
// the prefixes its PeerRoutes send to each node. Kept object by object as the desired set changes
// (fabric-desired.ts tells it), because at 5,000 peers the set is ~10,000 objects and one peer's
// change moves two or three of them: made again whole per change, the index and everything made from
// it would be most of what a change costs the daemon. A node's prefix list is sorted again only when one
// of its objects moved, and is otherwise the same array, so that the report can tell "unchanged" by
// identity.

export class AgentFabricIndex {
  /** Node of each FabricPeer, by name. */
  private readonly nodeOfPeer = new Map<string, string>();
  /** FabricPeer names per node. */
  private readonly peersOfNode = new Map<string, Set<string>>();
  /** Prefixes routed through each FabricPeer name (a route may name a peer not, or no longer, held). */
  private readonly routesOfPeer = new Map<string, Set<string>>();
  /** Each node's sorted prefixes, as last made; a node moved since is in `dirty`. */
  private readonly sorted = new Map<string, readonly string[]>();
  private readonly dirty = new Set<string>();

  /** Whether a FabricPeer of this name is held. */
  hasPeer(name: string): boolean {
    return this.nodeOfPeer.has(name);
  }

  /** How many FabricPeers are held. */
  get peerCount(): number {
    return this.nodeOfPeer.size;
  }

  /**
   * The prefixes routed through one of the node's FabricPeers, sorted; undefined when the agent holds
   * no FabricPeer of the node. The same array until one of them moves.
   */
  prefixesOf(node: string): readonly string[] | undefined {
    if (!this.peersOfNode.has(node)) return undefined;
    let list = this.sorted.get(node);
    if (list === undefined || this.dirty.has(node)) {
      const set = new Set<string>();
      for (const peer of this.peersOfNode.get(node) ?? [])
        for (const prefix of this.routesOfPeer.get(peer) ?? []) set.add(prefix);
      list = [...set].sort();
      this.sorted.set(node, list);
      this.dirty.delete(node);
    }
    return list;
  }

  add(o: FabricObject): void {
    if (o.peer) {
      const node = o.peer.node;
      this.nodeOfPeer.set(o.name, node);
      let names = this.peersOfNode.get(node);
      if (!names) this.peersOfNode.set(node, (names = new Set()));
      names.add(o.name);
      this.dirty.add(node);
    } else if (o.peerRoute) {
      let prefixes = this.routesOfPeer.get(o.peerRoute.peer);
      if (!prefixes) this.routesOfPeer.set(o.peerRoute.peer, (prefixes = new Set()));
      prefixes.add(o.peerRoute.prefix);
      this.touch(o.peerRoute.peer);
    }
  }

  remove(o: FabricObject): void {
    if (o.peer) {
      const node = this.nodeOfPeer.get(o.name);
      if (node === undefined) return;
      this.nodeOfPeer.delete(o.name);
      const names = this.peersOfNode.get(node);
      names?.delete(o.name);
      if (names?.size === 0) {
        this.peersOfNode.delete(node);
        this.sorted.delete(node);
        this.dirty.delete(node);
      } else this.dirty.add(node);
    } else if (o.peerRoute) {
      const prefixes = this.routesOfPeer.get(o.peerRoute.peer);
      prefixes?.delete(o.peerRoute.prefix);
      if (prefixes?.size === 0) this.routesOfPeer.delete(o.peerRoute.peer);
      this.touch(o.peerRoute.peer);
    }
  }

  private touch(peer: string): void {
    const node = this.nodeOfPeer.get(peer);
    if (node !== undefined) this.dirty.add(node);
  }
}

import type { FabricObject } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// The simulator's fabric desired state: the FabricObjects the daemon sent, by name, as it sent them
// (an Upsert replaces the whole object). Kept apart from the ports, as the protocol keeps the two name
// spaces apart. Routes are indexed by the peer they name, so that a peer's change reaches its routes
// without a scan of every route (a snapshot may hold thousands).

export type FabricKind = 'vtep' | 'prefix' | 'peer' | 'route';

export function kindOf(o: FabricObject): FabricKind | undefined {
  if (o.localVtep) return 'vtep';
  if (o.localPrefix) return 'prefix';
  if (o.peer) return 'peer';
  if (o.peerRoute) return 'route';
  return undefined;
}

export class FabricTable {
  private readonly objects = new Map<string, FabricObject>();
  private readonly routesByPeer = new Map<string, Set<string>>();
  private readonly peerNames = new Set<string>();
  /** The objects ordered by name, once asked for (the state file asks on every write). */
  private sorted: FabricObject[] | undefined;
  /** The FabricPeers ordered by name, once asked for (every PeerStatus asks). */
  private sortedPeers: FabricObject[] | undefined;

  get(name: string): FabricObject | undefined {
    return this.objects.get(name);
  }

  set(o: FabricObject): void {
    this.unindex(o.name);
    if (this.sorted) {
      // Kept sorted in place: a snapshot adds 10,000 names, and the state file asks after each write.
      const i = this.position(o.name);
      if (this.sorted[i]?.name === o.name) this.sorted[i] = o;
      else this.sorted.splice(i, 0, o);
    }
    this.objects.set(o.name, o);
    if (o.peer) {
      this.peerNames.add(o.name);
      this.sortedPeers = undefined;
    }
    if (o.peerRoute) {
      const set = this.routesByPeer.get(o.peerRoute.peer) ?? new Set<string>();
      set.add(o.name);
      this.routesByPeer.set(o.peerRoute.peer, set);
    }
  }

  delete(name: string): FabricObject | undefined {
    const o = this.objects.get(name);
    this.unindex(name);
    if (this.objects.delete(name) && this.sorted) {
      const i = this.position(name);
      if (this.sorted[i]?.name === name) this.sorted.splice(i, 1);
    }
    return o;
  }

  private unindex(name: string): void {
    if (this.peerNames.delete(name)) this.sortedPeers = undefined;
    const peer = this.objects.get(name)?.peerRoute?.peer;
    if (peer === undefined) return;
    const set = this.routesByPeer.get(peer);
    set?.delete(name);
    if (set?.size === 0) this.routesByPeer.delete(peer);
  }

  /** The LocalVtep the DPU holds, if any (validation makes "vtep" its only name). */
  vtep(): FabricObject | undefined {
    const o = this.objects.get('vtep');
    return o?.localVtep ? o : undefined;
  }

  /** Whether any FabricPeer is held (asked on every heartbeat: no scan). */
  hasPeers(): boolean {
    return this.peerNames.size > 0;
  }

  /** Names of the routes that name `peer`. */
  routesOf(peer: string): string[] {
    return [...(this.routesByPeer.get(peer) ?? [])];
  }

  names(): string[] {
    return [...this.objects.keys()];
  }

  get size(): number {
    return this.objects.size;
  }

  /** Objects ordered by name, as the state file shows them. */
  entries(): FabricObject[] {
    this.sorted ??= [...this.objects.values()].sort((a, b) => compare(a.name, b.name));
    return [...this.sorted];
  }

  /** The FabricPeers, ordered by name. */
  peers(): FabricObject[] {
    this.sortedPeers ??= [...this.peerNames]
      .sort(compare)
      .map((n) => this.objects.get(n))
      .filter((o): o is FabricObject => o !== undefined);
    return [...this.sortedPeers];
  }

  /** Where `name` is, or would go, in the sorted entries. */
  private position(name: string): number {
    const list = this.sorted ?? [];
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((list[mid] as FabricObject).name < name) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

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
  private peerCount = 0;

  get(name: string): FabricObject | undefined {
    return this.objects.get(name);
  }

  set(o: FabricObject): void {
    this.unindex(o.name);
    this.objects.set(o.name, o);
    if (o.peer) this.peerCount += 1;
    if (o.peerRoute) {
      const set = this.routesByPeer.get(o.peerRoute.peer) ?? new Set<string>();
      set.add(o.name);
      this.routesByPeer.set(o.peerRoute.peer, set);
    }
  }

  delete(name: string): FabricObject | undefined {
    const o = this.objects.get(name);
    this.unindex(name);
    this.objects.delete(name);
    return o;
  }

  private unindex(name: string): void {
    if (this.objects.get(name)?.peer) this.peerCount -= 1;
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
    return this.peerCount > 0;
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
    return [...this.objects.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  peers(): FabricObject[] {
    return this.entries().filter((o) => o.peer !== undefined);
  }
}

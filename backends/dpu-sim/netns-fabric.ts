import type { Logger } from 'pino';
import {
  addRouteRequest,
  deleteFdbRequest,
  deleteNeighbourRequest,
  deleteRouteRequest,
  readOurs,
  setFdbRequest,
  setNeighbourRequest,
} from '../../lib/overlay';
import {
  NetlinkError,
  type AddressFamily,
  type Link,
  type NetlinkRequest,
  type NetlinkSocket,
} from '../../lib/rtnetlink';
import type { PeerState } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import type { FabricChange, FabricDataplane, FabricOutcome, Uplink } from './dataplane';
import { FabricLedger, describe, type Plan } from './fabric-ledger';
import { kindOf, type FabricTable } from './fabric-table';
import { sendInBatches } from './netlink-batches';
import { NetnsPeerView } from './netns-peer-view';
import { findDevice, programDevice } from './netns-vxlan-device';
import { discoverUplink } from './uplink';
import { dependentsOf, fdbKey, neighbourKey, routeKey, type Wanted } from './vxlan-programming';

// The fabric in the DPU namespace, programmed through rtnetlink as vxlan-programming.ts describes, with
// the overlay's entries, requests and device (lib/overlay, the Linux fabric's): our own VXLAN device
// wn-vxlan (netns-vxlan-device.ts), one FDB entry per peer, one neighbour and one route per remote
// prefix, an unreachable route per local prefix. What is "ours" is narrow: routes of our protocol in
// the main table, and entries on our own device. A change touches only the objects of the name that
// changed (and of what depends on it); a complete snapshot prunes objects of ours nobody wants. A
// restart adopts the device as it is (a new one would drop packets and every entry on it).
//
// Objects that change together (a snapshot's burst, a new device that needs everything again) are
// converged together: their kernel requests go out a few hundred to a datagram (netlink-batches.ts),
// removals first, and the kernel answers each failing request with its own error, so every object
// still gets its own outcome.
//
// An object refused because another object holds its kernel object (one FDB entry per VTEP MAC, one
// route per prefix) waits for that one key (fabric-ledger.ts): it is converged again the moment its
// holder gives the key up, in the same call that freed it (a later object of the same batch, a
// Delete, a move), and the agent is told (onHeldApplied). Never "at the next snapshot".

function isGone(err: unknown): boolean {
  return err instanceof NetlinkError && err.notFound;
}

export class NetnsFabric implements FabricDataplane {
  private vxlan: Link | undefined;
  private readonly ledger: FabricLedger;
  private heldListener: ((name: string, outcome: FabricOutcome) => void) | undefined;

  /** What PeerStatus says, from the kernel (told of every FDB entry confirmed). */
  private readonly peers: NetnsPeerView;

  private constructor(
    private readonly sock: NetlinkSocket,
    private readonly log: Logger,
    private readonly vtepAddress: string | undefined,
  ) {
    this.ledger = new FabricLedger(log);
    this.peers = new NetnsPeerView(sock, () => this.vxlan?.index);
  }

  static async open(sock: NetlinkSocket, log: Logger, vtepAddress?: string): Promise<NetnsFabric> {
    const f = new NetnsFabric(sock, log, vtepAddress);
    for (const r of (await readOurs(sock, undefined)).routes)
      f.ledger.ourRoutes.add(routeKey(r.family, r.destination, r.priority ?? 0));
    f.vxlan = await findDevice(sock);
    return f;
  }

  uplink(): Promise<Uplink> {
    return discoverUplink(this.sock, this.vtepAddress);
  }

  async apply(table: FabricTable, changes: readonly FabricChange[]): Promise<FabricOutcome[]> {
    const deviceErrors = new Map<string, string>();
    // The names whose kernel objects may change, in the order they are planned (the first to want a
    // key gets it, as when they came one at a time).
    const names = new Set<string>();
    for (const { name, kind } of changes) {
      names.add(name);
      for (const n of dependentsOf(table, name, kind)) names.add(n);
      if (kind !== 'vtep') continue;
      const before = this.vxlan?.index;
      try {
        this.vxlan = await programDevice(this.sock, this.log, table.get(name)?.localVtep);
      } catch (err) {
        deviceErrors.set(name, (err as Error).message);
        this.log.warn({ err: (err as Error).message }, 'the fabric device could not be programmed');
      }
      // A new device (or none) holds none of the entries the old one held.
      if (this.vxlan?.index !== before) {
        this.ledger.forgetDeviceEntries();
        this.peers.deviceReplaced();
      }
    }
    const outcomes = await this.converge(table, [...names]);
    await this.convergeFreed(table, outcomes, new Set(changes.map((c) => c.name)));
    return changes.map(({ name }) => {
      const deviceError = deviceErrors.get(name);
      if (deviceError === undefined) return outcomes.get(name) ?? { code: 'ok', message: '' };
      this.ledger.errors.set(name, deviceError);
      return { code: 'failed', message: deviceError };
    });
  }

  onHeldApplied(listener: (name: string, outcome: FabricOutcome) => void): void {
    this.heldListener = listener;
  }

  /**
   * Converges again each object that waits for a key nobody holds now (with what depends on it), until
   * none is freed; `outcomes` takes their new outcomes, and the listener hears of those that are not
   * among `changed` (their ack went out with an earlier change).
   */
  private async convergeFreed(
    table: FabricTable,
    outcomes: Map<string, FabricOutcome>,
    changed: ReadonlySet<string>,
  ): Promise<void> {
    // Each round programs at least one waiting object or stops: bounded by the objects waiting.
    for (let rounds = this.ledger.waitingCount; rounds > 0; rounds--) {
      const names = new Set<string>();
      for (const name of this.ledger.freed(table)) {
        names.add(name);
        for (const n of dependentsOf(table, name, kindOf(table.get(name)!))) names.add(n);
      }
      if (names.size === 0) return;
      const before = this.ledger.waitingCount;
      const again = await this.converge(table, [...names]);
      again.forEach((outcome, name) => {
        outcomes.set(name, outcome);
        if (!changed.has(name) && this.heldListener && table.get(name)) this.heldListener(name, outcome);
      });
      if (this.ledger.waitingCount >= before) return;
      this.log.info(
        { objects: before - this.ledger.waitingCount },
        'fabric objects held back programmed: their key was freed',
      );
    }
  }

  /** Makes the kernel hold exactly what each of `names` wants now; each one's outcome. */
  private async converge(table: FabricTable, names: readonly string[]): Promise<Map<string, FabricOutcome>> {
    const plans = this.ledger.plan(table, names, this.vxlan?.index);
    // Routes removed before the entries they use; entries added before the routes that use them.
    const order = (w: Wanted): number => (w.kind === 'route' ? 1 : 0);
    const dels = plans.flatMap((p) => p.dels.map((w) => ({ p, w }))).sort((a, b) => order(b.w) - order(a.w));
    const removed = await sendInBatches(
      this.sock,
      dels.map(({ w }) => this.deleteRequest(w)),
    );
    dels.forEach(({ p, w }, i) => {
      const o = removed[i]!;
      if (!o.ok && !isGone(o.error)) {
        p.failures.push(`remove ${describe(w)}: ${o.error.message}`);
        return;
      }
      this.ledger.removed(p, w);
      if (w.kind === 'fdb') this.peers.fdbConfirmed(w.mac, w.dst, false);
    });
    const adds: Array<{ p: Plan; w: Wanted }> = [];
    for (const p of plans)
      for (const w of p.adds) {
        // Planned free because another object of the batch removes it; that removal failed.
        const owner = this.ledger.ownerOf(w.key);
        if (owner !== undefined && owner !== p.name) {
          p.failures.push(`${describe(w)} is still programmed for ${owner}`);
          p.next.delete(w.key);
        } else adds.push({ p, w });
      }
    adds.sort((a, b) => order(a.w) - order(b.w));
    const added = await sendInBatches(
      this.sock,
      adds.map(({ w }) => this.addRequest(w)),
    );
    adds.forEach(({ p, w }, i) => {
      const o = added[i]!;
      if (!o.ok) {
        const foreign =
          o.error instanceof NetlinkError && o.error.code === 'EEXIST' && w.kind === 'route'
            ? ' (a route that is not ours holds it; left alone)'
            : '';
        p.failures.push(`${describe(w)}: ${o.error.message}${foreign}`);
        p.next.delete(w.key);
        return;
      }
      this.ledger.added(p, w);
      if (w.kind === 'fdb') {
        // A replace moves the MAC's entry to its new destination.
        const was = p.before.get(w.key);
        if (was?.kind === 'fdb') this.peers.fdbConfirmed(was.mac, was.dst, false);
        this.peers.fdbConfirmed(w.mac, w.dst, true);
      }
    });
    const outcomes = new Map<string, FabricOutcome>();
    for (const p of plans) outcomes.set(p.name, this.ledger.settle(table, p));
    return outcomes;
  }

  private addRequest(w: Wanted): NetlinkRequest {
    const vx = this.vxlan?.index ?? 0;
    if (w.kind === 'fdb') return setFdbRequest(vx, w);
    if (w.kind === 'neighbour') return setNeighbourRequest(vx, w);
    // Replace only a route of ours; a create is exclusive, so a foreign route is never overwritten.
    const oif = w.overVxlan ? vx : undefined;
    return addRouteRequest({ ...w, oif }, { replace: this.ledger.ourRoutes.has(w.key) });
  }

  private deleteRequest(w: Wanted): NetlinkRequest {
    const vx = this.vxlan?.index ?? 0;
    if (w.kind === 'fdb') return deleteFdbRequest(vx, w);
    if (w.kind === 'neighbour') return deleteNeighbourRequest(vx, w);
    return deleteRouteRequest(w);
  }

  async prune(table: FabricTable): Promise<void> {
    if (!table.vtep() && this.vxlan) await this.apply(table, [{ name: 'vtep', kind: 'vtep' }]);
    const vx = this.vxlan?.index;
    const stray = await this.strays(vx);
    const outcomes = await sendInBatches(
      this.sock,
      stray.map((x) => x.request),
    );
    stray.forEach((x, i) => {
      const o = outcomes[i]!;
      if (o.ok) this.log.info({ object: x.what }, 'removed a fabric object no longer wanted');
      else if (!isGone(o.error))
        this.log.warn({ object: x.what, err: o.error.message }, 'could not remove a stale fabric object');
    });
    // The stray FDB entries are gone (or were already): what the kernel holds is read again next time.
    if (vx !== undefined && stray.length > 0) this.peers.forget();
  }

  /** Entries of ours in the kernel that no object holds: routes, neighbours, and FDB remotes. */
  private async strays(vx: number | undefined): Promise<Array<{ what: string; request: NetlinkRequest }>> {
    const have = await readOurs(this.sock, vx);
    const stray: Array<{ what: string; request: NetlinkRequest }> = [];
    for (const r of have.routes) {
      const key = routeKey(r.family, r.destination, r.priority ?? 0);
      if (this.ledger.ownerOf(key) !== undefined) continue;
      this.ledger.ourRoutes.delete(key);
      stray.push({
        what: `route ${r.destination} metric ${r.priority ?? 0}`,
        request: deleteRouteRequest(r),
      });
    }
    if (vx === undefined) return stray;
    for (const n of have.neighbours) {
      if (n.dst === undefined || this.ledger.ownerOf(neighbourKey(n.family, n.dst)) !== undefined) continue;
      const family = n.family as AddressFamily;
      stray.push({ what: `neighbour ${n.dst}`, request: deleteNeighbourRequest(vx, { family, dst: n.dst }) });
    }
    for (const f of have.fdb) {
      if (f.mac === undefined) continue;
      const want = this.ledger.programmedFdb(fdbKey(f.mac));
      if (want !== undefined && want.dst === f.dst) continue;
      stray.push({ what: `fdb ${f.mac} dst ${f.dst ?? '?'}`, request: deleteFdbRequest(vx, f) });
    }
    return stray;
  }

  /** One PeerState per FabricPeer (see NetnsPeerView). */
  peerStates(table: FabricTable, fresh: boolean): Promise<PeerState[]> {
    return this.peers.peerStates(table, this.ledger.errors, fresh);
  }
}

import type { OwnPrefixes } from '../fabric-dataplane';
import type { Logger } from '../logger';
import type { StoredSlices } from '../store/fabric-records';
import { hostPrefix } from '../ipam/address-slices';
import type { AllocatedIp, IpAllocator } from '../ipam/ip-allocator';
import type { IpPool } from '../ipam/ip-pool';
import type { PlacedAddresses, PlacedRow } from '../ipam/placed-addresses';
import type { PoolSupply } from '../ipam/pool-supply';

// Which of the node's addresses each tunnel endpoint (DPU) owns. The ranges of the networks whose
// backend places ports (Backend.place) are cut into dpu.fabricSlices slices (core/ipam/address-slices.ts);
// endpoints get slice indices first come, lowest free, and slice i of every range belongs to the
// endpoint holding index i. A port's address comes from its endpoint's slices; when they are full (or
// the endpoint holds no index) it is borrowed from anywhere in the ranges, and its /32 (/128) joins
// that endpoint's prefixes. Other nodes route each endpoint's prefixes to its VTEP: one route per
// slice, and one per borrowed address.
//
// A network whose pool source gives each endpoint pools of its own (core/ipam/pool-source.ts EndpointPools: etcd
// blocks claimed for one DPU) is not cut: an endpoint's place is its own pools, which the source grows
// when they are full (the attach waits for that, boundedly) before anything is borrowed, and gives back
// when empty. Its prefixes are its pools, and every other node reads them where the source keeps them.
//
// The indices are kept in the store, so a restart gives each DPU the slices it had. An index is never
// given to another endpoint while any address in its slices is in use: every other node routes those
// slices to the holder's VTEP, and a pod there would be cut off the moment they were routed to another
// DPU that does not hold its port. So an index changes hands only when a newcomer needs one, none is
// free, and the holder is not among the node's endpoints now and its slices are empty.

/** Where the cut is kept (the store). */
export interface SliceStore {
  fabricSlices(): StoredSlices | undefined;
  putFabricSlices(slices: StoredSlices): Promise<void>;
}

export interface SliceBookOptions {
  /** dpu.fabricSlices: slices per range, a power of two. */
  count: number;
  /** fabric.strictSlices: refuse an address rather than borrow one. */
  strict: boolean;
  /**
   * The networks whose ranges are divided among the endpoints, with their allocators and address
   * supplies: cut into slices, or, when the supply offers endpoint pools, by pool.
   */
  networks: ReadonlyArray<{ name: string; allocator: IpAllocator; supply?: PoolSupply }>;
  /** Resolved at load(): the store opens after the book is built. */
  store: () => SliceStore;
  log: Logger;
}

export class SliceBook implements PlacedAddresses {
  private count: number;
  private readonly indices = new Map<string, number>();
  /** Borrowed address → the endpoint that borrowed it. */
  private readonly borrowedBy = new Map<string, string>();
  /** The node's endpoints as its dataplane last listed them; unknown (nothing reclaimable) until then. */
  private present?: Set<string>;
  private listener?: () => void;
  private lastWrite: Promise<void> = Promise.resolve();
  private readonly byNetwork: ReadonlyMap<string, IpAllocator>;
  /** Allocators whose endpoints have pools of their own (not cut), with their supplies. */
  private readonly pooled = new Map<IpAllocator, PoolSupply>();
  /** The pools of each allocator as last seen: a range added or gone changes every DPU's prefixes. */
  private readonly seenPools = new Map<IpAllocator, readonly IpPool[]>();
  /** What an operator should know about the cut (a configured count not in effect). */
  readonly warnings: string[] = [];
  private markLoaded!: () => void;
  /**
   * Resolves once the stored cut is read and the stored attachments restored. Before it nothing may be published or applied from
   * the book: an empty book would tell every peer and every DPU that this node's DPUs own nothing.
   */
  readonly loaded = new Promise<void>((resolve) => (this.markLoaded = resolve));
  private isLoaded = false;

  constructor(private readonly opts: SliceBookOptions) {
    this.count = opts.count;
    this.byNetwork = new Map(opts.networks.map((n) => [n.name, n.allocator]));
    // Told now, before the sources start: one that started claiming for the node would hold a block
    // nobody's ports use until its grace ran out.
    for (const n of opts.networks) {
      const pools = n.supply?.endpointPools;
      if (!pools) continue;
      this.pooled.set(n.allocator, n.supply as PoolSupply);
      pools.use();
    }
  }

  /** Allocators cut into slices (every one not divided by pool). */
  private cut(): IpAllocator[] {
    return [...this.byNetwork.values()].filter((a) => !this.pooled.has(a));
  }

  /**
   * Slices per range in effect (the stored cut's while live addresses hold it, see load); 0 when no
   * network is cut, every one's DPUs claiming pools of their own (etcd blocks).
   */
  get sliceCount(): number {
    return this.pooled.size > 0 && this.cut().length === 0 ? 0 : this.count;
  }

  get strict(): boolean {
    return this.opts.strict;
  }

  /** Addresses held outside their endpoint's slices now. */
  get borrowed(): number {
    return this.borrowedBy.size;
  }

  /** Called after every change of an endpoint's prefixes (an index given, a borrow, its release). */
  onChange(listener: () => void): void {
    this.listener = listener;
  }

  /**
   * Reads the stored cut and cuts the ranges, before the stored attachments' addresses are restored
   * (then restored() is called for each, then restoredAll()). A slice count changed in the configuration while
   * attachments of the cut networks hold addresses is not applied: re-cutting would put live pods'
   * addresses into another DPU's slice, routed away from them by every other node. The stored cut is
   * kept (the node keeps serving, with a warning in Status) until a start finds no such attachment.
   */
  async load(rows: Iterable<PlacedRow>): Promise<void> {
    const store = this.opts.store();
    const stored = store.fabricSlices();
    if (stored && stored.count !== this.opts.count) {
      let live = 0;
      for (const r of rows) {
        const allocator = this.byNetwork.get(r.network || 'default');
        if (allocator && !this.pooled.has(allocator) && r.ips.length > 0) live++;
      }
      if (live > 0) {
        this.count = stored.count;
        const msg =
          `dpu.fabricSlices is ${this.opts.count}, but the ranges were cut into ${stored.count} slices and ` +
          `${live} attachment(s) hold addresses in them; the stored cut is kept (a new one would move live ` +
          `pods' addresses into another DPU's slice) and ${this.opts.count} applies at the first start ` +
          `without attachments on ${[...this.byNetwork.keys()].join(', ')}`;
        this.warnings.push(msg);
        this.opts.log.warn({ configured: this.opts.count, stored: stored.count, live }, msg);
      }
    }
    const taken = new Set<number>();
    for (const [id, i] of Object.entries(stored?.endpoints ?? {})) {
      if (i >= this.count || taken.has(i)) continue;
      taken.add(i);
      this.indices.set(id, i);
    }
    for (const allocator of this.cut()) allocator.cutSlices(this.count);
    if (!stored || stored.count !== this.count || taken.size !== Object.keys(stored.endpoints).length)
      await this.persist();
  }

  /** Every stored attachment is restored: the book is whole, and may be published and applied. */
  restoredAll(): void {
    this.rangesChanged();
    this.isLoaded = true;
    this.markLoaded();
    this.changed();
  }

  /** The book is whole (see `loaded`). */
  get ready(): boolean {
    return this.isLoaded;
  }

  /** A stored attachment's addresses, once held: those outside its endpoint's slices are borrowed. */
  restored(rec: PlacedRow): void {
    const allocator = this.byNetwork.get(rec.network || 'default');
    const endpoint = endpointOf(rec);
    if (!allocator || endpoint === undefined) return;
    const index = this.indices.get(endpoint);
    const pooled = this.pooled.has(allocator);
    let borrowed = false;
    for (const ip of rec.ips) {
      const pool = allocator.poolFor(ip.address);
      // An address no range holds any more is routed by nobody; it is not announced either.
      if (!pool) continue;
      if (pooled ? pool.endpoint === endpoint : index !== undefined && pool.sliceOf(ip.address) === index)
        continue;
      this.borrowedBy.set(ip.address, endpoint);
      borrowed = true;
    }
    // Rows adopted after the start-up restore (a lost store) change a book already published.
    if (borrowed && this.isLoaded) this.changed();
  }

  /** The endpoint's slice index, if it holds one. */
  indexOf(endpoint: string): number | undefined {
    return this.indices.get(endpoint);
  }

  /** Every endpoint holding an index, with it. */
  assignments(): ReadonlyMap<string, number> {
    return this.indices;
  }

  /**
   * The node's endpoints as its dataplane lists them now: the absent ones' indices may be reclaimed
   * (see the top of this file); the new ones get indices, in the order listed.
   */
  async setPresent(ids: readonly string[]): Promise<void> {
    this.present = new Set(ids);
    for (const supply of this.pooled.values()) supply.endpointPools?.present(ids);
    await this.assign(ids);
  }

  /** Everything borrowed now: address → the endpoint that borrowed it. */
  borrowedAddresses(): ReadonlyMap<string, string> {
    return this.borrowedBy;
  }

  /** Gives each endpoint without an index the lowest free one (first come), and records it. */
  async assign(ids: readonly string[]): Promise<void> {
    if (!this.isLoaded) await this.loaded;
    // Nothing is cut: endpoints have pools, not indices.
    if (this.cut().length === 0) return;
    let changed = false;
    for (const id of ids) {
      if (this.indices.has(id)) continue;
      const i = this.freeIndex();
      if (i === undefined) {
        this.opts.log.warn(
          { endpoint: id, slices: this.count },
          'no free slice for this DPU: its pods borrow addresses (raise dpu.fabricSlices)',
        );
        continue;
      }
      this.indices.set(id, i);
      this.present?.add(id);
      this.ownAgain(id, i);
      changed = true;
    }
    if (!changed) return;
    this.changed();
    await this.persist();
  }

  /**
   * One address per family for a port placed on `endpoint`: from its slices, else borrowed (counted,
   * and announced as its /32 or /128), else, with fabric.strictSlices, refused.
   */
  async allocate(supply: PoolSupply, endpoint: string): Promise<AllocatedIp[]> {
    const pools = [...this.pooled.values()].includes(supply);
    if (!pools && !this.indices.has(endpoint)) await this.assign([endpoint]);
    const ips = await supply.allocate({
      endpoint,
      slice: pools ? undefined : this.indices.get(endpoint),
      strict: this.strict,
      ...(pools ? { pools } : {}),
    });
    let changed = this.rangesChanged();
    for (const ip of ips) {
      if (!ip.borrowed) continue;
      this.borrowedBy.set(ip.address, endpoint);
      changed = true;
    }
    if (changed) this.changed();
    return ips;
  }

  /** Addresses given back (a detach, or an attach rolled back): a borrowed one leaves its prefixes. */
  released(addresses: readonly string[]): void {
    let changed = this.rangesChanged();
    for (const a of addresses) changed = this.borrowedBy.delete(a) || changed;
    if (changed) this.changed();
  }

  /**
   * Whether a pool source added or removed a range since last seen (a claimed block, a drained one):
   * looked at when addresses come and go, which is when a new range starts to matter.
   */
  private rangesChanged(): boolean {
    let changed = false;
    for (const allocator of this.byNetwork.values()) {
      const now = allocator.allPools();
      const seen = this.seenPools.get(allocator);
      if (seen && seen.length === now.length && seen.every((p, i) => p === now[i])) continue;
      this.seenPools.set(allocator, [...now]);
      changed = true;
    }
    return changed;
  }

  /** This node's prefixes as the dataplanes and the node's record carry them. */
  own(): OwnPrefixes {
    const ranges: string[] = [];
    for (const allocator of this.byNetwork.values())
      for (const p of allocator.allPools()) ranges.push(p.cidr.text);
    const byEndpoint = new Map<string, string[]>();
    for (const [id, i] of this.indices) byEndpoint.set(id, this.slicesAt(i));
    for (const allocator of this.pooled.keys())
      for (const p of allocator.allPools()) {
        if (p.endpoint === undefined) continue;
        const list = byEndpoint.get(p.endpoint) ?? [];
        list.push(p.cidr.text);
        byEndpoint.set(p.endpoint, list);
      }
    for (const [address, id] of this.borrowedBy) {
      const list = byEndpoint.get(id) ?? [];
      list.push(hostPrefix(address));
      byEndpoint.set(id, list);
    }
    return { ranges, byEndpoint };
  }

  /**
   * An endpoint given index i no longer borrows the addresses it holds inside slice i: a node
   * upgraded to slices, or whose fabric was turned on, restores its live pods as borrowed (they
   * came from anywhere), and those that lie in their DPU's new slice are covered by it.
   */
  private ownAgain(endpoint: string, i: number): void {
    for (const [address, holder] of this.borrowedBy) {
      if (holder !== endpoint) continue;
      for (const allocator of this.cut()) {
        const pool = allocator.poolFor(address);
        if (pool && pool.sliceOf(address) === i) this.borrowedBy.delete(address);
      }
    }
  }

  /** Slice i of every range that has one. */
  private slicesAt(i: number): string[] {
    const out: string[] = [];
    for (const allocator of this.cut())
      for (const p of allocator.allPools()) {
        const c = i < p.sliceCount ? p.sliceCidr(i) : undefined;
        if (c !== undefined) out.push(c);
      }
    return out;
  }

  /** The lowest index nobody holds, else the lowest one whose holder is gone and whose slices are empty. */
  private freeIndex(): number | undefined {
    const holders = new Map<number, string>();
    for (const [id, i] of this.indices) holders.set(i, id);
    for (let i = 0; i < this.count; i++) if (!holders.has(i)) return i;
    if (!this.present) return undefined;
    for (let i = 0; i < this.count; i++) {
      const holder = holders.get(i) as string;
      if (this.present.has(holder) || this.inUse(i)) continue;
      this.indices.delete(holder);
      this.opts.log.info(
        { endpoint: holder, slice: i },
        'slice of a departed DPU with no address in use given to a newcomer',
      );
      return i;
    }
    return undefined;
  }

  /** Whether any address in slice i of any range is held (by its owner or borrowed by another). */
  private inUse(i: number): boolean {
    for (const allocator of this.cut())
      for (const p of allocator.allPools()) if (p.usedInSlice(i) > 0) return true;
    return false;
  }

  private persist(): Promise<void> {
    const snapshot: StoredSlices = { count: this.count, endpoints: Object.fromEntries(this.indices) };
    const store = this.opts.store();
    // In order: each write holds the whole map, so the last one must land last.
    const write = this.lastWrite.catch(() => undefined).then(() => store.putFabricSlices(snapshot));
    this.lastWrite = write;
    return write;
  }

  private changed(): void {
    this.listener?.();
  }
}

/**
 * The endpoint a stored attachment's port was placed on: the core records place()'s answer in the row
 * (AttachmentRecord.endpoint). Rows written before it did carry it only in the DPU backend's details,
 * under "dpuAgentId" (documented as such in the workload API's `dataplane.details`); read there so that
 * an upgraded node attributes its live pods to the right DPU.
 */
export function endpointOf(rec: PlacedRow): string | undefined {
  // Written by place(): the endpoint, or "" for a place that is none (a DPU not carrying the fabric).
  if (rec.endpoint !== undefined) return rec.endpoint || undefined;
  const agent = rec.dataplane?.details?.dpuAgentId;
  return typeof agent === 'string' && agent !== '' ? agent : undefined;
}

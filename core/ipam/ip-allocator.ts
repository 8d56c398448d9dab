// The node's IP pools seen as one allocator: an attachment gets one address per configured family
// (dual-stack = one IPv4 + one IPv6), all or nothing.
//
// Several pools of one family are allowed (e.g. a second range added when the first fills up); they
// are used in configuration order, the first with a free address wins. Overlapping pools are rejected,
// so every address belongs to at most one pool and release/markUsed never have to guess.
//
// The allocator keeps no durable state of its own: the store is the source of truth, and on start the
// caller rebuilds it with markUsed() for every stored address plus restoreCursors().
//
// Pools come and go while the daemon runs (a pool source adds a Node's new range or a claimed block):
// a pool is active (hands out addresses) or draining (keeps serving and holding the addresses in use,
// takes no new ones). A draining pool is removed once its last address is released, and an empty pool
// is removed at once. An address restored while no pool holds it yet (a range the source has not
// reported since the restart) stays held, and is marked used in whichever pool later covers it, so it
// is never handed out twice.
//
// A node serving several networks gives each its own allocator; joined to the node's AddressSpace,
// an allocator also refuses a pool that overlaps another network's.

import { cidrsOverlap, overlapError, type AddressSpace } from '../address-space';
import { cidrContains, parseAddress, parseCidr, type Cidr } from '../../lib/cidr';
import { invalidArgument, knownWorkloadNetError, type WorkloadNetError } from '../errors';
import { IpPool } from './ip-pool';
import { ownPool, type SliceRequest } from './slice-request';
import { familyFullError, nothingToHandOut, sliceFullError, type PoolsView } from './allocation-refusals';
import { poolReport, poolUsage, type PoolReport, type PoolState, type PoolUsageReport } from './pool-report';
import { poolCursors, restorePoolCursors } from './pool-cursors';

export interface PoolConfig {
  cidr: string;
  /** Addresses or CIDRs inside the pool that are never handed out. */
  reserved?: string[];
  /** A block cut from a larger range: every address is usable (see ip-pool.ts). */
  wholeBlock?: boolean;
  /**
   * The tunnel endpoint (DPU) whose ports this pool addresses (a block a pool source claimed for it,
   * pool-source.ts EndpointPools); absent: the node's. Fixed for the pool's life.
   */
  endpoint?: string;
}

export interface AllocatedIp {
  family: 4 | 6;
  address: string;
  pool: Cidr;
  /** Taken outside the slice asked for (see SliceRequest). */
  borrowed?: boolean;
}

const FAMILIES: ReadonlyArray<4 | 6> = [4, 6];

export class IpAllocator {
  private readonly pools: IpPool[] = [];
  private readonly draining = new Set<IpPool>();
  /** Addresses restored while no pool held them (see the top of this file). */
  private readonly unpooled = new Set<string>();
  private listener?: () => void;
  private readonly poolListeners: Array<() => void> = [];
  private space?: { space: AddressSpace; network: string };
  /** Slices per pool (address-slices.ts); 1: pools are not cut. */
  private slices = 1;

  constructor(pools: PoolConfig[]) {
    for (const p of pools) {
      const text = parseCidr(p.cidr).text;
      if (this.pools.some((q) => q.cidr.text === text))
        throw invalidArgument(`IP pools ${text} and ${text} overlap; every address must belong to one pool`);
      this.addPool(p);
    }
  }

  /**
   * Records this allocator's pools, present and future, as `network`'s in the node's address space.
   * Throws INVALID_ARGUMENT, naming both networks, when a present pool overlaps another network's.
   */
  join(space: AddressSpace, network: string): void {
    for (const p of this.pools) {
      const other = space.conflict(network, p.cidr.text);
      if (other) throw overlapError(network, p.cidr.text, other);
    }
    for (const p of this.pools) space.add(network, p.cidr.text);
    this.space = { space, network };
  }

  /** Another network's pool that `cidr` overlaps, described, so it cannot become a pool here; else undefined. */
  conflictElsewhere(cidr: string): string | undefined {
    return this.space?.space.conflict(this.space.network, cidr);
  }

  /** At least one pool is configured. */
  get configured(): boolean {
    return this.pools.length > 0;
  }

  /** Some family with an active pool has no free address left in any of its active pools. */
  get exhausted(): boolean {
    return this.families().some((family) => this.poolWithSpace(family) === undefined);
  }

  /** Called synchronously after every change of usage or pools (a pool source watches free space). */
  onChange(listener: (() => void) | undefined): void {
    this.listener = listener;
  }

  /**
   * Called after a pool is added or removed (allPools() changed), not on usage: for what follows the
   * ranges themselves (the egress masquerade).
   */
  onPoolsChange(listener: () => void): void {
    this.poolListeners.push(listener);
  }

  /**
   * Adds a pool, or makes a draining pool with the same CIDR active again (then `reserved` and
   * `wholeBlock` keep their first values). Throws INVALID_ARGUMENT when it overlaps another pool, of
   * this network or (once joined to an address space) of another.
   * Returns false when the pool was already active.
   */
  addPool(config: PoolConfig): boolean {
    const pool = new IpPool(config.cidr, config.reserved, {
      wholeBlock: config.wholeBlock,
      endpoint: config.endpoint,
    });
    const same = this.pools.find((p) => p.cidr.text === pool.cidr.text);
    if (same) {
      const reactivated = this.draining.delete(same);
      if (reactivated) this.changed();
      return reactivated;
    }
    for (const other of this.pools) {
      if (cidrsOverlap(other.cidr, pool.cidr)) {
        throw invalidArgument(
          `IP pools ${other.cidr.text} and ${pool.cidr.text} overlap; every address must belong to one pool`,
        );
      }
    }
    this.space?.space.add(this.space.network, pool.cidr.text);
    if (this.slices > 1) pool.cut(this.slices);
    for (const address of this.unpooled) {
      if (!pool.contains(address)) continue;
      try {
        pool.markUsed(address);
      } catch (err) {
        // Reserved in the new pool: it can never be handed out there, which is what holding it means.
        if (!knownWorkloadNetError(err)) throw err;
      }
      this.unpooled.delete(address);
    }
    this.pools.push(pool);
    this.changed();
    for (const l of this.poolListeners) l();
    return true;
  }

  /**
   * Stops handing out addresses from a pool. It is removed at once when none of its addresses is in
   * use, else when the last one is released. Unknown CIDRs are ignored.
   */
  drainPool(cidr: string): 'removed' | 'draining' | 'absent' {
    const pool = this.findPool(cidr);
    if (!pool) return 'absent';
    if (pool.used === 0) {
      this.removePool(pool);
      return 'removed';
    }
    if (!this.draining.has(pool)) {
      this.draining.add(pool);
      this.changed();
    }
    return 'draining';
  }

  /**
   * Makes exactly these pools active: each is added (or reactivated), every other pool drains. This is
   * how a source that reports its whole set of ranges (a Node's podCIDRs) applies an update.
   */
  setPools(configs: PoolConfig[]): void {
    const wanted = new Set(configs.map((c) => parseCidr(c.cidr).text));
    for (const c of configs) this.addPool(c);
    for (const p of [...this.pools]) if (!wanted.has(p.cidr.text)) this.drainPool(p.cidr.text);
  }

  /**
   * Cuts every pool, present and future, into `count` slices (address-slices.ts). Called once at
   * start-up, before stored addresses are restored.
   */
  cutSlices(count: number): void {
    this.slices = count;
    for (const p of this.pools) p.cut(count);
  }

  /** Every pool, active or draining (the ranges its slices are cut from). */
  allPools(): readonly IpPool[] {
    return this.pools;
  }

  /** Whether the pool with this CIDR is present, and in which state. */
  stateOf(cidr: string): PoolState | undefined {
    const pool = this.findPool(cidr);
    if (!pool) return undefined;
    return this.draining.has(pool) ? 'draining' : 'active';
  }

  /** Free addresses of one family across its active pools. */
  freeIn(family: 4 | 6): number {
    let free = 0;
    for (const p of this.pools) if (p.family === family && !this.draining.has(p)) free += p.free;
    return free;
  }

  /** Free addresses of one family in the active pools of `endpoint` (PoolConfig.endpoint; undefined: the node's). */
  freeFor(family: 4 | 6, endpoint: string | undefined): number {
    let free = 0;
    for (const p of this.pools)
      if (p.family === family && p.endpoint === endpoint && !this.draining.has(p)) free += p.free;
    return free;
  }

  /**
   * One address per family: the given families, or by default every family with an active pool.
   * Throws FAILED_PRECONDITION with no pools and RESOURCE_EXHAUSTED when a family is full (or has no
   * active pool); on any failure nothing stays allocated.
   */
  allocate(families?: ReadonlyArray<4 | 6>, within?: SliceRequest): AllocatedIp[] {
    if (within) return this.allocateInSlice(families, within);
    // Pick every family's pool before taking anything, so exhaustion never needs a rollback and never
    // moves a cursor.
    const wanted = this.wantedFamilies(families);
    const picks: IpPool[] = [];
    for (const family of wanted) {
      const pool = this.poolWithSpace(family);
      if (pool === undefined) throw familyFullError(family, this.view());
      picks.push(pool);
    }
    return this.takeAll(picks, (pool) => ({
      family: pool.family,
      address: pool.allocate(),
      pool: pool.cidr,
    }));
  }

  /** allocate() for an endpoint's slice (see SliceRequest); all or nothing, like allocate(). */
  private allocateInSlice(families: ReadonlyArray<4 | 6> | undefined, req: SliceRequest): AllocatedIp[] {
    const wanted = this.wantedFamilies(families);
    // As allocate(): every family's place first, so a refusal takes nothing and moves no cursor.
    const picks: Array<{ pool: IpPool; own: boolean }> = [];
    for (const family of wanted) {
      const own = ownPool(this.pools, (p) => p.family === family && !this.draining.has(p), req);
      if (own) {
        picks.push({ pool: own, own: true });
        continue;
      }
      if (req.strict) throw sliceFullError(family, req, this.view());
      const pool = this.poolWithSpace(family);
      if (pool === undefined) throw familyFullError(family, this.view());
      picks.push({ pool, own: false });
    }
    return this.takeAll(picks, ({ pool, own }) => {
      const address = own && !req.pools ? pool.allocateInSlice(req.slice as number) : pool.allocate();
      return { family: pool.family, address, pool: pool.cidr, ...(own ? {} : { borrowed: true }) };
    });
  }

  /**
   * Gives addresses back. Addresses of no pool are ignored (the pool may have been removed from the
   * configuration). Every address is processed even if one is malformed; that one is reported after.
   */
  release(addresses: readonly string[]): void {
    let firstError: WorkloadNetError | undefined;
    for (const address of addresses) {
      try {
        const pool = this.poolFor(address);
        if (pool === undefined) this.unpooled.delete(address);
        pool?.release(address);
        if (pool !== undefined && pool.used === 0 && this.draining.has(pool)) this.removePool(pool);
      } catch (err) {
        const known = knownWorkloadNetError(err);
        if (!known) throw err;
        firstError ??= known;
      }
    }
    this.changed();
    if (firstError !== undefined) throw firstError;
  }

  /**
   * Marks an address as held (restore from the store). Throws INVALID_ARGUMENT when no pool holds it;
   * the address is then still held for a pool that covers it later.
   */
  markUsed(address: string): void {
    const pool = this.poolFor(address);
    if (pool === undefined) {
      parseAddress(address);
      this.unpooled.add(address);
      throw invalidArgument(
        `${address} is in none of the configured IP pools (${this.pools.map((p) => p.cidr.text).join(', ') || 'none'})`,
      );
    }
    pool.markUsed(address);
  }

  /** The pool whose CIDR contains the address. */
  poolFor(address: string): IpPool | undefined {
    const { family, value } = parseAddress(address);
    return this.pools.find((p) => p.family === family && cidrContains(p.cidr, value));
  }

  usage(): PoolUsageReport[] {
    return poolUsage(this.pools);
  }

  /** usage() with each pool's state. */
  report(): PoolReport[] {
    return poolReport(this.pools, this.draining);
  }

  /** Each pool's round-robin cursor, keyed by canonical CIDR, for persisting across restarts. */
  cursors(): Record<string, string> {
    return poolCursors(this.pools);
  }

  /**
   * Restores cursors saved by cursors(). A cursor is only a fairness hint, so entries for pools that
   * are no longer configured, or that no longer fit their pool, are dropped instead of failing start-up.
   */
  restoreCursors(cursors: Record<string, string>): void {
    restorePoolCursors(this.pools, cursors);
  }

  /** Families with an active pool. */
  families(): Array<4 | 6> {
    return FAMILIES.filter((f) => this.pools.some((p) => p.family === f && !this.draining.has(p)));
  }

  /** The families asked for, or every family with an active pool; refused when there is none. */
  private wantedFamilies(families: ReadonlyArray<4 | 6> | undefined): ReadonlyArray<4 | 6> {
    if (!this.configured && families === undefined) throw nothingToHandOut(false);
    const wanted = families ?? this.families();
    if (wanted.length === 0) throw nothingToHandOut(true);
    return wanted;
  }

  /** Takes an address for every pick, all or nothing: what was taken is given back when one fails. */
  private takeAll<P>(picks: readonly P[], take: (pick: P) => AllocatedIp): AllocatedIp[] {
    const out: AllocatedIp[] = [];
    try {
      for (const pick of picks) out.push(take(pick));
    } catch (err) {
      for (const ip of out) this.poolFor(ip.address)?.release(ip.address);
      throw err;
    }
    this.changed();
    return out;
  }

  /** The pools as a refusal names them. */
  private view(): PoolsView {
    return { pools: this.pools, draining: this.draining, slices: this.slices };
  }

  private poolWithSpace(family: 4 | 6): IpPool | undefined {
    return this.pools.find((p) => p.family === family && p.free > 0 && !this.draining.has(p));
  }

  private findPool(cidr: string): IpPool | undefined {
    const text = parseCidr(cidr).text;
    return this.pools.find((p) => p.cidr.text === text);
  }

  private removePool(pool: IpPool): void {
    this.pools.splice(this.pools.indexOf(pool), 1);
    this.draining.delete(pool);
    this.space?.space.remove(this.space.network, pool.cidr.text);
    this.changed();
    for (const l of this.poolListeners) l();
  }

  private changed(): void {
    this.listener?.();
  }
}

/** The default network's allocator (DI token). */
export const ALLOCATOR = Symbol.for('workloadnet.IpAllocator');

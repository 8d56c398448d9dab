// The blocks this node owns, as the allocator serves them: each one's family and DPU, the blocks
// cached as ours that etcd gives to another node (drained, shown in Status), their reconciliation
// with etcd and the release of the ones left empty. Its own file because what the node owns has its
// own rules (etcd's word wins, an address in use is never taken away, the last block of a family is
// kept), apart from how a block is claimed (block-claims.ts) and from when the source does what.

import type { IpAllocator } from '../../core/ipam/ip-allocator';
import type { Logger } from '../../core/logger';
import type { Metrics } from '../../core/metrics';
import type { BlockCache } from './block-cache';
import { blockIndex, reservedInBlock, type BlockLayout } from './block-layout';
import type { BlockOwner } from './block-owner';
import type { BlockRegistry } from './block-registry';
import type { DpuLiveness } from './dpu-liveness';

/** What the owned blocks need of the pool source. */
export interface OwnedBlocksHost {
  readonly nodeName: string;
  readonly layouts: readonly BlockLayout[];
  readonly emptyBlockGraceMs: number;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly dpus: DpuLiveness;
  allocator(): IpAllocator;
  registry(): BlockRegistry;
  cache(): BlockCache;
  /** etcd answered. */
  reachable(): void;
  owner(endpoint: string | undefined): BlockOwner;
  /** Free addresses that count against a block owner's low water. */
  freeOf(family: 4 | 6, endpoint: string | undefined): number;
  lowWater(layout: BlockLayout): number;
  /** DPUs holding blocks or being claimed one now. */
  holders(): Set<string>;
  /** Blocks may have come free in etcd: claims that found the range full (of `family`, or all) may try again. */
  rangeMayHaveRoom(family?: 4 | 6): void;
}

export interface OwnedBlock {
  family: 4 | 6;
  /** The DPU it was claimed for; absent: the node's own. */
  endpoint?: string;
  /** When it was first seen empty (ms), for the release grace period. */
  emptySince?: number;
}

export class OwnedBlocks {
  private readonly owned = new Map<string, OwnedBlock>();
  /** Blocks cached as ours that etcd gives to another node: kept draining, shown in Status. */
  readonly lost = new Map<string, string>();

  constructor(private readonly h: OwnedBlocksHost) {}

  get size(): number {
    return this.owned.size;
  }

  has(block: string): boolean {
    return this.owned.has(block);
  }

  values(): IterableIterator<OwnedBlock> {
    return this.owned.values();
  }

  layoutOf(block: string): BlockLayout | undefined {
    return this.h.layouts.find((l) => blockIndex(l, block) !== undefined);
  }

  ownsBlockOf(family: 4 | 6): boolean {
    for (const b of this.owned.values()) if (b.family === family) return true;
    return false;
  }

  ownsBlockFor(family: 4 | 6, endpoint: string): boolean {
    for (const b of this.owned.values()) if (b.family === family && b.endpoint === endpoint) return true;
    return false;
  }

  /** Puts an owned block into the allocator, as a pool of `endpoint`'s ports when claimed for a DPU. */
  serve(block: string, layout: BlockLayout, endpoint?: string): void {
    this.h.allocator().addPool({
      cidr: block,
      wholeBlock: true,
      reserved: reservedInBlock(layout, block),
      ...(endpoint !== undefined ? { endpoint } : {}),
    });
    this.owned.set(block, { family: layout.family, ...(endpoint !== undefined ? { endpoint } : {}) });
    this.countBlocks();
  }

  private countBlocks(): void {
    for (const l of this.h.layouts)
      this.h.metrics.blocksOwned.set(
        { family: String(l.family) },
        [...this.owned.values()].filter((b) => b.family === l.family).length,
      );
  }

  /**
   * Reconciles the cached blocks with etcd, in etcd's favour: blocks etcd says are ours are served;
   * cached blocks etcd lost (a release cut short by a crash, or an operator's forced release) are
   * claimed again when free and dropped when empty; ones another node now owns drain.
   */
  async sync(): Promise<void> {
    const registry = this.h.registry();
    const cache = this.h.cache();
    const allocator = this.h.allocator();
    const affinities = await registry.affinities();
    this.h.reachable();
    const me = this.h.nodeName;
    const blocks = new Map([...affinities].map(([block, o]) => [block, o.node]));
    for (const [block, owner] of affinities) {
      const layout = this.layoutOf(block);
      if (owner.node !== me || !layout || this.owned.has(block)) continue;
      await cache.add(block, {
        node: me,
        ...(owner.endpoint !== undefined ? { endpoint: owner.endpoint } : {}),
        cluster: layout.cluster.text,
        claimedAt: new Date().toISOString(),
      });
      this.serve(block, layout, owner.endpoint);
      this.h.logger.info(
        { block, endpoint: owner.endpoint },
        'etcd lists a block of ours the cache lacked; serving it',
      );
    }
    for (const [block, b] of [...this.owned]) {
      const owner = blocks.get(block);
      if (owner === me) continue;
      const inUse = allocator.report().find((p) => p.cidr === block)?.used ?? 0;
      if (owner === undefined && inUse > 0 && (await registry.create(block, this.h.owner(b.endpoint)))) {
        this.h.logger.warn(
          { block, inUse },
          'block with addresses in use was missing in etcd; claimed it again',
        );
        continue;
      }
      this.owned.delete(block);
      this.countBlocks();
      allocator.drainPool(block);
      if (owner !== undefined && inUse > 0) this.lost.set(block, owner);
      if (owner === undefined || inUse === 0) await cache.remove(block);
      this.h.logger.warn({ block, owner, inUse }, 'cached block is not ours in etcd; stopped handing it out');
    }
    for (const [block] of this.lost)
      if (allocator.stateOf(block) === undefined) {
        this.lost.delete(block);
        await cache.remove(block);
      }
    // Other nodes may have given blocks back since the range was found full: let claims try again.
    this.h.rangeMayHaveRoom();
  }

  /**
   * Gives back blocks that have been empty for the grace period, as long as the family keeps enough
   * free addresses without them (so the last block of a family is kept); a gone DPU's go back whatever
   * it keeps free. The block leaves the allocator first, in the same tick as the emptiness check, so no
   * attach can take an address of it while etcd deletes the key; if etcd refuses, it is served again.
   */
  async releaseEmpty(): Promise<void> {
    const allocator = this.h.allocator();
    const now = Date.now();
    const used = new Map(allocator.report().map((p) => [p.cidr, p.used]));
    for (const [block, b] of this.owned) {
      if ((used.get(block) ?? 0) > 0) {
        b.emptySince = undefined;
        continue;
      }
      b.emptySince ??= now;
      if (now - b.emptySince < this.h.emptyBlockGraceMs) continue;
      const layout = this.layoutOf(block)!;
      // A DPU keeps a quarter block free of its own, the node one across the family (as before DPUs);
      // a gone DPU keeps nothing free.
      const gone = b.endpoint !== undefined && this.h.dpus.isGone(b.endpoint);
      if (!gone && this.h.freeOf(b.family, b.endpoint) - layout.blockAddresses < this.h.lowWater(layout))
        continue;
      if (allocator.drainPool(block) !== 'removed') continue;
      this.owned.delete(block);
      this.countBlocks();
      try {
        await this.h.registry().release(block, this.h.owner(b.endpoint));
        await this.h.cache().remove(block);
        this.h.rangeMayHaveRoom(b.family);
        this.h.metrics.blockReleases.inc();
        if (gone) this.h.dpus.released(block, b.endpoint!, this.h.holders().has(b.endpoint!));
        else this.h.logger.info({ block }, 'released empty address block');
      } catch (err) {
        this.serve(block, layout, b.endpoint);
        throw err;
      }
    }
  }
}

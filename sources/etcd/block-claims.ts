// Claims of address blocks in etcd: ahead of need in the background when an owner's free addresses
// fall below a quarter block, and on demand, bounded in time, when an attach finds a family full; one
// claim per family and owner at a time, and the families found wholly claimed. Its own file because
// claiming is the only path by which the node takes a block from the cluster, with its own guards
// (the node name held, etcd reachable, a DPU within its bound), apart from the blocks it already owns
// (owned-blocks.ts).

import { unavailable, WorkloadNetError } from '../../core/errors';
import type { IpAllocator } from '../../core/ipam/ip-allocator';
import type { Logger } from '../../core/logger';
import type { Metrics } from '../../core/metrics';
import type { BlockCache } from './block-cache';
import { claimBlock } from './block-claimer';
import type { BlockLayout } from './block-layout';
import type { BlockOwner } from './block-owner';
import type { BlockRegistry } from './block-registry';
import type { DpuLiveness } from './dpu-liveness';
import type { NodeNameHold } from './node-name-hold';

/** What the claims need of the pool source. */
export interface BlockClaimsHost {
  readonly nodeName: string;
  readonly layouts: readonly BlockLayout[];
  readonly claimTimeoutMs: number;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly dpus: DpuLiveness;
  readonly name: NodeNameHold;
  connected(): boolean;
  stopped(): boolean;
  lastError(): string;
  allocator(): IpAllocator | undefined;
  registry(): BlockRegistry;
  cache(): BlockCache;
  /** etcd answered. */
  reachable(): void;
  /** Records an etcd failure; returns the error to throw to an attach. */
  failed(err: unknown): WorkloadNetError;
  owner(endpoint: string | undefined): BlockOwner;
  freeOf(family: 4 | 6, endpoint: string | undefined): number;
  lowWater(layout: BlockLayout): number;
  /** Owners claimed blocks ahead: the node itself (undefined), or the DPUs served. */
  ownersAhead(): Array<string | undefined>;
  /** DPUs holding blocks or being claimed one now. */
  holders(): Set<string>;
  /** Serves a block just claimed. */
  serve(block: string, layout: BlockLayout, endpoint?: string): void;
}

export class BlockClaims {
  /** Claims running, by family and owner (claimKey). */
  private readonly claims = new Map<string, Promise<void>>();
  /** Families whose every block of the cluster CIDR is claimed by some node. */
  readonly full = new Set<4 | 6>();

  constructor(private readonly h: BlockClaimsHost) {}

  /** DPUs being claimed a block now. */
  claiming(): string[] {
    return [...this.claims.keys()].map((key) => key.slice(key.indexOf('/') + 1)).filter((e) => e !== '');
  }

  /** needMore() for the node's own blocks (endpoint undefined) or for one DPU's. */
  async waitForClaim(family: 4 | 6, endpoint: string | undefined): Promise<void> {
    const layout = this.h.layouts.find((l) => l.family === family);
    if (!layout) return;
    const node = this.h.nodeName;
    const whose = endpoint === undefined ? `node ${node}` : `DPU ${endpoint} of node ${node}`;
    // Blocks are claimed under the name only by the daemon holding it (node-name-hold.ts).
    if (this.h.connected() && this.h.name.value === undefined)
      throw unavailable(
        `no free IPv${family} address in the blocks ${whose} owns, and no block is claimed: ` +
          (this.h.name.refusal ?? `this daemon does not hold node name ${node} in etcd yet; retry`),
      );
    if (!this.h.connected()) {
      throw unavailable(
        `no free IPv${family} address in the blocks ${whose} owns, and etcd is unreachable ` +
          `(${this.h.lastError() || 'not connected yet'}); retry when etcd is back`,
      );
    }
    if (this.full.has(family) && this.h.freeOf(family, endpoint) === 0) {
      throw new WorkloadNetError(
        'RESOURCE_EXHAUSTED',
        `every IPv${family} block of ${layout.cluster.text} is claimed and this node's blocks are full`,
        true,
      );
    }
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            unavailable(
              `no free IPv${family} address and claiming a block in etcd took over ${this.h.claimTimeoutMs} ms; retry`,
            ),
          ),
        this.h.claimTimeoutMs,
      );
    });
    try {
      await Promise.race([this.claim(layout, 'sync', endpoint), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  claimAheadIfLow(): void {
    if (!this.h.connected() || this.h.stopped() || this.h.name.value === undefined || !this.h.allocator())
      return;
    const owners = this.h.ownersAhead();
    for (const l of this.h.layouts)
      for (const endpoint of owners) {
        if (this.claims.has(claimKey(l.family, endpoint)) || this.full.has(l.family)) continue;
        if (this.h.freeOf(l.family, endpoint) < this.h.lowWater(l))
          this.claim(l, 'ahead', endpoint).catch((err: unknown) =>
            this.h.logger.warn(
              { err: (err as Error).message, family: l.family, endpoint },
              'block claim ahead failed',
            ),
          );
      }
  }

  /** One claim per family and owner at a time; callers arriving meanwhile wait for the same one. */
  claim(layout: BlockLayout, mode: 'ahead' | 'sync', endpoint?: string): Promise<void> {
    const key = claimKey(layout.family, endpoint);
    const running = this.claims.get(key);
    if (running) return running;
    const refused = endpoint === undefined ? undefined : this.h.dpus.refusal(endpoint, this.h.holders());
    if (refused !== undefined)
      return Promise.reject(new WorkloadNetError('RESOURCE_EXHAUSTED', refused, true));
    const p = this.doClaim(layout, mode, endpoint).finally(() => this.claims.delete(key));
    this.claims.set(key, p);
    return p;
  }

  private async doClaim(layout: BlockLayout, mode: 'ahead' | 'sync', endpoint?: string): Promise<void> {
    const metrics = this.h.metrics;
    const started = process.hrtime.bigint();
    let result;
    try {
      result = await claimBlock(this.h.registry(), layout, this.h.owner(endpoint));
    } catch (err) {
      metrics.blockClaims.inc({ outcome: 'error', mode });
      throw this.h.failed(err);
    }
    this.h.reachable();
    if ('full' in result) {
      this.full.add(layout.family);
      metrics.blockClaims.inc({ outcome: 'full', mode });
      throw new WorkloadNetError(
        'RESOURCE_EXHAUSTED',
        `every IPv${layout.family} block of ${layout.cluster.text} is claimed by some node; ` +
          "release a dead node's blocks (workloadnet cluster release-node) or add a larger cluster CIDR",
        true,
      );
    }
    if (result.attempts > 1) metrics.blockClaims.inc({ outcome: 'lost_race', mode }, result.attempts - 1);
    // Cache before serving: an address handed out must lie in a block the node knows after a crash.
    await this.h.cache().add(result.block, {
      node: this.h.nodeName,
      ...(endpoint !== undefined ? { endpoint } : {}),
      cluster: layout.cluster.text,
      claimedAt: new Date().toISOString(),
    });
    this.h.serve(result.block, layout, endpoint);
    metrics.blockClaims.inc({ outcome: 'claimed', mode });
    metrics.blockClaimSeconds.observe(Number(process.hrtime.bigint() - started) / 1e9);
    this.h.logger.info(
      { block: result.block, mode, attempts: result.attempts, endpoint },
      'claimed address block',
    );
  }
}

const claimKey = (family: 4 | 6, endpoint: string | undefined): string => `${family}/${endpoint ?? ''}`;

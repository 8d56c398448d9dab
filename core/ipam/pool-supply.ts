import { unavailable, WorkloadNetError } from '../errors';
import type { AllocatedIp, IpAllocator } from './ip-allocator';
import type { SliceRequest } from './slice-request';
import type { PoolState } from './pool-report';
import type { Metrics } from '../metrics';
import type { EndpointPools, PoolSource } from './pool-source';
import type { PoolSourceStatus } from '../workload-service';

// Where the attach flow takes addresses and gives them back, and the pools' part of Status: the
// allocator's pools under the rules of the active pool source. Attach stays local: a source is
// consulted only when a family has no free address left.

/** One pool the node serves from, as Status shows it. */
export interface PoolView {
  cidr: string;
  family: 4 | 6;
  size: number;
  used: number;
  state: PoolState;
  /** Kind of the source that supplied it. */
  source: string;
}

export interface PoolSupplyStatus {
  source: PoolSourceStatus;
  pools: PoolView[];
  /** Reasons the node cannot attach now (added to Status' reasons). */
  reasons: string[];
}

/** A source that has just supplied addresses may lose them to a concurrent attach; try this often. */
const NEED_MORE_ROUNDS = 3;

export class PoolSupply {
  constructor(
    private readonly source: PoolSource,
    private readonly allocator: IpAllocator,
    private readonly metrics?: Metrics,
  ) {}

  get kind(): string {
    return this.source.kind;
  }

  /** The source's pools per tunnel endpoint, when it offers them (pool-source.ts EndpointPools). */
  get endpointPools(): EndpointPools | undefined {
    return this.source.endpointPools;
  }

  /** Puts the source's pools into the allocator; called before stored addresses are restored. */
  start(): Promise<void> {
    return this.source.start(this.allocator);
  }

  stop(): Promise<void> {
    return this.source.stop();
  }

  /**
   * One address per family for a new attachment. UNAVAILABLE (retryable) while the source is not ready
   * or cannot supply more in time; RESOURCE_EXHAUSTED when a static pool is full. With `within`, from
   * an endpoint's slices (see SliceRequest).
   */
  async allocate(within?: SliceRequest): Promise<AllocatedIp[]> {
    if (!this.source.isReady()) {
      const st = this.source.status();
      throw unavailable(`address pools are not ready (${st.kind}): ${st.reasons.join('; ')}`);
    }
    const families = this.source.families();
    if (families === undefined && !this.allocator.configured)
      throw unavailable('no pod CIDR is configured; set podCidrs and restart the daemon');
    if (within?.pools && this.source.endpointPools)
      return this.allocateForEndpoint(families, within, this.source.endpointPools);
    for (let round = 0; ; round++) {
      try {
        return this.allocator.allocate(families, within);
      } catch (err) {
        const full = err instanceof WorkloadNetError && err.code === 'RESOURCE_EXHAUSTED';
        if (!full || this.source.needMore === undefined || round >= NEED_MORE_ROUNDS) throw err;
        const short = (families ?? this.allocator.families()).filter((f) => this.allocator.freeIn(f) === 0);
        // A full slice under fabric.strictSlices: more ranges would not give this endpoint an address.
        if (short.length === 0) throw err;
        for (const family of short) await this.source.needMore(family);
      }
    }
  }

  /**
   * From the endpoint's own pools; when a family's are full the endpoint gets another pool from the
   * source first (the attach waits for it, boundedly), and only when that fails is an address
   * borrowed elsewhere, or, strict, the attach refused with the source's reason (UNAVAILABLE while
   * etcd is unreachable: retryable) or the endpoint's full pools named.
   */
  private async allocateForEndpoint(
    families: ReadonlyArray<4 | 6> | undefined,
    within: SliceRequest,
    pools: EndpointPools,
  ): Promise<AllocatedIp[]> {
    let refusal: unknown;
    for (let round = 0; round <= NEED_MORE_ROUNDS && refusal === undefined; round++) {
      const short = (families ?? this.allocator.families()).filter(
        (f) => this.allocator.freeFor(f, within.endpoint) === 0,
      );
      if (short.length === 0) {
        try {
          return this.allocator.allocate(families, { ...within, strict: true });
        } catch (err) {
          // Taken by a concurrent attach between the count and the allocation: count again.
          if (!(err instanceof WorkloadNetError && err.code === 'RESOURCE_EXHAUSTED')) throw err;
          continue;
        }
      }
      for (const family of short)
        await pools.needMoreFor(family, within.endpoint).catch((err: unknown) => (refusal ??= err));
    }
    if (within.strict && refusal instanceof WorkloadNetError && refusal.code === 'UNAVAILABLE') throw refusal;
    try {
      return this.allocator.allocate(families, within);
    } catch (err) {
      // Nothing to borrow either: why the endpoint got no pool says more than "every pool is full".
      if (!within.strict && refusal instanceof WorkloadNetError) throw refusal;
      throw err;
    }
  }

  /** Gives addresses back: those of a detached attachment, or of an attach that failed. */
  release(addresses: readonly string[]): void {
    this.allocator.release(addresses);
  }

  /**
   * Holds an address a recorded attachment uses (at start-up, or when one is adopted). Throws when no
   * pool of this node contains it.
   */
  hold(address: string): void {
    this.allocator.markUsed(address);
  }

  status(): PoolSupplyStatus {
    const source = this.source.status();
    const reasons = source.ready ? [] : source.reasons.slice();
    if (source.ready && this.source.families() === undefined && !this.allocator.configured)
      reasons.push('no pod CIDR is configured');
    else if (source.ready && this.source.needMore === undefined && this.allocator.exhausted)
      reasons.push('the address pool is exhausted');
    const pools = this.allocator.report().map((p) => ({ ...p, source: source.kind }));
    this.metrics?.poolSourceConnected.set({ source: source.kind }, source.connected ? 1 : 0);
    // Pools come and go (blocks, Node ranges): drop the series of gone ones; the caller sets the rest.
    this.metrics?.poolSize.reset();
    this.metrics?.poolUsed.reset();
    return { source, pools, reasons };
  }
}

/** inversify identifier of the PoolSupply. */
export const POOL_SUPPLY = Symbol.for('workloadnet.PoolSupply');

// The seam between the core and wherever the node's address ranges come from. The core allocates
// addresses locally from the pools in its IpAllocator; a pool source only decides which pools exist:
// the configured pod CIDRs (static), a Node's spec.podCIDRs (kubernetes), or blocks claimed in a cluster
// store (etcd). A source adds pools and drains them (a draining pool keeps serving the addresses in use
// and takes no new ones); it never yanks a pool from under live addresses.
//
// The attach path never waits for a source in steady state: it allocates from the pools already there
// and asks the source only when a family has no free address left (needMore), which a source may answer
// by getting more within a bounded time or by failing UNAVAILABLE at once when it cannot.

import type { PoolSourceStatus } from '../workload-service';
import type { IpAllocator } from './ip-allocator';

export interface PoolSource {
  readonly kind: string;
  /**
   * The address families every attachment gets one address of, or undefined for "every family the
   * allocator has an active pool of". A source whose pools may be missing for a while (no block of a
   * family claimed yet) names them, so an attach fails rather than silently going single-stack.
   */
  families(): ReadonlyArray<4 | 6> | undefined;
  /**
   * Supplies the allocator's pools. Resolves once the pools the source can supply without its backing
   * service (configuration, local cache) are in the allocator, before stored addresses are restored;
   * the rest follows in the background. Must not fail because the backing service is down.
   */
  start(allocator: IpAllocator): Promise<void>;
  /** status().ready, cheaply: asked on every attach. */
  isReady(): boolean;
  status(): PoolSourceStatus;
  /**
   * Optional: called on attach when a family has no free address. Resolves once more addresses are
   * in the allocator; rejects (UNAVAILABLE, retryable) promptly when they cannot be had in a bounded
   * time. Sources without it make that attach fail with RESOURCE_EXHAUSTED.
   */
  needMore?(family: 4 | 6): Promise<void>;
  /**
   * Optional: the source can give each tunnel endpoint (DPU) of the node pools of its own (etcd blocks
   * claimed for one DPU). The slice book (slice-book.ts) then addresses an endpoint's ports from its
   * pools rather than cutting the node's ranges into equal slices.
   */
  readonly endpointPools?: EndpointPools;
  stop(): Promise<void>;
}

/**
 * Pools per tunnel endpoint. Such pools carry the endpoint (PoolConfig.endpoint); the allocator hands
 * an endpoint's ports addresses from them only, and asks here when they are full.
 */
export interface EndpointPools {
  /**
   * The network's ports are placed on endpoints from now on: pools come per endpoint, and the node no
   * longer gets pools of its own ahead of need. Called once, before the source starts.
   */
  use(): void;
  /** The node's endpoints now: each gets a first pool per family ahead of its first port. */
  present(endpoints: readonly string[]): void;
  /**
   * `endpoint`'s pools of `family` are full: resolves once it has another, rejects (UNAVAILABLE when
   * the backing service is unreachable or slow, RESOURCE_EXHAUSTED when nothing is left) in a
   * bounded time. The caller then borrows an address elsewhere, or refuses under strict slices.
   */
  needMoreFor(family: 4 | 6, endpoint: string): Promise<void>;
}

/** inversify identifier under which the active pool source is bound. */
export const POOL_SOURCE = Symbol.for('workloadnet.PoolSource');

/**
 * inversify identifier of the static pool source (the pools a network is configured with), bound in
 * transient scope: each network other than the default one gets its own, whatever the default's is.
 */
export const STATIC_POOL_SOURCE = Symbol.for('workloadnet.StaticPoolSource');

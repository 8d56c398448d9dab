import type { IpPool } from './ip-pool';

// An allocation for a tunnel endpoint (DPU), and the pool its address comes from when the endpoint's
// own place has room: a slice of every pool, or the endpoint's own blocks. Its own file because the
// endpoint's place is the fabric's rule (core/fabric/slice-book.ts), which the allocator only applies
// before falling back to any pool.

/**
 * An allocation for a tunnel endpoint (DPU) that owns slice `slice` of every pool (address-slices.ts):
 * the address comes from that slice of the first pool with room in it; when every one is full, or the
 * endpoint holds no slice, it is borrowed from anywhere in the pools, unless `strict`.
 */
export interface SliceRequest {
  endpoint: string;
  /** The endpoint's slice index; undefined when it holds none. */
  slice: number | undefined;
  /** Refuse (RESOURCE_EXHAUSTED, naming the endpoint and its slice) rather than borrow. */
  strict: boolean;
  /**
   * The endpoint's place is its own pools (PoolConfig.endpoint), not a slice of every pool: the pools
   * are not cut, and `slice` is not looked at.
   */
  pools?: boolean;
}

/**
 * The first pool `active` accepts with room in the endpoint's own place (its slice, or its blocks with
 * `req.pools`), or undefined when there is none or the endpoint holds no slice.
 */
export function ownPool(
  pools: readonly IpPool[],
  active: (p: IpPool) => boolean,
  req: SliceRequest,
): IpPool | undefined {
  const slice = req.slice;
  if (req.pools) return pools.find((p) => active(p) && p.endpoint === req.endpoint && p.free > 0);
  return slice === undefined ? undefined : pools.find((p) => active(p) && p.freeInSlice(slice) > 0);
}

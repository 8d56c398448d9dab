import { exhausted, failedPrecondition, type WorkloadNetError } from '../errors';
import type { IpPool } from './ip-pool';
import type { SliceRequest } from './slice-request';

// The words an allocation is refused with: no pool at all, every pool draining, a family full, an
// endpoint's slice or blocks full where borrowing is forbidden. Their own file because each names the
// pools as they stand and what a person can do about it, which is a concern of its own beside the
// allocator's choice of an address (ip-allocator.ts).

/** The allocator's pools as a refusal reads them. */
export interface PoolsView {
  pools: readonly IpPool[];
  draining: ReadonlySet<IpPool>;
  /** Slices per pool; 1: pools are not cut. */
  slices: number;
}

/** Without pools, or with every pool draining, nothing can be handed out. */
export function nothingToHandOut(configured: boolean): WorkloadNetError {
  return configured
    ? exhausted('no IP pool hands out addresses: every pool is draining; wait for a new range')
    : failedPrecondition('no IP pool is configured; add at least one pool CIDR to the configuration');
}

/** Every pool of the family is full. */
export function familyFullError(family: 4 | 6, view: PoolsView): WorkloadNetError {
  const pools =
    view.pools
      .filter((p) => p.family === family)
      .map((p) => `${p.cidr.text}: ${p.used} of ${p.size} in use${view.draining.has(p) ? ', draining' : ''}`)
      .join(', ') || 'none';
  return exhausted(
    `no free IPv${family} address: every IPv${family} pool is full (${pools}); ` +
      'detach workloads or configure a larger or additional pool',
  );
}

/** The endpoint's own place is full and fabric.strictSlices forbids borrowing. */
export function sliceFullError(family: 4 | 6, req: SliceRequest, view: PoolsView): WorkloadNetError {
  const fix = 'detach workloads placed on it, or set fabric.strictSlices to false to let it borrow';
  const active = view.pools.filter((p) => p.family === family && !view.draining.has(p));
  if (req.pools) {
    const own = active.filter((p) => p.endpoint === req.endpoint).map((p) => p.cidr.text);
    return exhausted(
      `the IPv${family} blocks of DPU ${req.endpoint} (${own.join(', ') || 'none yet'}) have no free address and fabric.strictSlices forbids borrowing one; ${fix}`,
    );
  }
  if (req.slice === undefined)
    return exhausted(
      `DPU ${req.endpoint} holds no slice of the node's ranges (every one of the ${view.slices} slices is held by another DPU) and fabric.strictSlices forbids borrowing an address; raise dpu.fabricSlices, or set fabric.strictSlices to false`,
    );
  const slice = req.slice;
  const cidrs = active.map((p) => p.sliceCidr(slice)).filter((c) => c !== undefined);
  return exhausted(
    `slice ${slice} of DPU ${req.endpoint} (${cidrs.join(', ') || `no IPv${family} range is cut into that many slices`}) has no free IPv${family} address and fabric.strictSlices forbids borrowing one; ${fix}`,
  );
}

import type { IpPool } from './ip-pool';

// What the allocator tells of its pools: each pool's size and use, and whether it still hands out
// addresses. Its own file because it is the pools' public account (Status, the metrics, a pool
// source watching free space), read apart from how an address is chosen.

/** Active pools hand out addresses; draining ones only keep those in use until they are released. */
export type PoolState = 'active' | 'draining';

export interface PoolUsageReport {
  cidr: string;
  family: 4 | 6;
  size: number;
  used: number;
}

/** Usage plus whether the pool still hands out addresses. */
export interface PoolReport extends PoolUsageReport {
  state: PoolState;
}

export function poolUsage(pools: readonly IpPool[]): PoolUsageReport[] {
  return pools.map((p) => ({ cidr: p.cidr.text, family: p.family, size: p.size, used: p.used }));
}

/** poolUsage() with each pool's state. */
export function poolReport(pools: readonly IpPool[], draining: ReadonlySet<IpPool>): PoolReport[] {
  return pools.map((p) => ({
    cidr: p.cidr.text,
    family: p.family,
    size: p.size,
    used: p.used,
    state: draining.has(p) ? 'draining' : 'active',
  }));
}

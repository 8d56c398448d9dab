// The node's IP pools seen as one allocator: an attachment gets one address per configured family
// (dual-stack = one IPv4 + one IPv6), all or nothing.
//
// Several pools of one family are allowed (e.g. a second range added when the first fills up); they
// are used in configuration order, the first with a free address wins. Overlapping pools are rejected,
// so every address belongs to at most one pool and release/markUsed never have to guess.
//
// The allocator keeps no durable state of its own: the store is the source of truth, and on start the
// caller rebuilds it with markUsed() for every stored address plus restoreCursors().

import { cidrContains, parseAddress, type Cidr } from './cidr';
import { exhausted, failedPrecondition, invalidArgument, WorkloadNetError } from './errors';
import { IpPool } from './ip-pool';

export interface PoolConfig {
  cidr: string;
  /** Addresses or CIDRs inside the pool that are never handed out. */
  reserved?: string[];
}

export interface AllocatedIp {
  family: 4 | 6;
  address: string;
  pool: Cidr;
}

export interface PoolUsageReport {
  cidr: string;
  family: 4 | 6;
  size: number;
  used: number;
}

const FAMILIES: ReadonlyArray<4 | 6> = [4, 6];

export class IpAllocator {
  private readonly pools: IpPool[];

  constructor(pools: PoolConfig[]) {
    this.pools = pools.map((p) => new IpPool(p.cidr, p.reserved));
    for (let i = 0; i < this.pools.length; i++) {
      for (let j = i + 1; j < this.pools.length; j++) {
        const a = this.pools[i]!.cidr;
        const b = this.pools[j]!.cidr;
        if (a.family === b.family && (cidrContains(a, b.network) || cidrContains(b, a.network))) {
          throw invalidArgument(
            `IP pools ${a.text} and ${b.text} overlap; every address must belong to one pool`,
          );
        }
      }
    }
  }

  /** At least one pool is configured. */
  get configured(): boolean {
    return this.pools.length > 0;
  }

  /** Some configured family has no free address left in any of its pools. */
  get exhausted(): boolean {
    return this.families().some((family) => this.poolWithSpace(family) === undefined);
  }

  /**
   * One address per configured family. Throws FAILED_PRECONDITION with no pools and RESOURCE_EXHAUSTED
   * when a family is full; on any failure nothing stays allocated.
   */
  allocate(): AllocatedIp[] {
    if (!this.configured) {
      throw failedPrecondition('no IP pool is configured; add at least one pool CIDR to the configuration');
    }
    // Pick every family's pool before taking anything, so exhaustion never needs a rollback and never
    // moves a cursor.
    const picks: IpPool[] = [];
    for (const family of this.families()) {
      const pool = this.poolWithSpace(family);
      if (pool === undefined) throw this.exhaustedError(family);
      picks.push(pool);
    }
    const out: AllocatedIp[] = [];
    try {
      for (const pool of picks) out.push({ family: pool.family, address: pool.allocate(), pool: pool.cidr });
    } catch (err) {
      for (const ip of out) this.poolFor(ip.address)?.release(ip.address);
      throw err;
    }
    return out;
  }

  /**
   * Gives addresses back. Addresses of no pool are ignored (the pool may have been removed from the
   * configuration). Every address is processed even if one is malformed; that one is reported after.
   */
  release(addresses: string[]): void {
    let firstError: WorkloadNetError | undefined;
    for (const address of addresses) {
      try {
        this.poolFor(address)?.release(address);
      } catch (err) {
        if (firstError === undefined && err instanceof WorkloadNetError) firstError = err;
        else if (!(err instanceof WorkloadNetError)) throw err;
      }
    }
    if (firstError !== undefined) throw firstError;
  }

  /** Marks an address as held (restore from the store). Throws INVALID_ARGUMENT when no pool holds it. */
  markUsed(address: string): void {
    const pool = this.poolFor(address);
    if (pool === undefined) {
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
    return this.pools.map((p) => ({ cidr: p.cidr.text, family: p.family, size: p.size, used: p.used }));
  }

  /** Each pool's round-robin cursor, keyed by canonical CIDR, for persisting across restarts. */
  cursors(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const p of this.pools) {
      const c = p.cursor;
      if (c !== undefined) out[p.cidr.text] = c;
    }
    return out;
  }

  /**
   * Restores cursors saved by cursors(). A cursor is only a fairness hint, so entries for pools that
   * are no longer configured, or that no longer fit their pool, are dropped instead of failing start-up.
   */
  restoreCursors(cursors: Record<string, string>): void {
    for (const p of this.pools) {
      const c = cursors[p.cidr.text];
      if (c === undefined) continue;
      try {
        p.setCursor(c);
      } catch (err) {
        if (!(err instanceof WorkloadNetError)) throw err;
      }
    }
  }

  private families(): Array<4 | 6> {
    return FAMILIES.filter((f) => this.pools.some((p) => p.family === f));
  }

  private poolWithSpace(family: 4 | 6): IpPool | undefined {
    return this.pools.find((p) => p.family === family && p.free > 0);
  }

  private exhaustedError(family: 4 | 6): WorkloadNetError {
    const pools = this.pools
      .filter((p) => p.family === family)
      .map((p) => `${p.cidr.text}: ${p.used} of ${p.size} in use`)
      .join(', ');
    return exhausted(
      `no free IPv${family} address: every IPv${family} pool is full (${pools}); ` +
        'detach workloads or configure a larger or additional pool',
    );
  }
}

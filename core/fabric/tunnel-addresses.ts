import type { IpAllocator } from '../ipam/ip-allocator';
import type { Logger } from '../logger';
import type { StoredTunnelAddresses } from '../store/fabric-records';

// This node's fabric tunnel address per family, as Calico's VXLAN tunnel address: one address of the
// node's own pools, taken through the allocator like a pod's but for the node itself. The fabric puts
// it on its VXLAN device and publishes it in the node record; peers use it as this node's neighbour
// key and probe target, and traffic the node itself sends to a remote pod leaves with it as its source,
// which the peer routes back through its own device (strict rp_filter passes).
//
// Needed where a pool hands out its first address (etcd blocks are whole blocks): there the range's
// first address, the key static and Kubernetes ranges use, may be a pod's. It is kept in the store, so
// a restart holds the same address before any attach can take it, and it is never an attachment's row:
// the leak sweep, the start-up reconcile and the slice book never see it, and the block holding it is
// never empty, so it is never released to etcd. It goes only when the node's blocks are released by an
// operator (cluster release-node), which gives back the blocks and so the address with them.
//
// A start with the fabric off keeps it reserved (held, not published): no fabric runs then to take it
// off wn-vxlan, and an address still on one of the host's devices is a local address of the host, so a
// pod given it would never hear its node's answers. The next start with the fabric on uses it again.

/** What the reservation reads and writes in the store (core/store/store.ts). */
export interface TunnelAddressStore {
  tunnelAddresses(): StoredTunnelAddresses;
  putTunnelAddresses(addresses: StoredTunnelAddresses): Promise<void>;
}

export interface TunnelAddressesOptions {
  /** The allocator of the network whose ranges peers route to this node (the default network's). */
  allocator: IpAllocator;
  /** Resolved only after the store is open (the start-up reconcile). */
  store: () => TunnelAddressStore;
  /** Whether this node reserves one: the fabric on, a pool source whose blocks hand out every address. */
  wanted: boolean;
  log: Logger;
}

export class TunnelAddresses {
  private held: StoredTunnelAddresses = {};
  private restoredOnce = false;
  private filling?: Promise<void>;

  constructor(private readonly opts: TunnelAddressesOptions) {}

  /**
   * Holds the stored addresses again, once every attachment's are held (so none is taken twice), also
   * when the node no longer wants one (see the header: it may still be on wn-vxlan). A stored address no
   * pool of this node contains any more (its block went with a release-node) is dropped; when wanted,
   * another is reserved.
   */
  async restore(): Promise<void> {
    if (this.restoredOnce) return;
    this.restoredOnce = true;
    const store = this.opts.store();
    const stored = store.tunnelAddresses();
    const kept: StoredTunnelAddresses = {};
    for (const f of [4, 6] as const) {
      const a = stored[f];
      if (a === undefined) continue;
      if (this.opts.allocator.poolFor(a) === undefined) {
        this.opts.log.warn(
          { address: a },
          "stored fabric tunnel address is in none of this node's pools; " +
            (this.opts.wanted ? 'reserving another' : 'dropped'),
        );
        continue;
      }
      this.opts.allocator.markUsed(a);
      kept[f] = a;
    }
    this.held = kept;
    if (!this.opts.wanted && (kept[4] ?? kept[6]) !== undefined)
      this.opts.log.info(
        { kept: [kept[4], kept[6]].filter((a) => a !== undefined) },
        'fabric tunnel addresses kept reserved while the fabric is off (they may still be on wn-vxlan)',
      );
    if (kept[4] !== stored[4] || kept[6] !== stored[6]) await store.putTunnelAddresses(kept);
  }

  /**
   * The tunnel addresses now, per family; reserves a missing one in the background (a family whose
   * pools are not there yet gets one at a later call). Empty before restore() and when none is wanted.
   */
  current(): StoredTunnelAddresses {
    if (!this.opts.wanted || !this.restoredOnce) return {};
    const missing = this.opts.allocator.families().filter((f) => this.held[f] === undefined);
    if (missing.length > 0 && !this.filling)
      this.filling = this.fill(missing).finally(() => (this.filling = undefined));
    return { ...this.held };
  }

  /** Reserves one address per missing family and records it before anyone is told of it. */
  private async fill(families: ReadonlyArray<4 | 6>): Promise<void> {
    for (const f of families) {
      let address: string;
      try {
        const [ip] = this.opts.allocator.allocate([f]);
        if (!ip) continue;
        address = ip.address;
      } catch (err) {
        this.opts.log.debug({ family: f, err: (err as Error).message }, 'no fabric tunnel address yet');
        continue;
      }
      const next = { ...this.held, [f]: address };
      try {
        await this.opts.store().putTunnelAddresses(next);
      } catch (err) {
        this.opts.allocator.release([address]);
        this.opts.log.error({ err: (err as Error).message }, 'cannot record the fabric tunnel address');
        continue;
      }
      this.held = next;
      this.opts.log.info({ address }, 'fabric tunnel address reserved');
    }
  }
}

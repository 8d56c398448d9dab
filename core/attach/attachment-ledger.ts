import { DEFAULT_NETWORK } from '../config';
import type { Logger } from '../logger';
import type { NetnsOpener } from '../netns-opener';
import type { NetworkSet } from '../ipam/network';
import type { AttachmentRecord } from '../store/attachment-record';
import type { Store } from '../store/store';
import { KeyedMutex } from '../../lib/keyed-mutex';
import { toView } from './attachment-views';
import type { AttachGate } from './attach-gate';

// What the daemon holds for its recorded attachments besides their rows: the per-workload locks that
// every verb takes, the addresses in the pools, the attachment carrying each namespace's default routes
// and the count per network. Attach, Detach, the start-up reconcile, the leak sweep and GC all change
// them here, so that a row, its addresses, its default route and its count come and go together.

export class AttachmentLedger {
  private readonly locks = new KeyedMutex();
  /**
   * The attachment that carries each namespace's default routes, by the namespace's inode: one per
   * namespace, or a second interface's default route would clash with the first (EEXIST). Rebuilt from
   * the store at start-up; an entry goes when its attachment goes.
   */
  private readonly defaultRouteHolders = new Map<number, string>();
  /** Attachments per network name, kept as rows come and go (Status reads it every 2 s: no scan). */
  private readonly perNetwork = new Map<string, number>();

  constructor(
    readonly store: Store,
    readonly networks: NetworkSet,
    private readonly netns: NetnsOpener,
    private readonly log: Logger,
    /** What an attach must pass besides its programming (NetworkPolicy), when the node has it. */
    readonly gate?: AttachGate,
  ) {}

  /** Runs fn with the workload's lock held: one verb at a time per workload, workloads in parallel. */
  locked<T>(workloadId: string, fn: () => Promise<T>): Promise<T> {
    return this.locks.run(workloadId, fn);
  }

  /** Recorded attachments of one network. */
  attachmentsOn(network: string): number {
    return this.perNetwork.get(network) ?? 0;
  }

  /** A row read at start-up: its addresses held, its default route and its count restored. */
  restore(rec: AttachmentRecord): void {
    this.holdAddresses(rec);
    this.added(rec);
    if (rec.defaultRoute !== false && rec.netnsInode) this.defaultRouteHolders.set(rec.netnsInode, rec.key);
  }

  /** Holds a recorded attachment's addresses, so that they are never handed out again while it lives. */
  holdAddresses(rec: AttachmentRecord): void {
    const network = this.networks.of(rec);
    for (const ip of rec.ips) {
      if (!network) {
        // Its network was removed from the config: the attachment keeps working and can be detached.
        this.log.warn(
          { workloadId: rec.workloadId, network: rec.network, address: ip.address },
          'attachment of a network this node no longer serves',
        );
        continue;
      }
      try {
        network.pools.hold(ip.address);
      } catch (err) {
        // The pool was reconfigured and no longer contains this address: the attachment keeps it (the
        // workload is using it) but it can never be handed out again, which is what we want.
        this.log.warn(
          { workloadId: rec.workloadId, address: ip.address, err: (err as Error).message },
          'address outside the configured pools',
        );
      }
    }
    // Addresses outside the slices of the DPU holding the port are its borrowed ones (slice-book.ts).
    network?.slices?.restored(rec);
  }

  /** A row now recorded (its addresses already held). */
  added(rec: { network?: string; mtu: number; endpoint?: string }): void {
    this.count(rec, 1);
  }

  /** A row rewritten with another MTU (mtu-alignment.ts): counted under its new one. */
  mtuChanged(before: AttachmentRecord, after: AttachmentRecord): void {
    this.networks.of(before)?.counted(before, -1);
    this.networks.of(after)?.counted(after, 1);
  }

  /**
   * Whether a new attachment in this namespace carries its default routes: yes unless another
   * attachment there already does. A holder whose namespace is gone (its inode reused by a new one) is
   * forgotten. Claimed before programming, so two workloads sharing a namespace never both claim it.
   */
  async claimDefaultRoute(inode: number, key: string): Promise<boolean> {
    const holder = this.defaultRouteHolders.get(inode);
    if (holder !== undefined && holder !== key) {
      const rec = this.store.get(holder);
      // Without a row the holder is an attach still being programmed: it holds the route.
      if (!rec || (await this.netns.stillPresent(rec.netnsPath, rec.netnsInode))) return false;
      if (this.defaultRouteHolders.get(inode) !== holder) return false;
    }
    this.defaultRouteHolders.set(inode, key);
    return true;
  }

  /**
   * Removes an attachment's dataplane, then its addresses and row. The addresses are released even when
   * the dataplane step fails: a leaked address is worse than a leftover link, which reconcile removes.
   * The gate's part goes after the dataplane (an interface is never left without its pod's rules)
   * and before the addresses, so an address back in the pool is in no set of the pod that had it.
   * The caller holds the workload's lock.
   */
  async teardown(rec: AttachmentRecord, why: string): Promise<void> {
    try {
      await this.networks.backendOf(rec).detach(toView(rec));
    } catch (err) {
      this.log.warn(
        { workloadId: rec.workloadId, ifName: rec.ifName, why, err: (err as Error).message },
        'dataplane teardown failed; releasing addresses anyway',
      );
    }
    await this.gate?.release(rec.key);
    await this.store.remove(rec.key);
    this.count(rec, -1);
    this.networks.of(rec)?.release(rec.ips.map((i) => i.address));
    this.dropDefaultRoute(rec.netnsInode, rec.key);
  }

  /**
   * Tears the attachment down if it is still the row the caller saw: detached, or attached again, since
   * it looked, it is another attachment and stays. True when it was torn down.
   */
  releaseIfUnchanged(rec: AttachmentRecord, why: string): Promise<boolean> {
    return this.locked(rec.workloadId, async () => {
      const current = this.store.get(rec.key);
      if (current?.createdAt !== rec.createdAt) return false;
      await this.teardown(current, why);
      return true;
    });
  }

  /** The attachment no longer carries its namespace's default routes (it failed, or it went). */
  dropDefaultRoute(inode: number, key: string): void {
    if (this.defaultRouteHolders.get(inode) === key) this.defaultRouteHolders.delete(inode);
  }

  private count(rec: { network?: string; mtu: number; endpoint?: string }, delta: 1 | -1): void {
    const name = rec.network || DEFAULT_NETWORK;
    this.perNetwork.set(name, (this.perNetwork.get(name) ?? 0) + delta);
    // And by MTU: Status counts those above what the fabric carries.
    this.networks.of(rec)?.counted(rec, delta);
  }
}

// Who may send to our VXLAN port, and as whom. The kernel's VXLAN device takes a packet from any source
// on its UDP port and delivers the inner frame into the pod network, so anyone on the underlay could
// inject traffic that appears to come from a remote pod. The filter drops, and counts, every packet to
// the port
// - whose outer source is not the underlay address of a current peer (a node's VTEP or one of its DPU
//   endpoints),
// - whose VNI is not ours,
// - whose inner frame is not IPv4 or IPv6 (peers' neighbours are permanent: nothing else is sent), or
// - whose inner source is not one that outer address may send (vxlan-inner-sources.ts: its own
//   prefixes): an outer source is forged with one raw socket, and would otherwise let anyone on the
//   underlay speak as any pod of the cluster.
// In hybrid mode it also guards the direct path (direct-sources.ts): a pod-range source arriving on
// the uplink as plain IP must come from the MAC of the peer that owns it (chain direct_input,
// counter direct_filtered).
//
// How: one nftables table of our own, every object of it marked as ours (nft-ownership.ts), written
// in one transaction whose text vxlan-filter-script.ts makes (the why of that shape is there).
// Without `nft` or without nf_tables in the kernel the fabric still works, unfiltered, and says so.

import type { Peer } from '../../../core/peer-source';
import type { DirectSources } from './direct-sources';
import { NftError, type NftRunner } from './nft-runner';
import { ownership, parseListing, removable, type TableListing } from './nft-ownership';
import {
  COUNTER_READ,
  LIST,
  OUR_OBJECTS,
  TABLE,
  countedIn,
  filterScript,
  parseCounter,
  peerAddresses,
  removeScript,
  setContents,
  type FilterInput,
} from './vxlan-filter-script';
import { innerSources } from './vxlan-inner-sources';

export { NftError, nftRunner, type NftRunner, type NftRunnerOptions } from './nft-runner';

/** Something with one of our names in our table (or the table itself) is not ours: nothing was changed. */
export class FilterNotOursError extends NftError {}

/** What the fabric tells the filter besides the port and the peers. */
export interface FilterOptions {
  vni?: number;
  direct?: DirectSources;
}

/** How often the sets are written whole even when only a few elements changed. */
const WHOLE_EVERY_MS = 60_000;

/**
 * The filter of one host namespace: programs it on every apply, reads its counter, removes it when
 * the fabric runs no VXLAN device or the operator turned it off. Failures are the caller's warning;
 * a FilterNotOursError names what is in the way.
 */
export class VxlanSourceFilter {
  /** The counters as last read; undefined until they were (or while the filter is off). */
  filtered: number | undefined;
  private reading: Promise<void> | undefined;
  private readAt = 0;
  /** What the last apply wrote, while the kernel is known to hold it; undefined: write every set whole. */
  private written: Map<string, Set<string>> | undefined;
  private wholeAt = 0;

  constructor(private readonly nft: NftRunner) {}

  /** Admits exactly these peers (as themselves only) on `port`, in one transaction, and reads the counters. */
  async apply(port: number, peers: readonly Peer[], opts: FilterOptions = {}): Promise<void> {
    const listing = await this.list();
    const state = ownership(TABLE, listing, OUR_OBJECTS);
    if (state.state === 'foreign') throw new FilterNotOursError(`VXLAN source filter: ${state.why}`);
    const input: FilterInput = {
      port,
      addresses: peerAddresses(peers),
      inner: innerSources(peers),
      vni: opts.vni,
      direct: opts.direct,
    };
    // The counters as they were before this apply: one nft run less (listing them loads every set).
    if (state.state === 'ours') this.filtered = countedIn(listing) ?? this.filtered;
    // Differences only while the table is ours and was written whole lately: a set changed by hand
    // is put right at the next whole write, at most a minute on.
    const whole =
      state.state !== 'ours' || this.written === undefined || Date.now() - this.wholeAt > WHOLE_EVERY_MS;
    const sets = setContents(input);
    try {
      await this.nft(
        filterScript(input, {
          replace: state.state === 'legacy',
          previous: whole ? undefined : this.written,
        }),
      );
    } catch (err) {
      this.written = undefined;
      if (whole) throw err;
      // An element we thought there was not (removed by hand): write every set whole.
      await this.nft(filterScript(input));
    }
    if (whole || this.written === undefined) this.wholeAt = Date.now();
    this.written = new Map([...sets].map(([k, v]) => [k, new Set(v)]));
    // A table made (or replaced) just now counts from zero.
    if (state.state !== 'ours') this.filtered = 0;
    this.readAt = Date.now();
  }

  /** What of the table `remove()` would delete, in words; undefined when nothing of ours is there. */
  async held(): Promise<string | undefined> {
    const r = removable(await this.list(), OUR_OBJECTS);
    if (!r || (!r.table && r.objects.length === 0)) return undefined;
    return r.table
      ? `nftables table ${TABLE} (the VXLAN source filter)`
      : `${r.objects.length} objects of ours in nftables table ${TABLE} (the table also holds others', which stay)`;
  }

  /** Deletes what of our table is ours (and the table, when nothing else is in it). */
  async remove(): Promise<void> {
    const r = removable(await this.list(), OUR_OBJECTS);
    this.written = undefined;
    if (r && (r.table || r.objects.length > 0)) await this.nft(removeScript(r));
    this.filtered = undefined;
  }

  /** The table as it is now (terse: without set elements); undefined when there is none. */
  private async list(): Promise<TableListing | undefined> {
    try {
      return parseListing(await this.nft(LIST, ['-t']));
    } catch (err) {
      if (err instanceof NftError && /Error: No such file or directory/.test(err.message)) return undefined;
      throw err;
    }
  }

  /**
   * Reads the counters again in the background when the last read is older than `maxAgeMs`: Status
   * asks, and sees the new value at its next call. At most one read at a time.
   */
  refresh(maxAgeMs: number): void {
    if (this.filtered === undefined || this.reading || Date.now() - this.readAt < maxAgeMs) return;
    this.reading = this.nft(COUNTER_READ)
      .then((out) => {
        this.filtered = parseCounter(out) ?? this.filtered;
      })
      .catch(() => undefined)
      .finally(() => {
        this.readAt = Date.now();
        this.reading = undefined;
      });
  }

  /** Waits for a read in flight (tests, stop). */
  async settled(): Promise<void> {
    await this.reading;
  }
}

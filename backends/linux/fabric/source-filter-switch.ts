// The VXLAN source filter as the fabric switches it: programmed at every apply while it is wanted,
// removed when it is not, and, while it is not in force, why (a warning in Status; an object of our
// name that is not ours is also a reason the fabric is not ready). Its own file because a filter that
// fails leaves the fabric running unfiltered, and saying so is this state's whole job.

import type { FabricSettings } from '../../../core/fabric-dataplane';
import type { Logger } from '../../../core/logger';
import type { Peer } from '../../../core/peer-source';
import type { NetlinkSocket } from '../../../lib/rtnetlink';
import { directSources, type DirectSources } from './direct-sources';
import type { Prepared } from './prepared-fabric';
import { FilterNotOursError, VxlanSourceFilter, nftRunner } from './vxlan-source-filter';

/** How often Status may make the source filter's counter be read again. */
const FILTER_COUNTER_MAX_AGE_MS = 1000;

export class SourceFilterSwitch {
  private readonly filter: VxlanSourceFilter;
  /** Why the source filter is not in force, while it is not. */
  off: string | undefined;
  /** Something with our names in our table is not ours: a reason the fabric is not ready. */
  refused: string | undefined;
  /** What the filter admits on hybrid's direct path, as last applied. */
  direct: DirectSources | undefined;

  constructor(
    opts: { nftCommand?: string; hostNetnsPath?: string },
    private readonly logger: Logger,
  ) {
    this.filter = new VxlanSourceFilter(
      nftRunner({ command: opts.nftCommand, netnsPath: opts.hostNetnsPath }),
    );
  }

  /** Packets dropped, as last read (a read is started when the last is old); undefined: unknown. */
  filtered(refresh: boolean): number | undefined {
    if (refresh) this.filter.refresh(FILTER_COUNTER_MAX_AGE_MS);
    return this.filter.filtered;
  }

  /** Waits for a counter read in flight. */
  settled(): Promise<void> {
    return this.filter.settled();
  }

  /**
   * Programs the source filter; a failure leaves the fabric unfiltered and is a warning, an object of
   * our name that is not ours a reason too.
   */
  async apply(sock: NetlinkSocket, prep: Prepared, peers: readonly Peer[]): Promise<void> {
    const port = prep.settings.port;
    this.refused = undefined;
    try {
      this.direct =
        prep.settings.mode === 'hybrid'
          ? await directSources(sock, prep.underlay, peers, prep.settings.clusterCidrs)
          : undefined;
      await this.filter.apply(port, peers, { vni: prep.settings.vni, direct: this.direct });
      if (this.off !== undefined) this.logger.info({}, 'VXLAN source filter in force');
      this.off = undefined;
    } catch (err) {
      const notOurs = err instanceof FilterNotOursError;
      if (notOurs) this.refused = err.message;
      const why =
        `VXLAN source filter off: ${(err as Error).message}; VXLAN packets are accepted from any source ` +
        `on UDP port ${port}` +
        (notOurs ? '' : ' (install nftables, or set fabric.sourceFilter to false)');
      if (why !== this.off) this.logger.warn({ err: (err as Error).message }, why);
      this.off = why;
    }
  }

  /**
   * No filter wanted (no VXLAN device in this mode, or fabric.sourceFilter off): our table goes, as
   * it would drop packets to the port for whatever listens there now. Only our own table is deleted.
   */
  async remove(settings: FabricSettings): Promise<void> {
    this.off = undefined;
    this.refused = undefined;
    this.direct = undefined;
    try {
      await this.filter.remove();
    } catch (err) {
      // Without nft there is no table of ours to remove either.
      this.logger.debug(
        { err: (err as Error).message, mode: settings.mode, sourceFilter: settings.sourceFilter },
        'VXLAN source filter not removed',
      );
    }
  }
}

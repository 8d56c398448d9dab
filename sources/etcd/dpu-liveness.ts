import type { Logger } from '../../core/logger';
import { monotonicMs } from '../../lib/monotonic-clock';

// Which of a node's DPUs (agent ids) still count as there, for the blocks claimed for each. A DPU is
// connected while its agent has a session (the backend says so, asked now and then); away once that
// ends; gone once unseen for the grace (dpu.goneGraceSeconds). A connected DPU is claimed blocks ahead
// of need and keeps a quarter block free; an away one keeps what it has (a DPU rebooting comes back
// within minutes and finds its block); a gone one gives back every block that is empty and is claimed
// nothing until it is seen again. A block with an address in use is never given back: that port may
// still be live (an agent out of reach is no evidence it is dead); its detach, or an operator's
// `workloadnet cluster release-node --dpu`, frees it.
//
// Seen means: connected when the backend was asked, newly listed among the node's endpoints, or named
// by an attach placed on it. What the daemon cannot tell ages nobody: until the backend has answered,
// and whenever it cannot, every DPU listed counts as connected and every one known as just seen, so a
// restart or a failing backend gives each DPU a fresh grace rather than taking its blocks.
//
// The node's DPU identities are bounded: a DPU that holds no block is refused one while MAX_DPUS
// others hold blocks (the incumbents keep theirs), so agent ids that keep changing cannot take the
// cluster's blocks faster than the grace gives them back.

/** dpu.goneGraceSeconds' default, in ms. */
export const GONE_GRACE_MS = 600_000;

/** DPU identities per node that may hold blocks at once: twice the DPUs the largest servers carry. */
export const MAX_DPUS = 16;

/** The DPU agent ids connected now, or undefined when that cannot be told. */
export type ConnectedDpus = () => Promise<ReadonlySet<string> | undefined>;

/** What the etcd pool source's options say of it. */
export interface DpuLivenessOptions {
  nodeName: string;
  /** dpu.goneGraceSeconds, in ms (default GONE_GRACE_MS). */
  goneGraceMs?: number;
  /** The backend's word; absent: every DPU listed counts as connected. */
  connectedDpus?: ConnectedDpus;
  logger: Logger;
}

export class DpuLiveness {
  private readonly lastSeen = new Map<string, number>();
  /**
   * As the backend last answered, with the DPUs seen since (listed anew, or placed a port on);
   * undefined until it has answered, or while it cannot tell.
   */
  private connectedNow?: Set<string>;
  /** The node's endpoints as last listed (EndpointPools.present). */
  private listedNow = new Set<string>();
  /** DPUs refused a first block by the bound, with the words said (Status, once in the log). */
  readonly refused = new Map<string, string>();

  constructor(private readonly opts: DpuLivenessOptions) {}

  /** The node's endpoints as last listed. */
  get listedIds(): ReadonlySet<string> {
    return this.listedNow;
  }

  /** The node's endpoints now: the new ones among them were seen just now. */
  listed(ids: readonly string[]): void {
    const now = monotonicMs();
    for (const id of ids)
      if (!this.listedNow.has(id)) {
        this.lastSeen.set(id, now);
        this.connectedNow?.add(id);
      }
    this.listedNow = new Set(ids);
  }

  /** Evidence `id` is there now (an attach placed on it, a block of it found at start). */
  seen(id: string): void {
    this.lastSeen.set(id, monotonicMs());
    this.connectedNow?.add(id);
  }

  /** Asks the backend which DPUs are connected; when it cannot tell, every known one was just seen. */
  async refresh(): Promise<void> {
    const now = monotonicMs();
    let connected: ReadonlySet<string> | undefined;
    try {
      connected = await this.opts.connectedDpus?.();
    } catch {
      connected = undefined;
    }
    this.connectedNow = connected && new Set(connected);
    if (connected === undefined) {
      for (const id of this.lastSeen.keys()) this.lastSeen.set(id, now);
      for (const id of this.listedNow) this.lastSeen.set(id, now);
      return;
    }
    for (const id of connected) this.lastSeen.set(id, now);
    // A refused DPU that left is no longer waiting for a place: Status stops naming it.
    for (const id of this.refused.keys()) if (!connected.has(id)) this.refused.delete(id);
  }

  /** Whether `id` is connected: as the backend said, or, when it cannot tell, listed. */
  isConnected(id: string): boolean {
    return this.connectedNow ? this.connectedNow.has(id) : this.listedNow.has(id);
  }

  /** Unseen for the grace: its empty blocks go back, none are claimed for it. */
  isGone(id: string): boolean {
    if (this.isConnected(id)) return false;
    const at = this.lastSeen.get(id);
    if (at === undefined) {
      // Known from a block only (e.g. adopted from etcd): the grace starts now.
      this.lastSeen.set(id, monotonicMs());
      return false;
    }
    return monotonicMs() - at >= (this.opts.goneGraceMs ?? GONE_GRACE_MS);
  }

  /** A gone DPU's empty block went back; once it holds none, it is not remembered. */
  released(block: string, id: string, holdsMore: boolean): void {
    const at = this.lastSeen.get(id);
    const unseenSeconds = at === undefined ? 0 : Math.round((monotonicMs() - at) / 1000);
    this.opts.logger.info(
      { block, endpoint: id, unseenSeconds },
      'released an empty address block of a DPU unseen for dpu.goneGraceSeconds',
    );
    if (holdsMore) return;
    this.lastSeen.delete(id);
    this.refused.delete(id);
  }

  /**
   * Why `id` may not be claimed a first block while `holders` hold blocks (undefined: it may). The
   * words name the bound and what frees a place.
   */
  refusal(id: string, holders: ReadonlySet<string>): string | undefined {
    if (holders.has(id) || holders.size < MAX_DPUS) {
      this.refused.delete(id);
      return undefined;
    }
    const node = this.opts.nodeName;
    const why =
      `DPU ${id} of node ${node} is refused address blocks of its own: ${holders.size} DPUs of the node ` +
      `hold blocks already, the most one node may have (${MAX_DPUS}); a place frees when one of them is ` +
      'unseen for dpu.goneGraceSeconds with its blocks empty, or is released with ' +
      `\`workloadnet cluster release-node ${node} --dpu ID\``;
    if (!this.refused.has(id)) this.opts.logger.warn({ endpoint: id, holders: holders.size }, why);
    this.refused.set(id, why);
    return why;
  }
}

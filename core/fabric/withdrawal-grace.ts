import type { Peer } from './peer-source';

// A peer missing from its source is no evidence that it is dead: its lease may have lapsed while etcd
// was out of its reach, or a file was edited by mistake, and its pods may still be serving. So a peer
// that leaves the source stays in the table the dataplane is given for a grace period, and is removed
// only after it; a record that comes back within the grace cancels the withdrawal (and its own record
// wins). The grace lives here, in the core, so that every source and every dataplane gets it once.

export interface Withdrawal {
  peer: Peer;
  /** When it left the source (ms on the controller's clock). */
  since: number;
}

export class WithdrawalGrace {
  private last = new Map<string, Peer>();
  private readonly withdrawn = new Map<string, Withdrawal>();

  constructor(
    private readonly graceMs: number,
    private readonly now: () => number,
  ) {}

  /**
   * The table to program for the source's current one (a full list): the current peers, plus those
   * that left it less than the grace ago, by node name.
   */
  table(current: ReadonlyMap<string, Peer>): Peer[] {
    const t = this.now();
    for (const [name, peer] of this.last)
      if (!current.has(name) && !this.withdrawn.has(name)) this.withdrawn.set(name, { peer, since: t });
    for (const name of current.keys()) this.withdrawn.delete(name);
    for (const [name, w] of this.withdrawn) if (t - w.since >= this.graceMs) this.withdrawn.delete(name);
    this.last = new Map(current);
    return [...current.values(), ...[...this.withdrawn.values()].map((w) => w.peer)].sort((a, b) =>
      a.node < b.node ? -1 : a.node > b.node ? 1 : 0,
    );
  }

  /** Peers kept only by the grace now. */
  pending(): ReadonlyMap<string, Withdrawal> {
    return this.withdrawn;
  }

  /** When the next withdrawal falls due (ms on the clock), if any is pending. */
  nextDue(): number | undefined {
    let due: number | undefined;
    for (const w of this.withdrawn.values()) due = Math.min(due ?? Infinity, w.since + this.graceMs);
    return due;
  }
}

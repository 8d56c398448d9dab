import { parseCidr, type Cidr } from '../../lib/cidr';
import { cidrsOverlap } from '../ipam/address-space';
import type { Peer } from './peer-source';

// A peer missing from its source is no evidence that it is dead: its lease may have lapsed while etcd
// was out of its reach, or a file was edited by mistake, and its pods may still be serving. So a peer
// that leaves the source stays in the table the dataplane is given for a grace period, and is removed
// only after it; a record that comes back within the grace cancels the withdrawal (and its own record
// wins). The grace lives here, in the core, so that every source and every dataplane gets it once.
//
// The data path is the second witness: a peer that left its source and whose probes fail too (it
// answered them before, and no longer does) is dead by both accounts, and is withdrawn at once rather
// than after the grace; one whose probes still pass (a node cut from etcd only) waits the whole grace.
// A peer never answered (probes off, or nothing to answer on) waits the grace as well.
//
// When many peers leave at once, the source is more likely wrong than the cluster gone (a restored
// etcd backup without the leases, a prefix deleted by hand, a list filtered by mistake). As the
// Kubernetes node lifecycle controller slows evictions in a disrupted zone and stops them when the
// whole zone is down, withdrawals then slow down to one peer per grace period, and stop entirely while
// the source lists no peer at all but peers were programmed. Status says which, and why.

export interface Withdrawal {
  peer: Peer;
  /** When it left the source (ms on the controller's clock). */
  since: number;
}

export interface WithdrawalOptions {
  graceMs: number;
  /**
   * Share of the known peers (listed and withdrawing) above which withdrawals slow down to one per
   * grace period; 1 never slows them.
   */
  maxShare?: number;
}

/** Why withdrawals are slowed or stopped now. */
export interface Disruption {
  kind: 'slowed' | 'stopped';
  withdrawing: number;
  known: number;
  reason: string;
}

const DEFAULT_MAX_SHARE = 0.5;

export class WithdrawalGrace {
  private last = new Map<string, Peer>();
  private readonly withdrawn = new Map<string, Withdrawal>();
  private readonly graceMs: number;
  private readonly maxShare: number;
  /** When a withdrawal was last carried out while slowed. */
  private lastSlowRemoval?: number;
  private disrupted?: Disruption;
  private early: string[] = [];

  constructor(
    opts: WithdrawalOptions | number,
    private readonly now: () => number,
  ) {
    const o = typeof opts === 'number' ? { graceMs: opts } : opts;
    this.graceMs = o.graceMs;
    this.maxShare = o.maxShare ?? DEFAULT_MAX_SHARE;
  }

  /**
   * The peers programmed before this process started (the last table it applied, kept on disk): one
   * that the source no longer lists enters the grace at the first table, as if it had just left, so a
   * restart never removes a route without the grace.
   */
  seed(peers: readonly Peer[]): void {
    for (const p of peers) if (!this.last.has(p.node)) this.last.set(p.node, p);
  }

  /**
   * The table to program for the source's current one (a full list): the current peers, plus those
   * that left it and are still kept (within the grace, or held by a disruption), by node name. A kept
   * peer loses the prefixes that overlap one a listed peer announces now (a range given to a new
   * node): the listed owner wins.
   */
  table(current: ReadonlyMap<string, Peer>, failing: (node: string) => boolean = () => false): Peer[] {
    const t = this.now();
    // The last table is brought to this one in place, not copied: at 5,000 peers a new map per apply
    // was garbage that outlived several young-generation collections.
    this.last.forEach((peer, name) => {
      if (current.has(name)) return;
      if (!this.withdrawn.has(name)) this.withdrawn.set(name, { peer, since: t });
      this.last.delete(name);
    });
    current.forEach((peer, name) => {
      if (this.withdrawn.size > 0) this.withdrawn.delete(name);
      this.last.set(name, peer);
    });
    this.expire(current.size, t, failing);
    const kept = [...this.withdrawn.values()].map((w) => w.peer);
    const listed =
      kept.length > 0 ? [...current.values()].flatMap((p) => p.prefixes.map(cidrOrUndefined)) : [];
    const taken = listed.filter((c): c is Cidr => c !== undefined);
    return [...current.values(), ...kept.map((p) => withoutTaken(p, taken))].sort((a, b) =>
      a.node < b.node ? -1 : a.node > b.node ? 1 : 0,
    );
  }

  private expire(listed: number, t: number, failing: (node: string) => boolean): void {
    this.early = [];
    const due = [...this.withdrawn.entries()]
      .filter(([name, w]) => t - w.since >= this.graceMs || failing(name))
      .sort((a, b) => a[1].since - b[1].since);
    const withdrawing = this.withdrawn.size;
    const known = listed + withdrawing;
    this.disrupted = undefined;
    if (withdrawing === 0) return;
    if (listed === 0 && known > 1) {
      this.disrupted = {
        kind: 'stopped',
        withdrawing,
        known,
        reason: `the peer source lists no peer while ${withdrawing} were programmed: withdrawals are stopped until it lists peers again (a source that lost every node is more likely wrong than the cluster gone)`,
      };
      return;
    }
    // A grace of 0 is the operator's word that a peer leaving the source is gone: there is no grace
    // period to slow down to (one withdrawal per table instead would take 2,000 tables for 2,000 peers).
    if (this.graceMs > 0 && withdrawing > 1 && withdrawing > this.maxShare * known) {
      this.disrupted = {
        kind: 'slowed',
        withdrawing,
        known,
        reason: `${withdrawing} of ${known} peers left the peer source: withdrawals are slowed to one per grace period (${Math.round(this.graceMs / 1000)} s)`,
      };
      const [oldest] = due;
      if (oldest && (this.lastSlowRemoval === undefined || t - this.lastSlowRemoval >= this.graceMs)) {
        this.remove(oldest[0], t);
        this.lastSlowRemoval = t;
      }
      return;
    }
    for (const [name] of due) this.remove(name, t);
  }

  private remove(name: string, t: number): void {
    const w = this.withdrawn.get(name);
    if (w && t - w.since < this.graceMs) this.early.push(name);
    this.withdrawn.delete(name);
  }

  /** Peers the last table withdrew before their grace was over, their probes failing too. */
  withdrawnEarly(): readonly string[] {
    return this.early;
  }

  /** Peers kept only by the grace (or a disruption) now. */
  pending(): ReadonlyMap<string, Withdrawal> {
    return this.withdrawn;
  }

  /** Why withdrawals are slowed or stopped, as of the last table. */
  disruption(): Disruption | undefined {
    return this.disrupted;
  }

  /** When the next withdrawal falls due (ms on the clock), if any is pending and may be carried out. */
  nextDue(): number | undefined {
    if (this.disrupted?.kind === 'stopped') return undefined;
    let due: number | undefined;
    for (const w of this.withdrawn.values()) due = Math.min(due ?? Infinity, w.since + this.graceMs);
    if (due !== undefined && this.disrupted?.kind === 'slowed' && this.lastSlowRemoval !== undefined)
      due = Math.max(due, this.lastSlowRemoval + this.graceMs);
    return due;
  }
}

function cidrOrUndefined(text: string): Cidr | undefined {
  try {
    return parseCidr(text);
  } catch {
    return undefined;
  }
}

/** The peer without its prefixes (and its endpoints' prefixes) that overlap a taken one. */
function withoutTaken(peer: Peer, taken: readonly Cidr[]): Peer {
  const free = (text: string): boolean => {
    const c = cidrOrUndefined(text);
    return c === undefined || !taken.some((t) => cidrsOverlap(c, t));
  };
  if (peer.prefixes.every(free) && (peer.endpoints ?? []).every((e) => e.prefixes.every(free))) return peer;
  return {
    ...peer,
    prefixes: peer.prefixes.filter(free),
    ...(peer.endpoints
      ? { endpoints: peer.endpoints.map((e) => ({ ...e, prefixes: e.prefixes.filter(free) })) }
      : {}),
  };
}

import { parseCidr, type Cidr } from '../../lib/cidr';
import { cidrsOverlap } from '../address-space';
import type { Peer } from '../peer-source';

// A peer missing from its source is no evidence that it is dead: its lease may have lapsed while etcd
// was out of its reach, or a file was edited by mistake, and its pods may still be serving. So a peer
// that leaves the source stays in the table the dataplane is given for a grace period, and is removed
// only after it; a record that comes back within the grace cancels the withdrawal (and its own record
// wins). The grace lives here, in the core, so that every source and every dataplane gets it once.
//
// The data path is the second witness: a peer that left its source and whose probes fail too (it
// answered them before, and no longer does) is dead by both accounts, and is withdrawn at once rather
// than after the grace; one whose probes still pass (a node cut from etcd only) waits the whole grace.
// A peer never answered (probes off, or nothing to answer on) waits the grace as well — unless it never
// proved itself at all: a peer the dataplanes reached by no path (refused a claim another peer holds,
// or unreachable) programs nothing, and one probed again and again that never answered has never
// carried traffic. Either is withdrawn the moment it leaves: a forged record keeps nothing through the
// grace, and the incumbent it could not displace is never held back by it.
//
// Losing a prefix is a withdrawal like leaving: a listed peer whose record no longer has a prefix (an
// etcd block key deleted, a file entry edited) keeps it programmed for the grace, with its DPUs' slices
// of it, under the same slow-down; a listed peer that announces an overlapping prefix takes it at once.
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

/** A prefix a listed peer no longer announces, kept for the grace with its DPUs' slices of it. */
interface LostPrefix {
  since: number;
  /** Per endpoint id, its prefixes inside this one when it was lost. */
  slices: ReadonlyMap<string, readonly string[]>;
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

/** What the dataplanes know of a peer's data path, for withdrawing it before the grace. */
export interface Witness {
  /** It answered probes before and fails them now: dead by both accounts. */
  failing?: (node: string) => boolean;
  /** It never proved itself: reached by no path, or probed and never answered. */
  unproven?: (node: string) => boolean;
}

const DEFAULT_MAX_SHARE = 0.5;
const never = (): boolean => false;

export class WithdrawalGrace {
  private last = new Map<string, Peer>();
  private readonly withdrawn = new Map<string, Withdrawal>();
  /** Prefixes listed peers no longer announce, by node, then prefix. */
  private readonly lost = new Map<string, Map<string, LostPrefix>>();
  private readonly graceMs: number;
  private readonly maxShare: number;
  /** When a withdrawal was last carried out while slowed. */
  private lastSlowRemoval?: number;
  private disrupted?: Disruption;
  private early: string[] = [];
  private unproven: string[] = [];

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
   * that the source no longer lists enters the grace at the first table, as if it had just left (and
   * one that lists fewer prefixes keeps those), so a restart never removes a route without the grace.
   */
  seed(peers: readonly Peer[]): void {
    for (const p of peers) if (!this.last.has(p.node)) this.last.set(p.node, p);
  }

  /**
   * The table to program for the source's current one (a full list): the current peers with the
   * prefixes they lost and still keep, plus those that left it and are still kept (within the grace, or
   * held by a disruption), by node name. What is kept loses the prefixes that overlap one a listed peer
   * announces now (a range given to a new node): the listed owner wins.
   */
  table(current: ReadonlyMap<string, Peer>, witness: Witness | ((node: string) => boolean) = {}): Peer[] {
    const w = typeof witness === 'function' ? { failing: witness } : witness;
    const t = this.now();
    // The last table is brought to this one in place, not copied: a new map of every peer per apply is
    // garbage that lives long enough to survive young-generation collections (docs/benchmarks.md).
    this.last.forEach((peer, name) => {
      const now = current.get(name);
      if (now === peer) return;
      if (now !== undefined) {
        this.noteLost(name, peer, now, t);
        return;
      }
      if (!this.withdrawn.has(name)) this.withdrawn.set(name, { peer: this.withLost(peer, []), since: t });
      this.lost.delete(name);
      this.last.delete(name);
    });
    current.forEach((peer, name) => {
      if (this.withdrawn.size > 0) this.withdrawn.delete(name);
      this.last.set(name, peer);
    });
    this.expire(current, t, w);
    if (this.withdrawn.size === 0 && this.lost.size === 0) return [...current.values()].sort(byNode);
    const taken = [...current.values()].flatMap((p) => p.prefixes.map(cidrOrUndefined));
    const listed = taken.filter((c): c is Cidr => c !== undefined);
    const out: Peer[] = [];
    current.forEach((p, name) => out.push(this.lost.has(name) ? this.withLost(p, listed) : p));
    for (const w of this.withdrawn.values()) out.push(withoutTaken(w.peer, listed));
    return out.sort(byNode);
  }

  /** Prefixes `before` announced and `after` does not enter the grace; those announced again leave it. */
  private noteLost(name: string, before: Peer, after: Peer, t: number): void {
    const kept = this.lost.get(name) ?? new Map<string, LostPrefix>();
    const now = new Set(after.prefixes);
    for (const p of kept.keys()) if (now.has(p)) kept.delete(p);
    for (const p of before.prefixes) {
      if (now.has(p) || kept.has(p)) continue;
      const c = cidrOrUndefined(p);
      const slices = new Map<string, string[]>();
      for (const e of before.endpoints ?? []) {
        const inside = e.prefixes.filter((s) => {
          const x = cidrOrUndefined(s);
          return c !== undefined && x !== undefined && cidrsOverlap(c, x);
        });
        if (inside.length > 0) slices.set(e.id, inside);
      }
      kept.set(p, { since: t, slices });
    }
    if (kept.size === 0) this.lost.delete(name);
    else this.lost.set(name, kept);
  }

  /** The peer with the prefixes it lost and keeps (and its DPUs' slices of them), less what is taken. */
  private withLost(peer: Peer, taken: readonly Cidr[]): Peer {
    const kept = this.lost.get(peer.node);
    if (!kept || kept.size === 0) return peer;
    const free = (p: string): boolean => {
      const c = cidrOrUndefined(p);
      return c === undefined || !taken.some((x) => cidrsOverlap(c, x));
    };
    const back = [...kept.keys()].filter(free);
    if (back.length === 0) return peer;
    const slices = (id: string): string[] => back.flatMap((p) => kept.get(p)?.slices.get(id) ?? []);
    return {
      ...peer,
      prefixes: [...peer.prefixes, ...back],
      ...(peer.endpoints
        ? { endpoints: peer.endpoints.map((e) => ({ ...e, prefixes: [...e.prefixes, ...slices(e.id)] })) }
        : {}),
    };
  }

  private expire(current: ReadonlyMap<string, Peer>, t: number, w: Witness): void {
    this.early = [];
    this.unproven = [];
    const failing = w.failing ?? never;
    const unproven = w.unproven ?? never;
    // A peer that never proved itself keeps nothing: gone at once, whatever the disruption.
    for (const name of [...this.withdrawn.keys()]) if (unproven(name)) this.remove(name, t, 'unproven');
    for (const name of [...this.lost.keys()]) if (unproven(name)) this.lost.delete(name);
    // Units of withdrawal, oldest first: a peer that left, or the lost prefixes of a listed peer.
    const due: Array<{ name: string; since: number; lost?: string[] }> = [];
    for (const [name, x] of this.withdrawn)
      if (t - x.since >= this.graceMs || failing(name)) due.push({ name, since: x.since });
    for (const [name, kept] of this.lost) {
      const gone = [...kept].filter(([, l]) => t - l.since >= this.graceMs || failing(name));
      if (gone.length > 0)
        due.push({ name, since: Math.min(...gone.map(([, l]) => l.since)), lost: gone.map(([p]) => p) });
    }
    due.sort((a, b) => a.since - b.since);
    const withdrawing = this.withdrawn.size + this.lost.size;
    const known = current.size + this.withdrawn.size;
    this.disrupted = undefined;
    if (withdrawing === 0) return;
    let announcing = false;
    for (const p of current.values()) if ((announcing ||= p.prefixes.length > 0)) break;
    if (!announcing) {
      this.disrupted = {
        kind: 'stopped',
        withdrawing,
        known,
        reason: `the peer source lists ${current.size === 0 ? 'no peer' : 'no prefix of any peer'} while ${withdrawing} were programmed: withdrawals are stopped until it lists them again (a source that lost every node is more likely wrong than the cluster gone)`,
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
        reason: `${withdrawing} of ${known} peers left the peer source or lost prefixes: withdrawals are slowed to one per grace period (${Math.round(this.graceMs / 1000)} s)`,
      };
      const [oldest] = due;
      if (oldest && (this.lastSlowRemoval === undefined || t - this.lastSlowRemoval >= this.graceMs)) {
        this.carryOut(oldest, t);
        this.lastSlowRemoval = t;
      }
      return;
    }
    for (const d of due) this.carryOut(d, t);
  }

  private carryOut(d: { name: string; lost?: string[] }, t: number): void {
    if (!d.lost) return this.remove(d.name, t, 'failing');
    const kept = this.lost.get(d.name);
    for (const p of d.lost) kept?.delete(p);
    if (kept?.size === 0) this.lost.delete(d.name);
  }

  private remove(name: string, t: number, why: 'failing' | 'unproven'): void {
    const w = this.withdrawn.get(name);
    if (w && t - w.since < this.graceMs) (why === 'unproven' ? this.unproven : this.early).push(name);
    this.withdrawn.delete(name);
  }

  /** Peers the last table withdrew before their grace was over, their probes failing too. */
  withdrawnEarly(): readonly string[] {
    return this.early;
  }

  /** Peers the last table withdrew at once: they left, and had never proved themselves. */
  withdrawnUnproven(): readonly string[] {
    return this.unproven;
  }

  /** Peers kept only by the grace (or a disruption) now. */
  pending(): ReadonlyMap<string, Withdrawal> {
    return this.withdrawn;
  }

  /** Prefixes a listed peer lost and keeps for the grace now, by node: each with when it was lost. */
  keptPrefixes(node: string): ReadonlyMap<string, number> | undefined {
    const kept = this.lost.get(node);
    return kept && new Map([...kept].map(([p, l]) => [p, l.since]));
  }

  /** Whether any peer that left, or any prefix lost, is kept now. */
  get holding(): boolean {
    return this.withdrawn.size > 0 || this.lost.size > 0;
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
    for (const kept of this.lost.values())
      for (const l of kept.values()) due = Math.min(due ?? Infinity, l.since + this.graceMs);
    if (due !== undefined && this.disrupted?.kind === 'slowed' && this.lastSlowRemoval !== undefined)
      due = Math.max(due, this.lastSlowRemoval + this.graceMs);
    return due;
  }
}

const byNode = (a: Peer, b: Peer): number => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0);

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

// Pod traffic leaving the cluster, masqueraded to the node. A router upstream of the node knows no pod
// range, so a reply to a pod's own address never comes back: as flannel (--ip-masq), Calico
// (natOutgoing) and Cilium do by default, a packet from a pod range to a destination outside every
// cluster range leaves with the node's address. Pod to pod — on this node or another, directly or
// through the fabric — keeps its source address: the destination is inside a cluster range.
//
// Mechanism: an nftables table of our own, `table inet workloadnet_egress`, marked ours by its comment,
// holding interval sets of the pod ranges to masquerade and of the cluster ranges per family, a counter,
// and one nat postrouting chain:
//   ip saddr @pod4 ip daddr != @cluster4 counter name masqueraded masquerade
// - A table of our own, apart from the fabric's filter table: it exists whenever a network masquerades,
//   with or without a fabric, and is removed on its own.
// - One transaction declares the table (a no-op when it exists), flushes each set and fills it again
//   and rewrites the chain: the kernel switches from the old sets to the new at once, so a restart or a
//   change of ranges adopts the table with no moment where pod traffic leaves unmasqueraded, or where
//   pod-to-pod traffic is masqueraded.
// - `auto-merge`: a pod range always lies inside a cluster range, and ranges of several sources may
//   overlap; the kernel keeps one interval for each overlap instead of refusing the set.
// - Priority srcnat + 10, after kube-proxy's masquerade (srcnat): conntrack binds a connection's source
//   NAT once, so a packet kube-proxy already masqueraded is not ours to judge again, and both give the
//   node's address anyway.
// A table of that name without our comment is an operator's: it is refused in words, never replaced or
// deleted (DESIGN.md, "Trusting what others write").

import { parseCidr } from '../../lib/cidr';
import type { EgressDataplane, EgressRanges } from '../../core/backend';
import type { NftRunner } from './fabric/nft-runner';

export const EGRESS_TABLE = 'workloadnet_egress';
/** The comment that marks the table ours: only a table carrying it is adopted, changed or deleted. */
export const EGRESS_MARK = 'workloadnet: pod traffic leaving the cluster ranges, masqueraded to the node';
export const EGRESS_COUNTER = 'masqueraded';
const TABLE = `inet ${EGRESS_TABLE}`;

/** A table of our name that is not ours: left as it is, and the egress not masqueraded. */
export class ForeignEgressTableError extends Error {}

interface ByFamily {
  v4: string[];
  v6: string[];
}

/** Canonical prefixes per family, sorted, without repeats; throws a CidrError on a malformed one. */
function byFamily(ranges: readonly string[]): ByFamily {
  const v4 = new Set<string>();
  const v6 = new Set<string>();
  for (const r of ranges) {
    const c = parseCidr(r);
    (c.family === 4 ? v4 : v6).add(c.text);
  }
  return { v4: [...v4].sort(), v6: [...v6].sort() };
}

/** The one transaction that makes our table masquerade exactly `ranges`, and reads the counter. */
export function egressScript(ranges: EgressRanges): string {
  const pod = byFamily(ranges.pod);
  // Every pod range is a cluster range: pod to pod never leaves the cluster, whatever else is listed.
  const cluster = byFamily([...ranges.cluster, ...ranges.pod]);
  const elements = (set: string, list: string[]): string =>
    list.length === 0 ? '' : `add element ${TABLE} ${set} { ${list.join(', ')} }\n`;
  const set = (name: string, type: string): string =>
    `  set ${name} { type ${type}; flags interval; auto-merge; }\n`;
  return (
    `table ${TABLE} {\n` +
    `  comment ${JSON.stringify(EGRESS_MARK)}\n` +
    set('pod4', 'ipv4_addr') +
    set('pod6', 'ipv6_addr') +
    set('cluster4', 'ipv4_addr') +
    set('cluster6', 'ipv6_addr') +
    `  counter ${EGRESS_COUNTER} { }\n` +
    `  chain postrouting { type nat hook postrouting priority srcnat + 10; policy accept; }\n` +
    `}\n` +
    ['pod4', 'pod6', 'cluster4', 'cluster6'].map((s) => `flush set ${TABLE} ${s}\n`).join('') +
    elements('pod4', pod.v4) +
    elements('pod6', pod.v6) +
    elements('cluster4', cluster.v4) +
    elements('cluster6', cluster.v6) +
    `flush chain ${TABLE} postrouting\n` +
    `add rule ${TABLE} postrouting ip saddr @pod4 ip daddr != @cluster4 counter name ${EGRESS_COUNTER} masquerade\n` +
    `add rule ${TABLE} postrouting ip6 saddr @pod6 ip6 daddr != @cluster6 counter name ${EGRESS_COUNTER} masquerade\n` +
    COUNTER_READ
  );
}

const COUNTER_READ = `list counter ${TABLE} ${EGRESS_COUNTER}\n`;
/** What `applied` holds once our table was removed. */
const REMOVED = '';

/** A listing without what traffic changes in it: the counter's packets and bytes. */
function withoutCounts(listing: string): string {
  return listing.replace(/packets \d+ bytes \d+/g, '');
}

/** Packets counted, from nft's listing of our counter (or of the table that holds it). */
function parseCounter(out: string): number | undefined {
  const m = /packets (\d+) bytes \d+/.exec(out);
  return m?.[1] === undefined ? undefined : Number(m[1]);
}

/**
 * The egress masquerade of one host namespace: programs the table when the ranges change, and removes
 * it when no network masquerades any more. Failures are thrown to the caller, which reports them.
 */
export class EgressMasquerade implements EgressDataplane {
  /** Packets masqueraded, as last read; undefined while the table is not ours or not there. */
  masqueraded: number | undefined;
  /** The script last applied; REMOVED once the table was removed. */
  private applied?: string;
  /**
   * Our table as the kernel listed it right after the last apply, counters left out: a refresh lists
   * the table once and writes it again only when the listing differs (changed by hand, deleted, or
   * taken by someone else), instead of checking ownership and writing every time.
   */
  private listed?: string;
  /** A refresh asked for: compare the kernel's table with `listed` at the next apply. */
  private stale = false;
  /** Why the last apply failed, until one succeeds. */
  private failure?: string;

  constructor(private readonly nft: NftRunner) {}

  /**
   * Masquerades exactly `ranges`, in one transaction; with no pod range, removes our table. A no-op
   * when that is what was done last.
   */
  async apply(ranges: EgressRanges): Promise<void> {
    try {
      await this.program(ranges);
      this.failure = undefined;
    } catch (err) {
      this.failure = (err as Error).message;
      throw err;
    }
  }

  /** What Status shows of it (the backend's details): masquerading, or why not. */
  describe(): { egress?: string } {
    if (this.failure !== undefined) return { egress: `not masqueraded: ${this.failure}` };
    if (this.applied === undefined || this.applied === REMOVED) return {};
    return { egress: `masqueraded (table inet ${EGRESS_TABLE})` };
  }

  private async program(ranges: EgressRanges): Promise<void> {
    if (ranges.pod.length === 0) {
      if (this.applied === REMOVED) return;
      await this.remove();
      this.applied = REMOVED;
      return;
    }
    const script = egressScript(ranges);
    if (script === this.applied) {
      if (!this.stale) return;
      this.stale = false;
      const listing = await this.listing();
      if (listing !== undefined && this.listed !== undefined && withoutCounts(listing) === this.listed) {
        this.masqueraded = parseCounter(listing) ?? this.masqueraded;
        return;
      }
    }
    await this.refuseForeign();
    const out = await this.nft(script);
    this.applied = script;
    this.masqueraded = parseCounter(out) ?? this.masqueraded;
    const after = await this.listing();
    this.listed = after === undefined ? undefined : withoutCounts(after);
  }

  /** Deletes our table; leaves a foreign one of the same name alone (and says so). */
  async remove(): Promise<void> {
    this.applied = undefined;
    this.listed = undefined;
    this.masqueraded = undefined;
    if ((await this.owner()) !== 'ours') return;
    await this.nft(`delete table ${TABLE}\n`);
  }

  /** Reads the counter again (Status and metrics), while the table is ours. */
  async readCounter(): Promise<number | undefined> {
    if (this.applied === undefined || this.applied === REMOVED) return undefined;
    this.masqueraded = parseCounter(await this.nft(COUNTER_READ)) ?? this.masqueraded;
    return this.masqueraded;
  }

  /**
   * The next apply checks the kernel's table against what it applied, and programs it again when it
   * differs (drift repair): one listing when nothing changed.
   */
  invalidate(): void {
    this.stale = true;
  }

  private async refuseForeign(): Promise<void> {
    if ((await this.owner()) === 'foreign')
      throw new ForeignEgressTableError(
        `nftables table ${TABLE} exists but is not workloadnet's (it lacks the comment ` +
          `${JSON.stringify(EGRESS_MARK)}); pod traffic leaving the cluster is not masqueraded until ` +
          `that table is renamed or deleted (nft delete table ${TABLE}), or masquerade is turned off`,
      );
  }

  /** Whose the table of our name is, by its comment. */
  async owner(): Promise<'absent' | 'ours' | 'foreign'> {
    const listing = await this.listing();
    if (listing === undefined) return 'absent';
    return listing.includes(`comment ${JSON.stringify(EGRESS_MARK)}`) ? 'ours' : 'foreign';
  }

  /** The kernel's listing of the table of our name, whoever's it is; undefined when there is none. */
  private async listing(): Promise<string | undefined> {
    try {
      return await this.nft(`list table ${TABLE}\n`);
    } catch (err) {
      if (/No such file or directory/.test((err as Error).message)) return undefined;
      throw err;
    }
  }
}

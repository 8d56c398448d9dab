// The nft text of the VXLAN source filter (vxlan-source-filter.ts): the table's shape, the sets filled
// from the peer table, the rules, the removal and the counters' reading. Its own file because it is a
// pure function of its input (tested as text without a kernel), where the filter is the stateful
// caller that lists the table, decides whole or differential writes and runs nft.
//
// Mechanism: an nftables table of our own, `table inet workloadnet`, holding named sets, counters and
// base chains, every one with our mark as its comment (nft-ownership.ts: only what carries it is ours
// to rewrite or delete; an operator's chain in the table is kept, a foreign object with our name is
// refused). The rules, per family:
//   udp dport <port> ip saddr != @vxlan_peers4 counter name vxlan_filtered drop
//   udp dport <port> @ih,160,16 0x0800 ip saddr . @ih,272,32 != @vxlan_inner44 counter … drop
// Why nftables and this shape:
// - A table of our own is the one unit we can program without ever touching a foreign rule
//   (iptables-nft's tables, kube-proxy's, firewalld's live in theirs); a drop in any base chain is
//   final whatever other chains accept, so our chains need nothing of theirs. Removing the filter
//   deletes our objects, and the table only when nothing else is left in it.
// - One transaction (`nft -f -`) declares the table (a no-op when it exists, so the counters and the
//   hooks survive), writes the sets and rewrites the rules: the kernel switches from the old sets to
//   the new ones at once, so there is no moment without the filter and no moment where a peer in both
//   the old and the new table is missing. A set is flushed and filled whole at the first apply and at
//   least once a minute; between, only the elements that changed are deleted and added (the daemon
//   is the one writer of its table; a whole write puts right anything changed by hand).
// - The input hook sees only packets addressed to this host, where the VXLAN socket is; packets the
//   node merely forwards on the port are not ours to judge. Priority filter - 10: before the usual
//   filter chains, so the counter sees every forged packet even when a later chain drops it too.
// - tc (ingress u32 with an action drop) cannot be used here: the kernels we run on may lack the gact
//   action, and a u32 match per peer grows with the peer count, where a set lookup does not.
// - No maintained Node library speaks nf_tables netlink, and writing its batch protocol is far more
//   code than this; `nft` (Debian package nftables) is spawned only from the fabric's apply path (a
//   change of the peer table, the periodic pass), never from an attach.
// - The inner header is read from the outer packet at the input hook (raw payload `@ih`), where the
//   outer source is still known: after decapsulation, on wn-vxlan, nothing tells which peer sent it.
//   IP reassembles a fragmented outer packet before the input hook, and GRO merges only packets of one
//   inner flow, so the first inner header is every segment's.
//
// The same table keeps the outer VXLAN packets out of conntrack: two raw-priority chains (-300, before
// conntrack at -200) `notrack` what we send to a peer's port (output hook) and what a peer sends to
// ours (prerouting hook), counted in `vxlan_untracked`. Why: the VXLAN device encapsulates in the
// host namespace and the outer packet keeps the inner packet's skb mark, so kube-proxy's
// `-m mark --mark 0x4000/0x4000 -j MASQUERADE --random-fully` NATs the outer packet (kubernetes#88986,
// the stalled flows and 63-second delays); nat is a conntrack hook, so an untracked packet never
// meets any nat rule of any table. It also saves a conntrack entry per peer pair. It shares the
// filter's switch (`fabric.sourceFilter`) and its life: one transaction, one table to remove.
// No `fib daddr type local` on the prerouting rule: it would need nft_fib, and a node forwarding
// someone else's VXLAN from a peer on our port is not a case this fabric has.

import type { Peer } from '../../../core/peer-source';
import { canonicalAddress, familyOf, AF_INET } from '../../../lib/rtnetlink';
import type { Cidr } from '../../../lib/cidr';
import type { DirectSources } from './direct-sources';
import { OUR_MARK, type TableListing, type TableObject } from './nft-ownership';
import { rawRange, type InnerSources } from './vxlan-inner-sources';

export const FILTER_TABLE = 'workloadnet';
export const FILTER_FAMILY = 'inet';
export const PEER_SET_V4 = 'vxlan_peers4';
export const PEER_SET_V6 = 'vxlan_peers6';
export const FILTER_COUNTER = 'vxlan_filtered';
export const FILTER_CHAIN = 'vxlan_input';
export const UNTRACKED_COUNTER = 'vxlan_untracked';
export const NOTRACK_OUT_CHAIN = 'vxlan_notrack_out';
export const NOTRACK_IN_CHAIN = 'vxlan_notrack_in';
export const DIRECT_CHAIN = 'direct_input';
export const DIRECT_COUNTER = 'direct_filtered';

/** `inet workloadnet`, as nft names the table in a command. */
export const TABLE = `${FILTER_FAMILY} ${FILTER_TABLE}`;
const MARK = `comment "${OUR_MARK}";`;

/** Bit offsets in the UDP payload of a VXLAN packet (8-byte VXLAN header, then the inner Ethernet frame). */
const VNI = '@ih,32,24';
const INNER_ETHERTYPE = '@ih,160,16';
const INNER_SADDR = { 4: '@ih,272,32', 6: '@ih,240,128' } as const;
const ETHERTYPE = { 4: '0x0800', 6: '0x86dd' } as const;
const OUTER = { 4: 'ip', 6: 'ip6' } as const;

/** The set of (outer source . inner source) for an outer and an inner family. */
const innerSet = (outer: 4 | 6, inner: 4 | 6): string => `vxlan_inner${outer}${inner}`;
const FAMILIES = [4, 6] as const;

/** Everything of ours in the table, as `<kind> <name>` (what nft-ownership.ts compares). */
export const OUR_OBJECTS: readonly string[] = [
  `set ${PEER_SET_V4}`,
  `set ${PEER_SET_V6}`,
  ...FAMILIES.flatMap((o) => FAMILIES.map((i) => `set ${innerSet(o, i)}`)),
  ...FAMILIES.flatMap((f) => [`set direct_owners${f}`, `set direct_guarded${f}`, `set direct_open${f}`]),
  `counter ${FILTER_COUNTER}`,
  `counter ${UNTRACKED_COUNTER}`,
  `counter ${DIRECT_COUNTER}`,
  `chain ${FILTER_CHAIN}`,
  `chain ${NOTRACK_OUT_CHAIN}`,
  `chain ${NOTRACK_IN_CHAIN}`,
  `chain ${DIRECT_CHAIN}`,
];

/** What the filter admits: filled from the peer table (and, in hybrid, the uplink's neighbours). */
export interface FilterInput {
  port: number;
  /** Outer sources: every peer's and DPU's underlay address. */
  addresses: { v4: string[]; v6: string[] };
  /** Per outer source, the inner sources it may send. */
  inner: InnerSources;
  /** Our VNI; undefined: not checked. */
  vni?: number;
  /** The direct path of hybrid mode; undefined: not guarded. */
  direct?: DirectSources;
}

/** The underlay addresses of every peer and of every DPU endpoint of theirs, per family, sorted. */
export function peerAddresses(peers: readonly Peer[]): { v4: string[]; v6: string[] } {
  const v4 = new Set<string>();
  const v6 = new Set<string>();
  const add = (a: string): void => {
    try {
      const c = canonicalAddress(a);
      (familyOf(c) === AF_INET ? v4 : v6).add(c);
    } catch {
      // Not an address: the plan reports the peer; nothing to admit.
    }
  };
  for (const p of peers) {
    for (const a of p.underlay) add(a);
    for (const e of p.endpoints ?? []) add(e.underlay);
  }
  return { v4: [...v4].sort(), v6: [...v6].sort() };
}

const fam = (address: string): 4 | 6 => (address.includes(':') ? 6 : 4);
const ofFamily = (list: readonly Cidr[], f: 4 | 6): Cidr[] => list.filter((c) => c.family === f);

/** `add element` for a non-empty list; nothing for an empty one (nft refuses `{ }`). */
const elements = (set: string, list: readonly string[]): string =>
  list.length === 0 ? '' : `add element ${TABLE} ${set} { ${list.join(', ')} }\n`;

/** The set declarations, each created with our mark (a declaration never changes an existing one). */
function declarations(): string {
  const lines = [
    `  set ${PEER_SET_V4} { type ipv4_addr; ${MARK} }`,
    `  set ${PEER_SET_V6} { type ipv6_addr; ${MARK} }`,
  ];
  for (const o of FAMILIES)
    for (const i of FAMILIES)
      lines.push(
        `  set ${innerSet(o, i)} { typeof ${OUTER[o]} saddr . ${INNER_SADDR[i]}; flags interval; ${MARK} }`,
      );
  for (const f of FAMILIES) {
    const addr = f === 4 ? 'ipv4_addr' : 'ipv6_addr';
    lines.push(`  set direct_owners${f} { type ether_addr . ${addr}; flags interval; ${MARK} }`);
    lines.push(`  set direct_guarded${f} { type ${addr}; flags interval; ${MARK} }`);
    lines.push(`  set direct_open${f} { type ${addr}; flags interval; ${MARK} }`);
  }
  for (const c of [FILTER_COUNTER, UNTRACKED_COUNTER, DIRECT_COUNTER])
    lines.push(`  counter ${c} { ${MARK} }`);
  lines.push(
    `  chain ${FILTER_CHAIN} { type filter hook input priority filter - 10; policy accept; ${MARK} }`,
    `  chain ${NOTRACK_OUT_CHAIN} { type filter hook output priority raw; policy accept; ${MARK} }`,
    `  chain ${NOTRACK_IN_CHAIN} { type filter hook prerouting priority raw; policy accept; ${MARK} }`,
    // Before conntrack (and the notrack chain): a forged packet costs no conntrack entry.
    `  chain ${DIRECT_CHAIN} { type filter hook prerouting priority raw - 10; policy accept; ${MARK} }`,
  );
  return lines.join('\n');
}

/** Every set of ours with the elements it is to hold, as nft text. */
export function setContents(input: FilterInput): Map<string, string[]> {
  const out = new Map<string, string[]>();
  out.set(PEER_SET_V4, input.addresses.v4);
  out.set(PEER_SET_V6, input.addresses.v6);
  for (const o of FAMILIES)
    for (const i of FAMILIES) {
      const list: string[] = [];
      for (const [outer, cidrs] of input.inner)
        if (fam(outer) === o) for (const c of ofFamily(cidrs, i)) list.push(`${outer} . ${rawRange(c)}`);
      out.set(innerSet(o, i), list);
    }
  const d = input.direct;
  for (const f of FAMILIES) {
    const owners: string[] = [];
    for (const [mac, cidrs] of d?.owners ?? [])
      for (const c of ofFamily(cidrs, f)) owners.push(`${mac} . ${c.text}`);
    out.set(`direct_owners${f}`, owners);
    out.set(
      `direct_guarded${f}`,
      ofFamily(d?.guarded ?? [], f).map((c) => c.text),
    );
    out.set(
      `direct_open${f}`,
      ofFamily(d?.unresolved ?? [], f).map((c) => c.text),
    );
  }
  return out;
}

/**
 * The sets' new contents: a set whose present elements are known (`previous`, what the last apply
 * wrote) gets only the differences; any other is flushed and filled again. Both in the transaction.
 * Why differences: flushing and refilling a concatenated interval set costs nft hundreds of
 * milliseconds at 2,000 peers, adding or deleting a few elements a few.
 */
function contents(sets: ReadonlyMap<string, readonly string[]>, previous?: WrittenSets): string {
  let out = '';
  for (const [set, list] of sets) {
    const had = previous?.get(set);
    if (!had) {
      out += `flush set ${TABLE} ${set}\n` + elements(set, list);
      continue;
    }
    const now = new Set(list);
    const gone = [...had].filter((e) => !now.has(e));
    if (gone.length > 0) out += `delete element ${TABLE} ${set} { ${gone.join(', ')} }\n`;
    out += elements(
      set,
      list.filter((e) => !had.has(e)),
    );
  }
  return out;
}

/** What an apply wrote into each set. */
export type WrittenSets = ReadonlyMap<string, ReadonlySet<string>>;

function rules(input: FilterInput): string {
  const port = input.port;
  const drop = `counter name ${FILTER_COUNTER} drop`;
  const add = (chain: string, rule: string): string => `add rule ${TABLE} ${chain} ${rule}\n`;
  let out = `flush chain ${TABLE} ${FILTER_CHAIN}\n`;
  out += add(FILTER_CHAIN, `udp dport ${port} ip saddr != @${PEER_SET_V4} ${drop}`);
  out += add(FILTER_CHAIN, `udp dport ${port} ip6 saddr != @${PEER_SET_V6} ${drop}`);
  if (input.vni !== undefined) out += add(FILTER_CHAIN, `udp dport ${port} ${VNI} != ${input.vni} ${drop}`);
  out += add(
    FILTER_CHAIN,
    `udp dport ${port} ${INNER_ETHERTYPE} != { ${ETHERTYPE[4]}, ${ETHERTYPE[6]} } ${drop}`,
  );
  for (const o of FAMILIES)
    for (const i of FAMILIES)
      out += add(
        FILTER_CHAIN,
        `udp dport ${port} ${INNER_ETHERTYPE} ${ETHERTYPE[i]} ${OUTER[o]} saddr . ${INNER_SADDR[i]} != @${innerSet(o, i)} ${drop}`,
      );
  out += `flush chain ${TABLE} ${NOTRACK_OUT_CHAIN}\n`;
  for (const f of FAMILIES)
    out += add(
      NOTRACK_OUT_CHAIN,
      `udp dport ${port} ${OUTER[f]} daddr @vxlan_peers${f} counter name ${UNTRACKED_COUNTER} notrack`,
    );
  out += `flush chain ${TABLE} ${NOTRACK_IN_CHAIN}\n`;
  for (const f of FAMILIES)
    out += add(
      NOTRACK_IN_CHAIN,
      `udp dport ${port} ${OUTER[f]} saddr @vxlan_peers${f} counter name ${UNTRACKED_COUNTER} notrack`,
    );
  out += `flush chain ${TABLE} ${DIRECT_CHAIN}\n`;
  const d = input.direct;
  if (d)
    for (const f of FAMILIES)
      out += add(
        DIRECT_CHAIN,
        `iifname ${JSON.stringify(d.uplink)} ${OUTER[f]} saddr @direct_guarded${f} ${OUTER[f]} saddr != @direct_open${f} ` +
          `ether saddr . ${OUTER[f]} saddr != @direct_owners${f} counter name ${DIRECT_COUNTER} drop`,
      );
  return out;
}

/**
 * The one transaction that makes our table admit exactly `input`. `replace`: the previous version's
 * unmarked table is deleted first, in the same transaction (no moment without a filter); `previous`:
 * what the sets hold now, so that only the differences are written.
 */
export function filterScript(
  input: FilterInput,
  opts: { replace?: boolean; previous?: WrittenSets } = {},
): string {
  return (
    (opts.replace ? `delete table ${TABLE}\n` : '') +
    `table ${TABLE} {\n  ${MARK}\n${declarations()}\n}\n` +
    contents(setContents(input), opts.replace ? undefined : opts.previous) +
    rules(input)
  );
}

/** Reads our drop counters. */
export const COUNTER_READ = `list counter ${TABLE} ${FILTER_COUNTER}\nlist counter ${TABLE} ${DIRECT_COUNTER}\n`;
/** Lists the table (run with `-t`: without set elements). */
export const LIST = `list table ${TABLE}\n`;

/** Deletes what of the table is ours (chains first: their rules use the sets), and the table when nothing else is left. */
export function removeScript(r: { objects: readonly TableObject[]; table: boolean }): string {
  if (r.table) return `delete table ${TABLE}\n`;
  const order = ['chain', 'set', 'counter'];
  return [...r.objects]
    .sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind))
    .map((o) => `delete ${o.kind} ${TABLE} ${o.name}\n`)
    .join('');
}

/** Packets our drop counters hold in a listing of the table (their sum). */
export function countedIn(listing: TableListing | undefined): number | undefined {
  const ours = (listing?.objects ?? []).filter(
    (o) =>
      o.kind === 'counter' &&
      (o.name === FILTER_COUNTER || o.name === DIRECT_COUNTER) &&
      o.comment === OUR_MARK,
  );
  return ours.length === 0 ? undefined : ours.reduce((a, o) => a + (o.packets ?? 0), 0);
}

/** Packets counted, from nft's listing of our counters (their sum). */
export function parseCounter(out: string): number | undefined {
  const all = [...out.matchAll(/packets (\d+) bytes \d+/g)].map((m) => Number(m[1]));
  return all.length === 0 ? undefined : all.reduce((a, b) => a + b, 0);
}

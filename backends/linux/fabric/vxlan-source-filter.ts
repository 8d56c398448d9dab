// Who may send to our VXLAN port. The kernel's VXLAN device takes a packet from any source on its UDP
// port and delivers the inner frame into the pod network, so anyone on the underlay could inject
// traffic that appears to come from a remote pod. The filter drops every packet to the port whose
// source is not the underlay address of a current peer (a node's VTEP or one of its DPU endpoints),
// and counts it.
//
// Mechanism: an nftables table of our own, `table inet workloadnet`, holding one named set of peer
// addresses per family, a named counter, and one input-hook chain with a rule per family:
//   udp dport <port> ip saddr != @vxlan_peers4 counter name vxlan_filtered drop
// Why nftables and this shape:
// - A table of our own is the one unit we can replace, read and delete without ever touching a
//   foreign rule (iptables-nft's tables, kube-proxy's, firewalld's live in theirs); a drop in any base
//   chain is final whatever other chains accept, so our chain needs nothing of theirs.
// - One transaction (`nft -f -`) declares the table (a no-op when it exists, so the counter and the
//   hook survive), flushes each set and fills it again, and rewrites the rules: the kernel switches
//   from the old set to the new one at once, so there is no moment without the filter and no moment
//   where a peer in both the old and the new table is missing.
// - The input hook sees only packets addressed to this host, where the VXLAN socket is; packets the
//   node merely forwards on the port are not ours to judge. Priority filter - 10: before the usual
//   filter chains, so the counter sees every forged packet even when a later chain drops it too.
// - tc (ingress u32 with an action drop) cannot be used here: the kernels we run on may lack the gact
//   action, and a u32 match per peer grows with the peer count, where a set lookup does not.
// - No maintained Node library speaks nf_tables netlink, and writing its batch protocol is far more
//   code than this; `nft` (Debian package nftables) is spawned only from the fabric's apply path (a
//   change of the peer table, the periodic pass), never from an attach.
// Without `nft` or without nf_tables in the kernel the fabric still works, unfiltered, and says so.
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

import { spawn } from 'node:child_process';
import { canonicalAddress, familyOf, AF_INET } from '../../../lib/rtnetlink';
import type { Peer } from '../../../core/fabric/peer-source';

export const FILTER_TABLE = 'workloadnet';
export const FILTER_FAMILY = 'inet';
export const PEER_SET_V4 = 'vxlan_peers4';
export const PEER_SET_V6 = 'vxlan_peers6';
export const FILTER_COUNTER = 'vxlan_filtered';
export const FILTER_CHAIN = 'vxlan_input';
export const UNTRACKED_COUNTER = 'vxlan_untracked';
export const NOTRACK_OUT_CHAIN = 'vxlan_notrack_out';
export const NOTRACK_IN_CHAIN = 'vxlan_notrack_in';

const TABLE = `${FILTER_FAMILY} ${FILTER_TABLE}`;

/** How nft is run: the command, and the namespace to run it in (a path; empty: our own). */
export interface NftRunnerOptions {
  /** The nft binary (default `nft`, found on PATH). */
  command?: string;
  netnsPath?: string;
}

/** Runs one nft script (read from stdin) and returns what nft printed. */
export type NftRunner = (script: string) => Promise<string>;

export class NftError extends Error {}

/** nft, in the given namespace (through nsenter, as a spawned child cannot be moved by setns). */
export function nftRunner(opts: NftRunnerOptions = {}): NftRunner {
  const nft = opts.command ?? 'nft';
  const [file, args] =
    opts.netnsPath === undefined || opts.netnsPath === ''
      ? [nft, ['-f', '-']]
      : ['nsenter', [`--net=${opts.netnsPath}`, '--', nft, '-f', '-']];
  return (script) =>
    new Promise((resolve, reject) => {
      const child = spawn(file, args, { stdio: ['pipe', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
      child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
      child.on('error', (e: NodeJS.ErrnoException) =>
        reject(
          new NftError(
            e.code === 'ENOENT'
              ? `${file} is not installed (Debian package ${file === 'nsenter' ? 'util-linux' : 'nftables'})`
              : `${file}: ${e.message}`,
          ),
        ),
      );
      child.on('close', (code) => {
        if (code === 0) resolve(out);
        else {
          const text = err.trim().split('\n').slice(0, 3).join(' ') || `exit code ${String(code)}`;
          // nsenter names the program it could not run; say it as plainly as a missing nft.
          if (/nsenter: failed to execute .*No such file/.test(text))
            reject(new NftError(`${nft} is not installed (Debian package nftables)`));
          else reject(new NftError(`nft: ${text}`));
        }
      });
      child.stdin.on('error', () => undefined);
      child.stdin.end(script);
    });
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

/** The one transaction that makes our table admit exactly `addresses` to `port`, and reads the counter. */
export function filterScript(port: number, addresses: { v4: string[]; v6: string[] }): string {
  const elements = (set: string, list: string[]): string =>
    list.length === 0 ? '' : `add element ${TABLE} ${set} { ${list.join(', ')} }\n`;
  return (
    `table ${TABLE} {\n` +
    `  set ${PEER_SET_V4} { type ipv4_addr; }\n` +
    `  set ${PEER_SET_V6} { type ipv6_addr; }\n` +
    `  counter ${FILTER_COUNTER} { }\n` +
    `  counter ${UNTRACKED_COUNTER} { }\n` +
    `  chain ${FILTER_CHAIN} { type filter hook input priority filter - 10; policy accept; }\n` +
    `  chain ${NOTRACK_OUT_CHAIN} { type filter hook output priority raw; policy accept; }\n` +
    `  chain ${NOTRACK_IN_CHAIN} { type filter hook prerouting priority raw; policy accept; }\n` +
    `}\n` +
    `flush set ${TABLE} ${PEER_SET_V4}\n` +
    `flush set ${TABLE} ${PEER_SET_V6}\n` +
    elements(PEER_SET_V4, addresses.v4) +
    elements(PEER_SET_V6, addresses.v6) +
    `flush chain ${TABLE} ${FILTER_CHAIN}\n` +
    `add rule ${TABLE} ${FILTER_CHAIN} udp dport ${port} ip saddr != @${PEER_SET_V4} counter name ${FILTER_COUNTER} drop\n` +
    `add rule ${TABLE} ${FILTER_CHAIN} udp dport ${port} ip6 saddr != @${PEER_SET_V6} counter name ${FILTER_COUNTER} drop\n` +
    `flush chain ${TABLE} ${NOTRACK_OUT_CHAIN}\n` +
    `add rule ${TABLE} ${NOTRACK_OUT_CHAIN} udp dport ${port} ip daddr @${PEER_SET_V4} counter name ${UNTRACKED_COUNTER} notrack\n` +
    `add rule ${TABLE} ${NOTRACK_OUT_CHAIN} udp dport ${port} ip6 daddr @${PEER_SET_V6} counter name ${UNTRACKED_COUNTER} notrack\n` +
    `flush chain ${TABLE} ${NOTRACK_IN_CHAIN}\n` +
    `add rule ${TABLE} ${NOTRACK_IN_CHAIN} udp dport ${port} ip saddr @${PEER_SET_V4} counter name ${UNTRACKED_COUNTER} notrack\n` +
    `add rule ${TABLE} ${NOTRACK_IN_CHAIN} udp dport ${port} ip6 saddr @${PEER_SET_V6} counter name ${UNTRACKED_COUNTER} notrack\n` +
    COUNTER_READ
  );
}

const COUNTER_READ = `list counter ${TABLE} ${FILTER_COUNTER}\n`;

/** Removes our table when it is there (declared first, so the delete never fails on its absence). */
export const REMOVE_SCRIPT = `table ${TABLE} {}\ndelete table ${TABLE}\n`;

/** Packets counted, from nft's listing of our counter. */
export function parseCounter(out: string): number | undefined {
  const m = /packets (\d+) bytes \d+/.exec(out);
  return m?.[1] === undefined ? undefined : Number(m[1]);
}

/**
 * The filter of one host namespace: programs it on every apply, reads its counter, removes it when
 * the fabric runs no VXLAN device or the operator turned it off. Failures are the caller's warning.
 */
export class VxlanSourceFilter {
  /** The counter as last read; undefined until it was (or while the filter is off). */
  filtered: number | undefined;
  private reading: Promise<void> | undefined;
  private readAt = 0;

  constructor(private readonly nft: NftRunner) {}

  /** Admits exactly these peers' addresses on `port`, in one transaction, and reads the counter. */
  async apply(port: number, peers: readonly Peer[]): Promise<void> {
    const out = await this.nft(filterScript(port, peerAddresses(peers)));
    this.filtered = parseCounter(out) ?? this.filtered;
    this.readAt = Date.now();
  }

  /** Deletes our table (and with it the counter). */
  async remove(): Promise<void> {
    await this.nft(REMOVE_SCRIPT);
    this.filtered = undefined;
  }

  /**
   * Reads the counter again in the background when the last read is older than `maxAgeMs`: Status
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

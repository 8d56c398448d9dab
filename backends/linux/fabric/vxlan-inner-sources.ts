// Which inner source addresses each tunnel endpoint may send us over VXLAN: a packet from a peer's
// underlay address may carry only sources of that peer's own prefixes (and its underlay addresses, the
// source its host uses before its gateway key is on its device); a packet from one of its DPUs, only
// sources of the slices (and borrowed /32) that DPU holds inside the peer's prefixes. Anyone who can
// send from a peer's underlay address (a spoofed outer source is one raw socket away on a shared
// underlay) can then speak only as that peer's pods, never as another node's or as our own.
//
// nft 1.0.6 has no `vxlan ip saddr` (1.0.7 has), so the filter reads the inner header as raw payload
// from the start of the UDP payload (`@ih`): a set of (outer source . inner source range), where the
// inner part is an integer range, as a raw payload's type is an integer. Ranges that nest under one
// outer address are merged here: a concatenated interval set refuses overlapping elements.

import { familyBits, formatAddress, parseCidr, type Cidr } from '../../../lib/cidr';
import type { Peer } from '../../../core/peer-source';

/** Per outer (underlay) address, the CIDRs its inner packets may come from. */
export type InnerSources = Map<string, Cidr[]>;

function cidr(text: string): Cidr | undefined {
  try {
    return parseCidr(text.includes('/') ? text : `${text}/${text.includes(':') ? 128 : 32}`);
  } catch {
    return undefined; // not a prefix: the plan names it; nothing to admit
  }
}

const contains = (outer: Cidr, inner: Cidr): boolean =>
  outer.family === inner.family &&
  outer.prefixLength <= inner.prefixLength &&
  inner.network >> BigInt(familyBits(outer.family) - outer.prefixLength) ===
    outer.network >> BigInt(familyBits(outer.family) - outer.prefixLength);

/** The CIDRs none of the others contains, once each, in family and address order. */
export function outermost(list: readonly Cidr[]): Cidr[] {
  const sorted = [...list].sort(
    (a, b) =>
      a.family - b.family ||
      (a.network < b.network ? -1 : a.network > b.network ? 1 : a.prefixLength - b.prefixLength),
  );
  const out: Cidr[] = [];
  for (const c of sorted) {
    const last = out[out.length - 1];
    if (last && contains(last, c)) continue;
    out.push(c);
  }
  return out;
}

export function innerSources(peers: readonly Peer[]): InnerSources {
  const raw = new Map<string, Cidr[]>();
  const add = (outer: string, inner: Cidr[]): void => {
    const o = cidr(outer);
    if (!o || o.prefixLength !== familyBits(o.family)) return;
    const key = formatAddress(o.family, o.network);
    raw.set(key, [...(raw.get(key) ?? []), ...inner]);
  };
  for (const p of peers) {
    const own = p.prefixes.map(cidr).filter((c): c is Cidr => c !== undefined);
    const underlay = p.underlay.map(cidr).filter((c): c is Cidr => c !== undefined);
    for (const u of p.underlay) add(u, [...own, ...underlay]);
    for (const e of p.endpoints ?? []) {
      const slices = e.prefixes
        .map(cidr)
        .filter((c): c is Cidr => c !== undefined && own.some((o) => contains(o, c)));
      add(e.underlay, slices);
    }
  }
  const out: InnerSources = new Map();
  for (const [outer, list] of [...raw].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const merged = outermost(list);
    if (merged.length > 0) out.set(outer, merged);
  }
  return out;
}

/** A CIDR as the integer range nft compares a raw payload field with (`0x0af40300-0x0af403ff`). */
export function rawRange(c: Cidr): string {
  const bits = familyBits(c.family);
  const last = c.network | ((1n << BigInt(bits - c.prefixLength)) - 1n);
  const hex = (v: bigint): string => `0x${v.toString(16).padStart(bits / 4, '0')}`;
  return `${hex(c.network)}-${hex(last)}`;
}

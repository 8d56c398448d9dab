import { cidrContains, familyBits, formatAddress, type Cidr } from '../../../lib/cidr';

// What of a peer's prefix its endpoints' slices leave to the peer itself (plan/peer-targets.ts): the whole
// prefix is routed to the peer, and its gateway key must lie in what no slice covers.

/** Whether `inner` lies inside `outer` (or equals it). */
export const inside = (inner: Cidr, outer: Cidr): boolean =>
  inner.family === outer.family &&
  outer.prefixLength <= inner.prefixLength &&
  cidrContains(outer, inner.network);

/** What of `outer` none of `inners` (each inside it) covers, as CIDRs in address order. */
export function remainder(outer: Cidr, inners: readonly Cidr[]): Cidr[] {
  if (inners.some((i) => inside(outer, i))) return [];
  const within = inners.filter((i) => inside(i, outer));
  if (within.length === 0) return [outer];
  const length = outer.prefixLength + 1;
  const half = 1n << BigInt(familyBits(outer.family) - length);
  const halves = [outer.network, outer.network + half].map((network) => {
    const text = `${formatAddress(outer.family, network)}/${length}`;
    return { family: outer.family, network, prefixLength: length, text };
  });
  return halves.flatMap((h) => remainder(h, within));
}

/** Family first, then address: the order etcd and Kubernetes list a node's prefixes in. */
export function byAddress(a: Cidr, b: Cidr): number {
  return a.family - b.family || (a.network < b.network ? -1 : a.network > b.network ? 1 : 0);
}

import { familyBits, formatAddress, parseCidr, type Cidr } from '../../lib/cidr';

// How a node's pod range is cut into slices, one per tunnel endpoint (DPU) of the node: other nodes
// then route each slice to the DPU that holds its pods, one route per slice and never one per pod.
// Slices are equal, aligned sub-ranges (a power of two of them), so each is one CIDR. Only what a pool
// hands out is cut: an IPv6 range larger than the pool's tracked window (its first 2^20 addresses,
// ip-pool.ts) is cut inside that window, since a slice past it could never give an address out.

/** An IPv6 pool tracks (hands out) only its first 2^this addresses (ip-pool.ts IPV6_POOL_WINDOW). */
export const IPV6_TRACKED_BITS = 20;

/** A slice holds at least this many addresses; a range that would give smaller ones stays whole. */
export const MIN_SLICE_ADDRESSES = 4;

/** A range as cut: its slices in index order (one, the range itself, when it stays whole). */
export interface RangeCut {
  /** Slice CIDRs, canonical text; slice i belongs to the endpoint holding index i. */
  slices: string[];
  /** Addresses per slice (offsets from the range's network address). */
  size: number;
}

/**
 * Cuts a pool range into `count` equal slices (a power of two), or keeps it whole when the slices
 * would hold fewer than MIN_SLICE_ADDRESSES addresses or `count` is 1.
 */
export function cutRange(range: string | Cidr, count: number): RangeCut {
  const cidr = typeof range === 'string' ? parseCidr(range) : range;
  const bits = familyBits(cidr.family);
  const hostBits = bits - cidr.prefixLength;
  // What the pool tracks: the whole range, or the first 2^20 addresses of a large IPv6 one.
  const spanBits = cidr.family === 6 && hostBits > IPV6_TRACKED_BITS ? IPV6_TRACKED_BITS : hostBits;
  const sliceBits = Math.log2(count);
  const whole = { slices: [cidr.text], size: 2 ** Math.min(spanBits, 52) };
  if (count <= 1 || spanBits - sliceBits < Math.log2(MIN_SLICE_ADDRESSES)) return whole;
  const slicePrefix = bits - spanBits + sliceBits;
  const size = 2 ** (spanBits - sliceBits);
  const slices: string[] = [];
  for (let i = 0; i < count; i++)
    slices.push(`${formatAddress(cidr.family, cidr.network + BigInt(i) * BigInt(size))}/${slicePrefix}`);
  return { slices, size };
}

/** The /32 (/128) of one address: how a borrowed address is announced. */
export function hostPrefix(address: string): string {
  return address.includes(':') ? `${address}/128` : `${address}/32`;
}

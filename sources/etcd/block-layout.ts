import { cidrContains, familyBits, formatAddress, parseCidr, type Cidr } from '../../lib/cidr';
import { invalidArgument } from '../../core/errors';

// How a cluster CIDR is cut into fixed-size blocks: block i starts at network + i * blockSize. Blocks
// are named by their CIDR text. Nothing here enumerates all blocks: an IPv6 /64 has 2^58 of them.

export interface BlockLayout {
  cluster: Cidr;
  family: 4 | 6;
  /** Prefix length of one block. */
  blockPrefix: number;
  /** Number of blocks in the cluster CIDR. */
  count: bigint;
  /** Addresses per block. */
  blockAddresses: number;
}

/** IPv6 blocks hold as many addresses as IPv4 ones: /26 ↔ /122. */
export const blockPrefixFor = (family: 4 | 6, v4BlockPrefix: number): number =>
  family === 4 ? v4BlockPrefix : 96 + v4BlockPrefix;

export function blockLayout(clusterCidr: string, v4BlockPrefix: number): BlockLayout {
  const cluster = parseCidr(clusterCidr);
  const blockPrefix = blockPrefixFor(cluster.family, v4BlockPrefix);
  if (cluster.prefixLength > blockPrefix) {
    throw invalidArgument(`cluster CIDR ${cluster.text} is smaller than one /${blockPrefix} block`);
  }
  return {
    cluster,
    family: cluster.family,
    blockPrefix,
    count: 1n << BigInt(blockPrefix - cluster.prefixLength),
    blockAddresses: 2 ** (familyBits(cluster.family) - blockPrefix),
  };
}

/** The CIDR text of block `index` (0 ≤ index < count). */
export function blockAt(layout: BlockLayout, index: bigint): string {
  const hostBits = BigInt(familyBits(layout.family) - layout.blockPrefix);
  const network = layout.cluster.network + (index << hostBits);
  return `${formatAddress(layout.family, network)}/${layout.blockPrefix}`;
}

/** Index of a block CIDR in the layout, or undefined when it is not one of its blocks. */
export function blockIndex(layout: BlockLayout, block: string): bigint | undefined {
  let c: Cidr;
  try {
    c = parseCidr(block);
  } catch {
    return undefined;
  }
  if (c.family !== layout.family || c.prefixLength !== layout.blockPrefix) return undefined;
  if (!cidrContains(layout.cluster, c.network)) return undefined;
  const hostBits = BigInt(familyBits(layout.family) - layout.blockPrefix);
  return (c.network - layout.cluster.network) >> hostBits;
}

/**
 * Addresses of a block that are never handed out: the cluster range's own network address (and for
 * IPv4 its broadcast), which fall in its first and last blocks. Every other address of a block is
 * usable, since the workloads' gateway is link-local.
 */
export function reservedInBlock(layout: BlockLayout, block: string): string[] {
  const c = parseCidr(block);
  const out: string[] = [];
  if (c.network === layout.cluster.network) out.push(formatAddress(layout.family, c.network));
  if (layout.family === 4) {
    const last = layout.cluster.network + (1n << BigInt(32 - layout.cluster.prefixLength)) - 1n;
    if (cidrContains(c, last)) out.push(formatAddress(4, last));
  }
  return out;
}

/**
 * Where a node starts looking for a free block: a hash of its name, so nodes claiming at the same time
 * mostly try different blocks instead of racing for block 0 (FNV-1a, 64 bits).
 */
export function startIndex(layout: BlockLayout, node: string): bigint {
  let h = 0xcbf29ce484222325n;
  for (const byte of Buffer.from(node, 'utf8')) {
    h ^= BigInt(byte);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return h % layout.count;
}

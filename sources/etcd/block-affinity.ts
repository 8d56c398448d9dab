// Which prefixes each DPU endpoint of a peer gets, as etcd's block keys say: the blocks whose key names
// the DPU first, then what its record adds where no other DPU's block lies. Its own file because it is
// the rule that keeps one DPU's record from taking another DPU's block, apart from reading the keys.

import type { TunnelEndpoint } from '../../core/peer-source';
import { cidrContains, parseCidr, type Cidr } from '../../lib/cidr';

/** A block key routed to its node (and to one of its DPUs when the key names one). */
export interface Block {
  text: string;
  family: 4 | 6;
  network: bigint;
  prefixLength: number;
  /** The DPU of its node the key names; absent: the node's own block. */
  endpoint?: string;
}

/**
 * The endpoints with their prefixes as block affinity says: each gets the blocks whose key names it
 * (first, in block order); a prefix its record adds is kept when it lies in none of the node's DPU
 * blocks (a slice of a node block) or is one address (a borrowed /32 or /128, routed by longest match
 * whichever block holds it), and dropped, with a line in `rejected`, when it overlaps a block whose
 * key names another DPU.
 */
export function byAffinity(
  node: string,
  endpoints: readonly TunnelEndpoint[],
  owned: readonly Block[],
  rejected: string[],
): TunnelEndpoint[] {
  const dpuBlocks = owned.filter((b) => b.endpoint !== undefined);
  return endpoints.map((e) => {
    const mine = sortBlocks(dpuBlocks.filter((b) => b.endpoint === e.id));
    const seen = new Set(mine);
    const added = e.prefixes.filter((p) => {
      if (seen.has(p)) return false;
      const c = parseCidr(p);
      if (c.prefixLength === (c.family === 4 ? 32 : 128)) return true;
      const other = dpuBlocks.find((b) => b.endpoint !== e.id && overlaps(b, c));
      if (other === undefined) return true;
      rejected.push(
        `node ${node}: endpoint ${e.id} claims ${p}, but block ${other.text} is DPU ${other.endpoint}'s in etcd; prefix ignored`,
      );
      return false;
    });
    return { ...e, prefixes: [...mine, ...added] };
  });
}

function overlaps(b: Block, c: Cidr): boolean {
  if (b.family !== c.family) return false;
  return b.prefixLength <= c.prefixLength
    ? cidrContains(parseCidr(b.text), c.network)
    : cidrContains(c, b.network);
}

export function sortBlocks(blocks: Block[]): string[] {
  return blocks
    .sort((a, b) => a.family - b.family || (a.network < b.network ? -1 : a.network > b.network ? 1 : 0))
    .map((b) => b.text);
}

import { cidrContains, parseCidr, type Cidr } from '../lib/cidr';
import { invalidArgument, type WorkloadNetError } from './errors';

// Every pool of every network on the node, in one place. Two networks whose pools overlap hand the same
// address to two workloads, and the second host route to it replaces the first; the configuration
// refuses the overlaps it can see, but a pool source supplies ranges only at run time (a Node's
// podCIDRs), so each network's allocator records its pools here and a pool that overlaps another
// network's is never added. Overlaps inside one network are the allocator's own business.

interface NetworkPool {
  network: string;
  cidr: Cidr;
}

export class AddressSpace {
  private readonly pools: NetworkPool[] = [];

  /** The other network's pool that `cidr` would overlap as a pool of `network`, described; else undefined. */
  conflict(network: string, cidr: string): string | undefined {
    const c = parseCidr(cidr);
    const other = this.pools.find((p) => p.network !== network && cidrsOverlap(p.cidr, c));
    return other && `pool ${other.cidr.text} of network "${other.network}"`;
  }

  /** Records a pool of `network`. Throws INVALID_ARGUMENT, naming both networks, on an overlap. */
  add(network: string, cidr: string): void {
    const other = this.conflict(network, cidr);
    if (other) throw overlapError(network, cidr, other);
    this.pools.push({ network, cidr: parseCidr(cidr) });
  }

  remove(network: string, cidr: string): void {
    const text = parseCidr(cidr).text;
    const i = this.pools.findIndex((p) => p.network === network && p.cidr.text === text);
    if (i >= 0) this.pools.splice(i, 1);
  }
}

export function overlapError(network: string, cidr: string, other: string): WorkloadNetError {
  return invalidArgument(
    `IP pool ${parseCidr(cidr).text} of network "${network}" overlaps ${other}; an address may belong to one network only`,
  );
}

/** Whether two ranges share an address. */
export function cidrsOverlap(a: Cidr, b: Cidr): boolean {
  return a.family === b.family && (cidrContains(a, b.network) || cidrContains(b, a.network));
}

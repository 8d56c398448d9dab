// Gateway keys: the address a target's routes go `via` over VXLAN, mapped to its VTEP MAC by a
// permanent neighbour. It is never an address a pod holds on the peer (flannel uses the .0 of the
// peer's subnet), and no two targets share one: per family the first address of the first of what
// the target serves (a peer's lowest prefix, an endpoint's first slice) that no other target uses, or
// the tunnel address the peer publishes (Vtep.gateways, core/fabric/tunnel-addresses.ts) when it lies in
// what of its own prefixes no endpoint covers, as Calico's VXLAN tunnel address. Each
// node puts its own keys on its device (ownGatewayKeys, gateway-address.ts), so the peer's kernel
// answers the data-path probes and traffic the node sends to a remote pod has a source routed back.

import type { RefusedClaim } from '../../../../core/fabric-dataplane';
import type { Vtep } from '../../../../core/peer-source';
import { formatAddress, parseCidr, type Cidr } from '../../../../lib/cidr';
import { AF_INET, AF_INET6, canonicalAddress, type AddressFamily } from '../../../../lib/rtnetlink';
import type { Claims } from '../identity-claims';
import { byAddress, inside, remainder } from '../prefix-remainder';
import type { Target } from './peer-targets';

/**
 * The gateway keys peers use for this node's own VTEP (planHostFabric's choice, seen from the node
 * itself): per family, the first address of the lowest of its prefixes, or of what of it no endpoint
 * (DPU) covers. The allocator never hands that address out (core/ipam/ip-pool.ts, offset 0), so
 * putting it on our device takes nothing from a pod.
 */
export function ownGatewayKeys(
  ranges: readonly string[],
  endpointPrefixes: readonly string[] = [],
): Partial<Record<AddressFamily, string>> {
  const parse = (texts: readonly string[]): Cidr[] =>
    texts.flatMap((t) => {
      try {
        return [parseCidr(t)];
      } catch {
        return [];
      }
    });
  const slices = parse(endpointPrefixes);
  const candidates = parse(ranges)
    .flatMap((r) => remainder(r, slices).slice(0, 1))
    .sort(byAddress);
  const out: Partial<Record<AddressFamily, string>> = {};
  for (const c of candidates) {
    const f = c.family === 4 ? AF_INET : AF_INET6;
    out[f] ??= formatAddress(c.family, c.network);
  }
  return out;
}

/** The tunnel addresses a peer publishes, where this target may take them, and where to note those ignored. */
export interface PublishedKeys {
  gateways?: Vtep['gateways'];
  within: readonly Cidr[];
  ignored: string[];
}

/**
 * Per family, the tunnel address the peer publishes when it lies in `candidates` (what of its own
 * prefixes this target serves) and no target uses it yet; else the first address of one of
 * `candidates` (in order) that no target uses yet. The keys picked are taken in `claims` at once.
 */
export function pickGateways(
  claims: Claims,
  label: string,
  candidates: readonly Cidr[],
  published?: PublishedKeys,
): Pick<Target, 'gateways' | 'blocked'> {
  const out: Target['gateways'] = {};
  const blocked: RefusedClaim[] = [];
  /** Whether `address` is free for this target; if another holds it, that is kept for the reason. */
  const free = (address: string): boolean => {
    const holder = claims.holder('gateway', address, label);
    if (holder !== undefined) blocked.push({ claim: 'gateway', value: address, holder });
    return holder === undefined;
  };
  for (const [k, a] of Object.entries(published?.gateways ?? {})) {
    let address: string;
    try {
      address = canonicalAddress(a);
    } catch {
      continue;
    }
    const f = k === '4' ? AF_INET : AF_INET6;
    const value = parseCidr(`${address}/${k === '4' ? 32 : 128}`);
    if (!published?.within.some((c) => inside(value, c)) || !free(address)) {
      published?.ignored.push(address);
      continue;
    }
    out[f] = address;
    claims.take('gateway', address, label, false);
  }
  for (const c of candidates) {
    const f = c.family === 4 ? AF_INET : AF_INET6;
    const address = formatAddress(c.family, c.network);
    if (out[f] !== undefined || !free(address)) continue;
    out[f] = address;
    claims.take('gateway', address, label, false);
  }
  return blocked.length === 0 ? { gateways: out } : { gateways: out, blocked };
}

// Where each peer is probed over the path its plan gives it. Its own file because it reads a finished
// plan (the prober's business, peer-prober.ts) and writes none.

import { AF_INET, familyOf, type AddressFamily } from '../../../../lib/rtnetlink';
import type { FabricPlan, WantedNeighbour } from './wanted';

/**
 * Over VXLAN its gateway key (IPv4 first), which the peer holds on its device (gateway-address.ts), so
 * its kernel answers through the tunnel; routed, its underlay address via the direct route. A peer
 * reached only through its DPUs, or not at all, is not probed.
 */
export function probeTargets(plan: FabricPlan): Array<{ node: string; address: string; family: 4 | 6 }> {
  const out: Array<{ node: string; address: string; family: 4 | 6 }> = [];
  const keys = new Map<string, WantedNeighbour>();
  for (const n of plan.neighbours) {
    const had = keys.get(n.peer);
    if (!had || (had.family !== AF_INET && n.family === AF_INET)) keys.set(n.peer, n);
  }
  const direct = new Map<string, string>();
  for (const r of plan.routes)
    if (r.peer !== undefined && r.gateway !== undefined && !r.onlink && !direct.has(r.peer))
      direct.set(r.peer, r.gateway);
  const version = (f: AddressFamily): 4 | 6 => (f === AF_INET ? 4 : 6);
  for (const p of plan.peers) {
    if (p.path === 'vxlan') {
      const k = keys.get(p.node);
      if (k) out.push({ node: p.node, address: k.dst, family: version(k.family) });
    } else if (p.path === 'direct') {
      const gw = direct.get(p.node);
      if (gw !== undefined) out.push({ node: p.node, address: gw, family: version(familyOf(gw)) });
    }
  }
  return out;
}

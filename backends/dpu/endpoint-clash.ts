import type { Peer } from '../../core/peer-source';
import { dpuVtepMac } from '../../lib/vtep-mac';
import { canonicalAddress as canonical, type FabricAgent } from './fabric-plan';

// Whether a DPU may carry the fabric at the address its hello states. Its VTEP is one FDB entry on
// every other DPU and VXLAN device of the fabric, keyed by its MAC: a MAC that another node's VTEP or
// DPU, or another DPU of this node, already states would take that entry from its holder. The holder
// is the incumbent and keeps it; the newcomer still serves ports (its pods are reachable from this
// node only) and is admitted once the holder is gone.
//
// Two DPUs of this node at one address sit on one underlay, where one of them cannot be reached: an
// address clash. With a source that publishes records the MAC is derived from the node's name and the
// agent's id as well as the address (lib/vtep-mac.ts): another node at the same address is on another
// underlay (two sites, two NATs), its MAC differs, and each node's planner decides which of two
// endpoints at one address it tunnels to, the incumbent first (fabric-plan.ts, the Linux planner).
// Derived from the address alone (the static source), an address another node has is its MAC too.

/**
 * Why `candidate` may not carry the fabric now, or undefined when it may. `named`: the node name MACs
 * are derived with (FabricSettings.nodeName); none, from addresses alone.
 */
export function endpointClash(
  candidate: FabricAgent,
  self: string,
  admitted: Iterable<FabricAgent>,
  peers: readonly Peer[],
  named?: string,
): string | undefined {
  const address = canonical(candidate.address);
  const mac = dpuVtepMac(candidate.address, named, candidate.id).toLowerCase();
  const taken = (by: string): string => `its uplink address ${candidate.address} is ${by}`;
  const from = named ? `${named}/${candidate.id} at ${candidate.address}` : candidate.address;
  const macTaken = (by: string): string => `its VTEP MAC ${mac} (derived from ${from}) is ${by}`;
  for (const other of admitted) {
    if (other.id === candidate.id) continue;
    if (canonical(other.address) === address)
      return taken(`already the VTEP of DPU agent ${other.id} of this node`);
    if (dpuVtepMac(other.address, named, other.id).toLowerCase() === mac)
      return macTaken(`that of DPU agent ${other.id} of this node`);
  }
  for (const p of peers) {
    if (p.node === self) continue;
    if (!named) {
      if (p.underlay.some((a) => canonical(a) === address)) return taken(`node ${p.node}'s underlay address`);
      for (const e of p.endpoints ?? [])
        if (canonical(e.underlay) === address) return taken(`the VTEP of node ${p.node}'s DPU ${e.id}`);
    }
    if (p.vtep?.mac.toLowerCase() === mac) return macTaken(`node ${p.node}'s VTEP MAC`);
    for (const e of p.endpoints ?? [])
      if (e.vtep.mac.toLowerCase() === mac) return macTaken(`that of node ${p.node}'s DPU ${e.id}`);
  }
  return undefined;
}

import type { Peer } from '../../core/fabric/peer-source';
import { vtepMac } from '../../lib/vtep-mac';
import { canonicalAddress as canonical, type FabricAgent } from './fabric-plan';

// Whether a DPU may carry the fabric at the address its hello states. Its VTEP is one FDB entry on
// every other DPU and VXLAN device of the fabric (its MAC → its address): an address or MAC that
// another node's underlay, VTEP or DPU already has, or another DPU of this node, would take that
// entry from its holder. The holder is the incumbent and keeps it; the newcomer still serves ports
// (its pods are reachable from this node only) and is admitted once the holder is gone.

/** Why `candidate` may not carry the fabric now, or undefined when it may. */
export function endpointClash(
  candidate: FabricAgent,
  self: string,
  admitted: Iterable<FabricAgent>,
  peers: readonly Peer[],
): string | undefined {
  const address = canonical(candidate.address);
  const mac = vtepMac(candidate.address).toLowerCase();
  const taken = (by: string): string => `its uplink address ${candidate.address} is ${by}`;
  for (const other of admitted)
    if (other.id !== candidate.id && canonical(other.address) === address)
      return taken(`already the VTEP of DPU agent ${other.id} of this node`);
  for (const p of peers) {
    if (p.node === self) continue;
    if (p.underlay.some((a) => canonical(a) === address)) return taken(`node ${p.node}'s underlay address`);
    for (const e of p.endpoints ?? [])
      if (canonical(e.underlay) === address) return taken(`the VTEP of node ${p.node}'s DPU ${e.id}`);
    if (p.vtep?.mac.toLowerCase() === mac)
      return `its VTEP MAC ${mac} (derived from ${candidate.address}) is node ${p.node}'s VTEP MAC`;
    for (const e of p.endpoints ?? [])
      if (e.vtep.mac.toLowerCase() === mac)
        return `its VTEP MAC ${mac} (derived from ${candidate.address}) is that of node ${p.node}'s DPU ${e.id}`;
  }
  return undefined;
}

import type { FabricMode, LocalNode } from './fabric-dataplane';

// A pod's packets to another node travel inside the underlay's: over VXLAN they carry an outer IP,
// UDP, VXLAN and Ethernet header (50 bytes over IPv4, 70 over IPv6). A pod MTU that ignores it is
// fragmented or, with don't-fragment set, dropped in silence. In hybrid mode one pod talks over both
// paths, so the encapsulation's MTU is the one that fits both.

/** Bytes the mode's encapsulation adds to a pod's packet on this node's underlay. */
export function encapsulationOverhead(mode: FabricMode, local: Pick<LocalNode, 'underlay'>): number {
  if (mode !== 'vxlan' && mode !== 'hybrid') return 0;
  return (local.underlay[0] ?? '').includes(':') ? 70 : 50;
}

/** The largest pod MTU that fits every path of the mode. */
export function podMtu(mode: FabricMode, local: Pick<LocalNode, 'underlay' | 'mtu'>): number {
  return local.mtu - encapsulationOverhead(mode, local);
}

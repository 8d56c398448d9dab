import type { FabricSettings, OwnPrefixes } from '../../core/fabric-dataplane';
import type { Peer } from '../../core/peer-source';

// Plain values the fabric tests without a kernel share: VXLAN settings with no cluster ranges, no
// prefixes of our own, two peers on the underlay at 10.0.0.3 and 10.0.0.4, and a DPU endpoint.

export const VX = { vni: 30574, port: 4789 };

export const VXLAN_SETTINGS: FabricSettings = { mode: 'vxlan', nodeIp: '', ...VX, clusterCidrs: [] };

export const NO_OWN: OwnPrefixes = { ranges: [], byEndpoint: new Map() };

export const n3: Peer = {
  node: 'n3',
  underlay: ['10.0.0.3'],
  mtu: 1500,
  bootId: 'b3',
  vtep: { mac: '0e:77:0a:00:00:03', ...VX },
  prefixes: ['10.244.2.0/24'],
};

export const n4: Peer = {
  ...n3,
  node: 'n4',
  underlay: ['10.0.0.4'],
  vtep: { mac: '0e:77:0a:00:00:04', ...VX },
  prefixes: ['10.244.3.0/24'],
};

/** A peer with a VTEP at `mac` on one underlay address, announcing `prefixes`. */
export function vxlanPeer(
  node: string,
  address: string,
  prefixes: string[],
  mac: string,
  over: Partial<Peer> = {},
): Peer {
  return { node, underlay: [address], mtu: 1500, vtep: { mac, ...VX }, bootId: '', prefixes, ...over };
}

/** A DPU endpoint holding the first half of 10.244.2.0/24 (n2's, as recording-fabric-dataplane's peer makes it). */
export const DPU_ENDPOINT: NonNullable<Peer['endpoints']>[number] = {
  id: 'd0',
  underlay: '192.0.2.50',
  mtu: 1500,
  vtep: { mac: '0e:77:c0:00:02:32', ...VX },
  prefixes: ['10.244.2.0/25'],
};

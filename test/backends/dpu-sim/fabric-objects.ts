import { RouteVia, type FabricObject } from '../../../proto/gen/workloadnet/dpu/v1/dpu';

// Fabric objects as a daemon builds them, for the simulator's tests.

export const VNI = 30574;
export const PORT = 4789;

/** 0e:77:a.b.c.d, as the daemon derives a VTEP MAC from an IPv4 underlay address. */
export function vtepMac(address: string): string {
  return ['0e', '77', ...address.split('.').map((b) => Number(b).toString(16).padStart(2, '0'))].join(':');
}

export function vtep(generation: number, address: string, mtu = 1450): FabricObject {
  return {
    name: 'vtep',
    generation,
    localVtep: { address, mac: vtepMac(address), vni: VNI, port: PORT, mtu },
  };
}

export function localPrefix(generation: number, prefix: string): FabricObject {
  return { name: `prefix/${prefix}`, generation, localPrefix: { prefix } };
}

export function peer(
  generation: number,
  node: string,
  address: string,
  over: Partial<FabricObject['peer']> = {},
): FabricObject {
  return {
    name: `peer/${node}`,
    generation,
    peer: { node, endpoint: '', address, mac: vtepMac(address), vni: VNI, port: PORT, ...over },
  };
}

export function route(generation: number, prefix: string, peerName: string, mtu = 1450): FabricObject {
  return {
    name: `route/${prefix}`,
    generation,
    peerRoute: { prefix, peer: peerName, via: RouteVia.ROUTE_VIA_ENCAP, mtu },
  };
}

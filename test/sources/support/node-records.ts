import type { NodeRecord, TunnelEndpoint } from '../../../core/peer-source';

/**
 * A node's record as its daemon publishes it: one underlay address, a VTEP whose MAC is made of that
 * address (0e:77 and its four octets, so each node's differs), the default VNI and port.
 */
export function nodeRecord(node: string, ip: string, bootId = `boot-of-${node}`): NodeRecord {
  const octets = ip.split('.').map((o) => Number(o).toString(16).padStart(2, '0'));
  return {
    node,
    underlay: [ip],
    mtu: 1500,
    vtep: { mac: `0e:77:${octets.join(':')}`, vni: 30574, port: 4789 },
    bootId,
  };
}

/**
 * A DPU's tunnel endpoint as its node's record lists it: underlay 192.0.2.`host`, a VTEP MAC no node's
 * record has (0e:77:c0:00:03 and the host), the default VNI and port.
 */
export function tunnelEndpoint(id: string, host: number, prefixes: string[]): TunnelEndpoint {
  return {
    id,
    underlay: `192.0.2.${host}`,
    mtu: 1500,
    vtep: { mac: `0e:77:c0:00:03:${host.toString(16).padStart(2, '0')}`, vni: 30574, port: 4789 },
    prefixes,
  };
}

import { isIP } from 'node:net';
import type { Hello } from '../../proto/gen/workloadnet/dpu/v1/dpu';

// Whether an agent carries the fabric (its own VTEP, the node's slices, the peer table): it must speak
// protocol version 3, say it programs a VXLAN overlay, and state where it is on the underlay. An agent
// that does not still serves ports; its pods are reachable from this node only.

/** Agent feature: it programs the FabricObjects of a VXLAN overlay. */
export const FEATURE_FABRIC_VXLAN = 'fabric-vxlan';
/** The first protocol version with the fabric. */
export const FABRIC_PROTOCOL_VERSION = 3;
/** What an agent that states no uplink MTU is assumed to have. */
export const DEFAULT_UPLINK_MTU = 1500;

export type FabricCarriage =
  { carries: true; address: string; uplinkMtu: number } | { carries: false; why: string };

/** What a session speaking `version` after `hello` can carry. */
export function fabricCarriage(version: number, hello: Hello | undefined): FabricCarriage {
  if (version < FABRIC_PROTOCOL_VERSION)
    return { carries: false, why: `protocol version ${version || 'unknown'}` };
  if (!hello?.capabilities?.features.includes(FEATURE_FABRIC_VXLAN))
    return { carries: false, why: `no ${FEATURE_FABRIC_VXLAN} feature` };
  const address = hello.uplinkAddresses.find((a) => a.trim() !== '')?.trim();
  if (!address) return { carries: false, why: 'stated no uplink address' };
  if (isIP(address) === 0)
    return {
      carries: false,
      why: `its uplink address ${JSON.stringify(address.slice(0, 64))} is not an IP address`,
    };
  return { carries: true, address, uplinkMtu: hello.uplinkMtu || DEFAULT_UPLINK_MTU };
}

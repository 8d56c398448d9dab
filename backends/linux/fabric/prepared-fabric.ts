// The fabric as prepare() found and made it (settings, underlay, our VXLAN device, the routes' MTU),
// and this node as the fabric publishes it from that. Its own file because the settings are checked
// here before anything is prepared, and every later step (converge, the uplink's MTU, the filter)
// reads the same prepared state.

import type { FabricSettings, LocalNode } from '../../../core/fabric-dataplane';
import { invalidArgument } from '../../../core/errors';
import { parseCidr } from '../../../lib/cidr';
import type { Link } from '../../../lib/rtnetlink';
import type { Underlay } from './underlay';

export interface Prepared {
  settings: FabricSettings;
  underlay: Underlay;
  vxlan?: Link;
  mac?: string;
  routeMtu: number;
  /** The VXLAN source filter is to be programmed (a device runs and fabric.sourceFilter is on). */
  filter: boolean;
}

/** Bad settings are refused in words before anything in the kernel is touched. */
export function validateFabricSettings(s: FabricSettings): void {
  if (!['routed', 'vxlan', 'hybrid', 'external'].includes(s.mode))
    throw invalidArgument(`fabric: mode "${String(s.mode)}" is not one of routed, vxlan, hybrid, external`);
  if (!Number.isInteger(s.vni) || s.vni < 1 || s.vni > 0xffffff)
    throw invalidArgument(`fabric: VNI must be an integer in 1..16777215, not ${s.vni}`);
  if (!Number.isInteger(s.port) || s.port < 1 || s.port > 0xffff)
    throw invalidArgument(`fabric: VXLAN port must be an integer in 1..65535, not ${s.port}`);
  for (const c of s.clusterCidrs) {
    try {
      parseCidr(c);
    } catch (err) {
      throw invalidArgument(`fabric: cluster CIDR: ${(err as Error).message}`);
    }
  }
}

/** This node as the fabric publishes it. */
export function localNode(prep: Prepared): LocalNode {
  const local: LocalNode = {
    underlay: [prep.underlay.address],
    uplink: prep.underlay.uplink.name,
    mtu: prep.underlay.uplink.mtu,
    subnets: prep.underlay.subnets.map((s) => s.text),
  };
  if (prep.mac !== undefined)
    local.vtep = { mac: prep.mac, vni: prep.settings.vni, port: prep.settings.port };
  return local;
}

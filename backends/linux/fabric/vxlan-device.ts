// The Linux fabric's VXLAN device, wn-vxlan on the underlay, kept by lib/overlay/vxlan-device.ts (which
// adopts, updates, recreates or refuses it). Its own file because the fabric ensures the device from
// three places (prepare, the repair pass, the uplink's MTU follower) with the same settings, and a
// refusal is a FAILED_PRECONDITION for the fabric: another's device is in the way, nothing was changed.

import { failedPrecondition } from '../../../core/errors';
import { VxlanDeviceError, findVxlanDevice, type VxlanDeviceSpec } from '../../../lib/overlay';
import type { Link, NetlinkSocket } from '../../../lib/rtnetlink';
import type { Underlay } from './underlay';

export const VXLAN_DEVICE = 'wn-vxlan';
/** Shown by `ip link` and the evidence, beside the name and kind, that a device is ours. */
export const VXLAN_ALIAS = 'workloadnet fabric';
const MARK = { name: VXLAN_DEVICE, alias: VXLAN_ALIAS };

export interface VxlanDeviceSettings {
  vni: number;
  port: number;
  mac: string;
  mtu: number;
}

/** Our device on this underlay: learning off, since the FDB entries the fabric writes are the truth. */
export function fabricDevice(want: VxlanDeviceSettings, underlay: Underlay): VxlanDeviceSpec {
  return {
    ...MARK,
    ...want,
    local: underlay.address,
    link: underlay.uplink.index,
    learning: false,
    portSetting: 'fabric.port',
  };
}

/** A refusal of the device as the fabric reports it; any other error as it is. */
export function deviceRefused(err: unknown): never {
  if (err instanceof VxlanDeviceError) throw failedPrecondition(`fabric: ${err.message}`);
  throw err;
}

/**
 * Our device when it exists (modes that run none still clean what is on it). A device of our name
 * without our alias is not ours: nothing on it is cleaned.
 */
export function findFabricDevice(sock: NetlinkSocket): Promise<Link | undefined> {
  return findVxlanDevice(sock, MARK);
}

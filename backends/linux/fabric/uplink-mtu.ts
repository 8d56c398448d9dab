// The uplink's MTU is read at prepare and followed while the fabric runs: an operator or a cloud agent
// that lowers it (a jumbo-frame change rolled back, a tunnel added under the node) would otherwise
// leave wn-vxlan, the routes' MTU and the record peers route by at the old value until a restart, and
// every packet between the two sizes would be lost in silence at the uplink. The fabric hears of a
// change from its drift monitor (a link notification of the uplink) or at its periodic pass.

import type { FabricSettings } from '../../../core/fabric-dataplane';
import { ensureVxlanDevice } from '../../../lib/overlay';
import { getLink, type Link } from '../../../lib/rtnetlink/link';
import type { NetlinkSocket } from '../../../lib/rtnetlink/socket';
import { underlayPodMtu } from './plan/route-mtu';
import type { Underlay } from './underlay';
import { deviceRefused, fabricDevice } from './vxlan-device';

/** What of the prepared fabric the uplink's MTU decides. */
export interface UplinkMtuState {
  settings: FabricSettings;
  underlay: Underlay;
  vxlan?: Link;
  mac?: string;
  routeMtu: number;
}

/**
 * Takes the uplink's MTU when it is another than `prep` holds: the underlay, the MTU routes carry and
 * our device's are changed in `prep`. The MTU before, or undefined when nothing changed (a vanished
 * uplink is the next prepare's business, not a change of MTU).
 */
export async function followUplinkMtu(
  sock: NetlinkSocket,
  prep: UplinkMtuState,
): Promise<number | undefined> {
  const now = await getLink(sock, { index: prep.underlay.uplink.index });
  const was = prep.underlay.uplink.mtu;
  if (!now || now.mtu === was || now.mtu <= 0) return undefined;
  prep.underlay = { ...prep.underlay, uplink: { ...prep.underlay.uplink, mtu: now.mtu } };
  const mode = prep.settings.mode;
  const tunnel = mode === 'vxlan' || mode === 'hybrid';
  prep.routeMtu = tunnel ? underlayPodMtu(mode, prep.underlay) : now.mtu;
  if (tunnel && prep.vxlan && prep.mac !== undefined) {
    const want = { vni: prep.settings.vni, port: prep.settings.port, mac: prep.mac, mtu: prep.routeMtu };
    prep.vxlan = (await ensureVxlanDevice(sock, fabricDevice(want, prep.underlay)).catch(deviceRefused)).link;
  }
  return was;
}

// The DPU's wn-vxlan as its LocalVtep describes it, kept by lib/overlay/vxlan-device.ts (the Linux
// fabric's device code): created, adopted as it is, updated in place, recreated only when the VTEP
// itself changed, and refused, nothing changed, when a device of our name or on our port is another's.
// Its own file for what is the DPU's alone: the underlay device is whichever holds the VTEP address,
// the device forwards with loose reverse-path filtering, and no LocalVtep means the DPU carries no
// fabric, so our device goes.

import type { Logger } from 'pino';
import { ensureVxlanDevice, findVxlanDevice } from '../../lib/overlay';
import {
  IPV4_DEVCONF_FORWARDING,
  IPV4_DEVCONF_RP_FILTER,
  NetlinkError,
  canonicalAddress,
  delLinkRequest,
  listAddresses,
  setLinkRequest,
  type Link,
  type NetlinkSocket,
} from '../../lib/rtnetlink';
import type { LocalVtep } from '../../proto/gen/workloadnet/dpu/v1/dpu';

export const VXLAN_DEVICE = 'wn-vxlan';
export const VXLAN_ALIAS = 'workloadnet fabric';
const MARK = { name: VXLAN_DEVICE, alias: VXLAN_ALIAS };
/** rp_filter "loose" on wn-vxlan: a Linux node's own traffic arrives with its underlay address as source. */
const RP_FILTER_LOOSE = 2;

/** Our device when it is there (by name, kind and alias). */
export function findDevice(sock: NetlinkSocket): Promise<Link | undefined> {
  return findVxlanDevice(sock, MARK);
}

/**
 * Our device as the LocalVtep describes it, or none when there is no LocalVtep (ours is removed).
 * Throws, with words for the agent's ack, when it cannot be.
 */
export async function programDevice(
  sock: NetlinkSocket,
  log: Logger,
  v: LocalVtep | undefined,
): Promise<Link | undefined> {
  if (!v) {
    await removeDevice(sock, log);
    return undefined;
  }
  const address = canonicalAddress(v.address);
  const holder = (await listAddresses(sock)).find((a) => canonicalAddress(a.address) === address);
  if (!holder) throw new Error(`the VTEP address ${v.address} is on no interface of the DPU namespace`);
  const { link, outcome, why } = await ensureVxlanDevice(sock, {
    ...MARK,
    vni: v.vni,
    port: v.port,
    local: address,
    link: holder.index,
    mac: v.mac.toLowerCase(),
    mtu: v.mtu,
    learning: false,
  });
  await sock.request(
    setLinkRequest(
      { index: link.index },
      { inetConf: { [IPV4_DEVCONF_FORWARDING]: 1, [IPV4_DEVCONF_RP_FILTER]: RP_FILTER_LOOSE } },
    ),
  );
  const fields = { device: VXLAN_DEVICE, ifindex: link.index, vni: v.vni, local: address };
  if (outcome === 'recreated')
    log.warn({ ...fields, why }, 'the local VTEP changed: recreated the fabric device');
  else log.info(fields, outcome === 'created' ? 'fabric device created' : 'fabric device adopted');
  return link;
}

/** The local VTEP was deleted: our device goes with it (one of our name that is not ours stays). */
async function removeDevice(sock: NetlinkSocket, log: Logger): Promise<void> {
  const ours = await findDevice(sock);
  if (!ours) return;
  await sock.request(delLinkRequest({ index: ours.index })).catch((err: unknown) => {
    if (!(err instanceof NetlinkError && err.notFound)) throw err;
  });
  log.info({ device: VXLAN_DEVICE }, 'the local VTEP was deleted: removed the fabric device');
}

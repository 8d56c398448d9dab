// Our one VXLAN device: created once, adopted on every later start. Recreating it on a restart would
// drop every tunnelled packet for a moment (and every neighbour and FDB entry on it), so a device of
// ours whose settings match is left exactly as it is; only what SETLINK can change in place (MTU, MAC,
// up) is changed in place. A device is ours only when it carries our alias: an operator's device
// named wn-vxlan (or a foreign one on our UDP port) is never changed, deleted or cleaned; we refuse,
// naming it and what to do. The one unmarked device taken as ours is the one we would create, exactly
// (our VNI, port, local address, underlay device, and the VTEP MAC derived from our address) with no
// alias at all: a creation of ours interrupted before its alias was set.

import { failedPrecondition } from '../../../core/errors';
import {
  NetlinkError,
  canonicalAddress,
  delLinkRequest,
  getLink,
  listLinks,
  newLinkRequest,
  setLinkRequest,
  vxlanInfoData,
  type Link,
  type NetlinkSocket,
} from '../../../lib/rtnetlink';
import type { Underlay } from './underlay';

export const VXLAN_DEVICE = 'wn-vxlan';
/** Shown by `ip link` and the evidence, beside the name and kind, that a device is ours. */
export const VXLAN_ALIAS = 'workloadnet fabric';

export interface VxlanDeviceSettings {
  vni: number;
  port: number;
  mac: string;
  mtu: number;
}

export type VxlanOutcome = 'created' | 'adopted' | 'updated' | 'recreated';

/** Settings that only a new device can change (the kernel refuses them on an existing one). */
function fixedMismatch(link: Link, want: VxlanDeviceSettings, underlay: Underlay): string | undefined {
  const v = link.vxlan;
  if (!v) return 'no VXLAN settings reported';
  if (v.vni !== want.vni) return `VNI ${v.vni} instead of ${want.vni}`;
  if (v.port !== want.port) return `port ${v.port} instead of ${want.port}`;
  if (v.local === undefined || canonicalAddress(v.local) !== underlay.address)
    return `local address ${v.local ?? 'unset'} instead of ${underlay.address}`;
  if (v.link !== underlay.uplink.index)
    return `underlay device ${v.link ?? 'unset'} instead of ${underlay.uplink.index}`;
  if (v.learning) return 'learning on';
  return undefined;
}

/** How a device is described to the operator: its kind, VNI and alias. */
function described(link: Link): string {
  const vni = link.vxlan ? `, VNI ${link.vxlan.vni}` : '';
  const alias = link.alias !== undefined && link.alias !== '' ? `alias "${link.alias}"` : 'no alias';
  return `${link.kind ?? 'device of unknown kind'}${vni}, ${alias}`;
}

/**
 * Refuses (FAILED_PRECONDITION, nothing changed) a device named like ours that is not ours: any other
 * alias, or no alias on a device we would not have made exactly so.
 */
function notOurs(link: Link, want: VxlanDeviceSettings, underlay: Underlay): void {
  if (link.alias === VXLAN_ALIAS) return;
  const interrupted =
    (link.alias === undefined || link.alias === '') &&
    link.mac === want.mac &&
    fixedMismatch(link, want, underlay) === undefined;
  if (interrupted) return;
  throw failedPrecondition(
    `fabric: an interface named ${VXLAN_DEVICE} exists (${described(link)}) and is not ours ` +
      `(our devices carry the alias "${VXLAN_ALIAS}"); it was left as it is: rename or remove it ` +
      `(ip link del ${VXLAN_DEVICE}) to let the fabric create its own`,
  );
}

/** Our device (by name, kind and alias) among these links, when it is there. */
export function oursAmong(links: readonly Link[]): Link | undefined {
  return links.find((l) => l.name === VXLAN_DEVICE && l.kind === 'vxlan' && l.alias === VXLAN_ALIAS);
}

/** A device other than ours that would take our packets: a VXLAN device on the same UDP port. */
function foreignOnPort(links: Link[], want: VxlanDeviceSettings): Link | undefined {
  return links.find((l) => l.name !== VXLAN_DEVICE && l.kind === 'vxlan' && l.vxlan?.port === want.port);
}

/**
 * The device, created or adopted. Refuses (FAILED_PRECONDITION, nothing changed) when a foreign VXLAN
 * device uses our port or something else carries our device's name.
 */
export async function ensureVxlanDevice(
  sock: NetlinkSocket,
  want: VxlanDeviceSettings,
  underlay: Underlay,
): Promise<{ link: Link; outcome: VxlanOutcome; why?: string }> {
  const links = await listLinks(sock);
  const foreign = foreignOnPort(links, want);
  if (foreign)
    throw failedPrecondition(
      `fabric: UDP port ${want.port} is already used by VXLAN device ${foreign.name} (VNI ${foreign.vxlan?.vni ?? '?'}), ` +
        `which is not ours; remove it or choose another port (fabric.port), nothing was changed`,
    );
  const existing = links.find((l) => l.name === VXLAN_DEVICE);
  if (existing && existing.kind !== 'vxlan')
    throw failedPrecondition(
      `fabric: an interface named ${VXLAN_DEVICE} exists and is a ${existing.kind ?? 'device of unknown kind'}, not our VXLAN device; ` +
        `rename or remove it, nothing was changed`,
    );
  let outcome: VxlanOutcome = 'created';
  let why: string | undefined;
  if (existing) notOurs(existing, want, underlay);
  if (existing) {
    why = fixedMismatch(existing, want, underlay);
    if (why === undefined) {
      const change =
        existing.mtu !== want.mtu ||
        existing.mac !== want.mac ||
        !existing.up ||
        existing.alias !== VXLAN_ALIAS;
      // Only what differs: setting the MAC, even to the same value, makes the kernel flush the
      // device's neighbours (NETDEV_CHANGEADDR), permanent ones included, and every peer would be
      // unreachable until the next apply put them back: packets lost across a restart.
      if (change)
        await sock.request(
          setLinkRequest(
            { index: existing.index },
            {
              ...(existing.mtu !== want.mtu ? { mtu: want.mtu } : {}),
              ...(existing.mac !== want.mac ? { mac: want.mac } : {}),
              ...(existing.alias !== VXLAN_ALIAS ? { alias: VXLAN_ALIAS } : {}),
              up: true,
            },
          ),
        );
      const link = change ? await getLink(sock, { index: existing.index }) : existing;
      if (!link) throw failedPrecondition(`fabric: ${VXLAN_DEVICE} disappeared while being adopted; retry`);
      return { link, outcome: change ? 'updated' : 'adopted' };
    }
    // Ours, but with settings of another configuration (a new VNI, port or node address): the only
    // way to them is a new device.
    await sock.request(delLinkRequest({ index: existing.index }));
    outcome = 'recreated';
  }
  try {
    await sock.request(
      newLinkRequest({
        name: VXLAN_DEVICE,
        kind: 'vxlan',
        mtu: want.mtu,
        mac: want.mac,
        alias: VXLAN_ALIAS,
        up: true,
        infoData: vxlanInfoData({
          vni: want.vni,
          port: want.port,
          local: underlay.address,
          link: underlay.uplink.index,
          learning: false,
        }),
      }),
    );
  } catch (err) {
    if (err instanceof NetlinkError && err.code === 'EADDRINUSE')
      throw failedPrecondition(
        `fabric: UDP port ${want.port} is in use by something other than a VXLAN device in ${sock.label} (${err.message}); ` +
          `free it or choose another port (fabric.port)`,
      );
    throw err;
  }
  let link = await getLink(sock, { name: VXLAN_DEVICE });
  if (!link) throw failedPrecondition(`fabric: ${VXLAN_DEVICE} was created but cannot be read back; retry`);
  // The kernel takes no alias when it creates a link: set it now, or the next start would see a device
  // to update (and, before only what differs was set, flush its neighbours).
  if (link.alias !== VXLAN_ALIAS) {
    await sock.request(setLinkRequest({ index: link.index }, { alias: VXLAN_ALIAS }));
    link = (await getLink(sock, { index: link.index })) ?? link;
  }
  return { link, outcome, why };
}

/**
 * Our device when it exists (modes that run none still clean what is on it). A device of our name
 * without our alias is not ours: nothing on it is cleaned.
 */
export async function findVxlanDevice(sock: NetlinkSocket): Promise<Link | undefined> {
  const link = await getLink(sock, { name: VXLAN_DEVICE });
  return link && oursAmong([link]);
}

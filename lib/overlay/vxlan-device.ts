// A VXLAN device of ours: created once, adopted on every later start. Recreating it on a restart would
// drop every tunnelled packet for a moment (and every neighbour and FDB entry on it), so a device of
// ours whose settings match is left exactly as it is; only what SETLINK can change in place (MTU, MAC,
// alias, up) is changed in place. A device is ours only when it carries our alias: an operator's device
// of our name (or a foreign one on our UDP port) is never changed, deleted or cleaned; we refuse,
// naming it and what to do. The one unmarked device taken as ours is the one we would create, exactly
// (our VNI, port, local address, underlay device and MAC) with no alias at all: a creation of ours
// interrupted before its alias was set. Its own file because every overlay of the project (the Linux
// fabric's device, the simulator's) is this one device, differing only in the settings below.

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
} from '../rtnetlink';

/** What a device of ours is: everything that differs between the overlays that run one. */
export interface VxlanDeviceSpec {
  name: string;
  /** Our mark: shown by `ip link`, and the evidence, beside the name and kind, that a device is ours. */
  alias: string;
  vni: number;
  port: number;
  /** The underlay address packets leave from (the device's local). */
  local: string;
  /** The ifindex of the underlay device that holds `local`. */
  link: number;
  mac: string;
  mtu: number;
  learning: boolean;
  /** The setting that chooses the port, named when the port is taken (e.g. "fabric.port"). */
  portSetting?: string;
}

export type VxlanOutcome = 'created' | 'adopted' | 'updated' | 'recreated';

/** A refusal: the device (or its port) is another's, or it vanished under us; nothing of another's changed. */
export class VxlanDeviceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'VxlanDeviceError';
  }
}

/** Settings that only a new device can change (the kernel refuses them on an existing one). */
function fixedMismatch(link: Link, want: VxlanDeviceSpec): string | undefined {
  const v = link.vxlan;
  if (!v) return 'no VXLAN settings reported';
  if (v.vni !== want.vni) return `VNI ${v.vni} instead of ${want.vni}`;
  if (v.port !== want.port) return `port ${v.port} instead of ${want.port}`;
  if (v.local === undefined || canonicalAddress(v.local) !== canonicalAddress(want.local))
    return `local address ${v.local ?? 'unset'} instead of ${want.local}`;
  if (v.link !== want.link) return `underlay device ${v.link ?? 'unset'} instead of ${want.link}`;
  if (v.learning !== want.learning) return `learning ${v.learning ? 'on' : 'off'}`;
  return undefined;
}

/** How a device is described to the operator: its kind, VNI and alias. */
function described(link: Link): string {
  const vni = link.vxlan ? `, VNI ${link.vxlan.vni}` : '';
  const alias = link.alias !== undefined && link.alias !== '' ? `alias "${link.alias}"` : 'no alias';
  return `${link.kind ?? 'device of unknown kind'}${vni}, ${alias}`;
}

/**
 * Refuses (nothing changed) a device of our name that is not ours: any other alias, or no alias on a
 * device we would not have made exactly so.
 */
function refuseNotOurs(link: Link, want: VxlanDeviceSpec): void {
  if (link.alias === want.alias) return;
  const interrupted =
    (link.alias === undefined || link.alias === '') &&
    link.mac === want.mac &&
    fixedMismatch(link, want) === undefined;
  if (interrupted) return;
  throw new VxlanDeviceError(
    `an interface named ${want.name} exists (${described(link)}) and is not ours ` +
      `(our devices carry the alias "${want.alias}"); it was left as it is: rename or remove it ` +
      `(ip link del ${want.name}) to let the fabric create its own`,
  );
}

/** Refuses (nothing changed) what would take our packets or our name: see ensureVxlanDevice. */
function refuseOthers(links: readonly Link[], want: VxlanDeviceSpec): Link | undefined {
  const foreign = links.find(
    (l) => l.name !== want.name && l.kind === 'vxlan' && l.vxlan?.port === want.port,
  );
  if (foreign)
    throw new VxlanDeviceError(
      `UDP port ${want.port} is already used by VXLAN device ${foreign.name} (VNI ${foreign.vxlan?.vni ?? '?'}), ` +
        `which is not ours; remove it or choose another port${portHint(want)}, nothing was changed`,
    );
  const existing = links.find((l) => l.name === want.name);
  if (existing && existing.kind !== 'vxlan')
    throw new VxlanDeviceError(
      `an interface named ${want.name} exists and is a ${existing.kind ?? 'device of unknown kind'}, not our VXLAN device; ` +
        `rename or remove it, nothing was changed`,
    );
  if (existing) refuseNotOurs(existing, want);
  return existing;
}

const portHint = (want: VxlanDeviceSpec): string => (want.portSetting ? ` (${want.portSetting})` : '');

/**
 * Our device whose fixed settings match, with what may change in place brought to `want`. Only what
 * differs is set: setting the MAC, even to the same value, makes the kernel flush the device's
 * neighbours (NETDEV_CHANGEADDR), permanent ones included, and every peer would be unreachable until
 * the next apply put them back: packets lost across a restart.
 */
async function adopt(
  sock: NetlinkSocket,
  existing: Link,
  want: VxlanDeviceSpec,
): Promise<{ link: Link; outcome: VxlanOutcome }> {
  const change =
    existing.mtu !== want.mtu || existing.mac !== want.mac || !existing.up || existing.alias !== want.alias;
  if (change)
    await sock.request(
      setLinkRequest(
        { index: existing.index },
        {
          ...(existing.mtu !== want.mtu ? { mtu: want.mtu } : {}),
          ...(existing.mac !== want.mac ? { mac: want.mac } : {}),
          ...(existing.alias !== want.alias ? { alias: want.alias } : {}),
          up: true,
        },
      ),
    );
  const link = change ? await getLink(sock, { index: existing.index }) : existing;
  if (!link) throw new VxlanDeviceError(`${want.name} disappeared while being adopted; retry`);
  return { link, outcome: change ? 'updated' : 'adopted' };
}

/** A new device of ours, marked. */
async function create(sock: NetlinkSocket, want: VxlanDeviceSpec): Promise<Link> {
  try {
    await sock.request(
      newLinkRequest({
        name: want.name,
        kind: 'vxlan',
        mtu: want.mtu,
        mac: want.mac,
        alias: want.alias,
        up: true,
        infoData: vxlanInfoData({
          vni: want.vni,
          port: want.port,
          local: want.local,
          link: want.link,
          learning: want.learning,
        }),
      }),
    );
  } catch (err) {
    if (err instanceof NetlinkError && err.code === 'EADDRINUSE')
      throw new VxlanDeviceError(
        `UDP port ${want.port} is in use by something other than a VXLAN device in ${sock.label} (${err.message}); ` +
          `free it or choose another port${portHint(want)}`,
      );
    throw err;
  }
  let link = await getLink(sock, { name: want.name });
  if (!link) throw new VxlanDeviceError(`${want.name} was created but cannot be read back; retry`);
  // The kernel takes no alias when it creates a link: set it now, or the next start would see a device
  // to update.
  if (link.alias !== want.alias) {
    await sock.request(setLinkRequest({ index: link.index }, { alias: want.alias }));
    link = (await getLink(sock, { index: link.index })) ?? link;
  }
  return link;
}

/**
 * The device, created or adopted; `why` says what made an existing one of ours be recreated. Refuses
 * (VxlanDeviceError, nothing changed) when a foreign VXLAN device uses our port or something else
 * carries our device's name.
 */
export async function ensureVxlanDevice(
  sock: NetlinkSocket,
  want: VxlanDeviceSpec,
): Promise<{ link: Link; outcome: VxlanOutcome; why?: string }> {
  const existing = refuseOthers(await listLinks(sock), want);
  if (!existing) return { link: await create(sock, want), outcome: 'created' };
  const why = fixedMismatch(existing, want);
  if (why === undefined) return adopt(sock, existing, want);
  // Ours, but with settings of another configuration (a new VNI, port or address): the only way to
  // them is a new device.
  await sock.request(delLinkRequest({ index: existing.index }));
  return { link: await create(sock, want), outcome: 'recreated', why };
}

/** Our device (by name, kind and alias) among these links, when it is there. */
export function oursAmong(
  links: readonly Link[],
  mark: Pick<VxlanDeviceSpec, 'name' | 'alias'>,
): Link | undefined {
  return links.find((l) => l.name === mark.name && l.kind === 'vxlan' && l.alias === mark.alias);
}

/** Our device when it exists. A device of our name without our alias is not ours: nothing on it is. */
export async function findVxlanDevice(
  sock: NetlinkSocket,
  mark: Pick<VxlanDeviceSpec, 'name' | 'alias'>,
): Promise<Link | undefined> {
  const link = await getLink(sock, { name: mark.name });
  return link && oursAmong([link], mark);
}

import { createHash } from 'node:crypto';
import type { AttachSpec, AttachmentView, DpuPortOptions, IpAssignment, RouteInfo } from '../../core/backend';
import { Toggle, VfLinkState, type Port, type Qos, type Route } from '../../proto/gen/workloadnet/dpu/v1/dpu';
import { ownString } from '../../lib/own-string';

// Turns what the core asks for (an AttachSpec, or a stored AttachmentView at start-up) into the port
// object the agent is sent. Both paths go through the same functions so that a port restored after a
// daemon restart is field-for-field the port that was first programmed.

/** The port's fields without its generation, which only DesiredState hands out. */
export type PortFields = Omit<Port, 'generation'>;

/**
 * A stable, locally administered unicast MAC for a key. Stable so that a repaired or re-programmed
 * port keeps the MAC its peers have cached in their neighbour tables.
 */
export function macForKey(key: string): string {
  const h = createHash('sha256').update(key).digest();
  // Bit 1 of the first octet set = locally administered; bit 0 clear = unicast.
  h[0] = ((h[0] ?? 0) & 0xfc) | 0x02;
  return Array.from(h.subarray(0, 6), (b) => b.toString(16).padStart(2, '0')).join(':');
}

/** The address as a host prefix, which is how it is programmed in the routed model. */
export function hostPrefix(ip: IpAssignment): string {
  return `${ip.address}/${ip.family === 4 ? 32 : 128}`;
}

/** One default route per family, via that family's (link-local) gateway. */
export function defaultRoutes(ips: readonly IpAssignment[]): RouteInfo[] {
  const out: RouteInfo[] = [];
  for (const family of [4, 6] as const) {
    const ip = ips.find((i) => i.family === family);
    if (ip) out.push({ destination: family === 4 ? '0.0.0.0/0' : '::/0', gateway: ip.gateway });
  }
  return out;
}

/**
 * The routes the workload's interface has: one default route per family, or, on an interface that does
 * not carry the namespace's default route (a secondary network), its network's ranges via the gateway.
 */
export function portRoutes(src: Pick<AttachSpec, 'ips' | 'defaultRoute' | 'routes'>): RouteInfo[] {
  if (src.defaultRoute !== false) return defaultRoutes(src.ips);
  const out: RouteInfo[] = [];
  for (const destination of src.routes ?? []) {
    const ip = src.ips.find((i) => i.family === (destination.includes(':') ? 6 : 4));
    if (ip) out.push({ destination, gateway: ip.gateway });
  }
  return out;
}

/**
 * Nearly every port has the same routes (one default route per family via the link-local gateway), so
 * ports share one frozen list per distinct set instead of each holding its own (~150 bytes a port).
 * Route lists are never modified after they are built; freezing makes sure of it.
 */
const sharedRoutes = new Map<string, Route[]>();
/** Distinct route lists shared; past this, unusual ones get lists of their own. */
const MAX_SHARED_ROUTE_LISTS = 64;

function toWireRoutes(routes: readonly RouteInfo[]): Route[] {
  const id = routes.map((r) => `${r.destination} ${r.gateway ?? ''}`).join('|');
  const shared = sharedRoutes.get(id);
  if (shared) return shared;
  const list = Object.freeze(
    routes.map((r) =>
      Object.freeze({ destination: ownString(r.destination), gateway: ownString(r.gateway ?? '') }),
    ),
  );
  // The wire type is mutable only because it is generated that way; nothing writes to a port's routes.
  const wire = list as Route[];
  if (sharedRoutes.size < MAX_SHARED_ROUTE_LISTS) sharedRoutes.set(id, wire);
  return wire;
}

type PortSource = Pick<
  AttachSpec,
  'key' | 'workloadId' | 'ifName' | 'ips' | 'mtu' | 'defaultRoute' | 'routes'
>;

/** The port's fields; its strings are copies of their own, since desired state keeps them for long. */
export function portFields(src: PortSource, mac = macForKey(src.key), options?: DpuPortOptions): PortFields {
  return {
    name: ownString(src.key),
    mac: ownString(mac),
    ips: src.ips.map((ip) => ownString(hostPrefix(ip))),
    routes: toWireRoutes(portRoutes(src)),
    mtu: src.mtu,
    vlan: 0,
    vni: 0,
    workloadId: ownString(src.workloadId),
    ifName: ownString(src.ifName),
    qos: wireQos(options),
    pf: options?.pf,
  };
}

export function portFieldsFromView(
  att: AttachmentView,
  storedMac: string | undefined,
  options?: DpuPortOptions,
): PortFields {
  return portFields(att, storedMac ?? macForKey(att.key), options);
}

const toggle = (v: boolean | undefined): Toggle =>
  v === undefined ? Toggle.TOGGLE_UNSPECIFIED : v ? Toggle.TOGGLE_ON : Toggle.TOGGLE_OFF;

const LINK_STATES = {
  auto: VfLinkState.VF_LINK_STATE_AUTO,
  enable: VfLinkState.VF_LINK_STATE_ENABLE,
  disable: VfLinkState.VF_LINK_STATE_DISABLE,
} as const;

/** The QoS message for the options, or undefined when they set none of it (a port without QoS). */
export function wireQos(o: DpuPortOptions | undefined): Qos | undefined {
  if (!o) return undefined;
  const qos: Qos = {
    maxTxRateMbps: o.maxTxRateMbps ?? 0,
    minTxRateMbps: o.minTxRateMbps ?? 0,
    spoofCheck: toggle(o.spoofCheck),
    trust: toggle(o.trust),
    linkState: o.linkState ? LINK_STATES[o.linkState] : VfLinkState.VF_LINK_STATE_UNSPECIFIED,
  };
  const empty =
    !qos.maxTxRateMbps &&
    !qos.minTxRateMbps &&
    qos.spoofCheck === Toggle.TOGGLE_UNSPECIFIED &&
    qos.trust === Toggle.TOGGLE_UNSPECIFIED &&
    qos.linkState === VfLinkState.VF_LINK_STATE_UNSPECIFIED;
  return empty ? undefined : qos;
}

/** The options a port was given, back from its wire form (stored with the attachment). */
export function portOptions(port: Pick<Port, 'qos' | 'pf'>): DpuPortOptions | undefined {
  const q = port.qos;
  const out: DpuPortOptions = {};
  if (q?.maxTxRateMbps) out.maxTxRateMbps = q.maxTxRateMbps;
  if (q?.minTxRateMbps) out.minTxRateMbps = q.minTxRateMbps;
  if (q && q.spoofCheck !== Toggle.TOGGLE_UNSPECIFIED) out.spoofCheck = q.spoofCheck === Toggle.TOGGLE_ON;
  if (q && q.trust !== Toggle.TOGGLE_UNSPECIFIED) out.trust = q.trust === Toggle.TOGGLE_ON;
  const ls = (Object.keys(LINK_STATES) as Array<keyof typeof LINK_STATES>).find(
    (k) => LINK_STATES[k] === q?.linkState,
  );
  if (ls) out.linkState = ls;
  if (port.pf !== undefined) out.pf = port.pf;
  return Object.keys(out).length ? out : undefined;
}

/** The features of an agent (Capabilities.features) that a port needs, with what each is for. */
export function featuresNeeded(port: Pick<Port, 'qos' | 'pf'>): Array<[feature: string, what: string]> {
  const q = port.qos;
  const out: Array<[string, string]> = [];
  if (q?.maxTxRateMbps || q?.minTxRateMbps) out.push(['qos-rate', 'transmit rate limits']);
  if (q && q.spoofCheck !== Toggle.TOGGLE_UNSPECIFIED) out.push(['qos-spoof-check', 'spoof checking']);
  if (q && q.trust !== Toggle.TOGGLE_UNSPECIFIED) out.push(['qos-trust', 'VF trust']);
  if (q && q.linkState !== VfLinkState.VF_LINK_STATE_UNSPECIFIED)
    out.push(['qos-link-state', 'a VF link state']);
  if (port.pf !== undefined) out.push(['pf-select', 'choosing the PF']);
  return out;
}

import { VXLAN_OVERHEAD } from '../../lib/overlay';
import {
  DEFAULT_POD_MTU,
  type FabricDataplane,
  type FabricMode,
  type FabricSettings,
  type LocalNode,
  type PodMtuSource,
} from '../fabric-dataplane';

// A pod's packets to another node travel inside the underlay's: over VXLAN they carry an outer IP,
// UDP, VXLAN and Ethernet header (lib/overlay/overhead.ts). A pod MTU that ignores it is
// fragmented or, with don't-fragment set, dropped in silence. In hybrid mode one pod talks over both
// paths, so the encapsulation's MTU is the one that fits both.

/** Bytes the mode's encapsulation adds to a pod's packet on an underlay of IP version `version`. */
export function encapsulationOverheadOn(mode: FabricMode, version: 4 | 6): number {
  return mode === 'vxlan' || mode === 'hybrid' ? VXLAN_OVERHEAD[version] : 0;
}

/** Bytes the mode's encapsulation adds to a pod's packet on this node's underlay. */
export function encapsulationOverhead(mode: FabricMode, local: Pick<LocalNode, 'underlay'>): number {
  return encapsulationOverheadOn(mode, (local.underlay[0] ?? '').includes(':') ? 6 : 4);
}

/** The largest pod MTU that fits every path of the mode. */
export function podMtu(mode: FabricMode, local: Pick<LocalNode, 'underlay' | 'mtu'>): number {
  return local.mtu - encapsulationOverhead(mode, local);
}

/**
 * The largest MTU the fabric carries for a pod behind this node's dataplane. Pods behind tunnel
 * endpoints (DPUs) are encapsulated by theirs whatever the mode, each on its own uplink: a pod placed
 * on one gets that one's overlay MTU; one not placed (or on an endpoint not listed yet) the smallest,
 * which fits any of them.
 */
export function carriedMtu(mode: FabricMode, local: LocalNode, endpoint?: string): number {
  const endpoints = local.endpoints ?? [];
  if (endpoints.length === 0) return podMtu(mode, local);
  const overlay = (e: { mtu: number; underlay: string }): number =>
    podMtu('vxlan', { mtu: e.mtu, underlay: [e.underlay] });
  const own = endpoints.find((e) => e.id === endpoint);
  return own ? overlay(own) : Math.min(...endpoints.map(overlay));
}

/**
 * What the fabric carries, as its dataplanes last said, for the networks whose MTU is "auto" (0).
 * The fabric controller tells it each dataplane's node at prepare() and at every change (the
 * uplink's MTU changed; a DPU comes or goes); a network asks it for the MTU of a new
 * interface, and the interfaces attached before are brought to it in place (mtu-alignment.ts).
 */
export class FabricPodMtu implements PodMtuSource {
  private readonly locals = new Map<FabricDataplane, LocalNode>();
  /** What each dataplane carried when last learnt, to tell a change from a repeat. */
  private readonly carriedBefore = new Map<FabricDataplane, string>();
  private readonly listeners: Array<() => void> = [];

  /** settings: the fabric's, absent when it is off. */
  constructor(private readonly settings?: Pick<FabricSettings, 'mode' | 'nodeIp'>) {}

  /** A dataplane's node, as prepare() or a later change gave it. */
  learn(dataplane: FabricDataplane, local: LocalNode): void {
    this.locals.set(dataplane, local);
    if (!this.settings) return;
    // A node's record changes for reasons of its own (a DPU's status); only what it carries matters.
    const mode = this.settings.mode;
    const carried = [
      carriedMtu(mode, local),
      ...(local.endpoints ?? []).map((e) => `${e.id}=${carriedMtu(mode, local, e.id)}`),
    ].join(',');
    if (this.carriedBefore.get(dataplane) === carried) return;
    this.carriedBefore.set(dataplane, carried);
    for (const listener of this.listeners) listener();
  }

  /**
   * Calls `listener` whenever what a dataplane carries becomes known or changes (attachments made
   * before follow it: core/reconcile/mtu-alignment.ts).
   */
  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  /**
   * What an existing interface behind this dataplane should have now, where auto: what the fabric
   * carries; 1500 when the fabric is off or the backend has no part in it; undefined while the
   * dataplane is not prepared (the 1500-byte guess of auto() is right for a new interface, which
   * must not wait, but is no reason to change one that runs).
   */
  settled(dataplane: FabricDataplane | undefined, endpoint?: string): number | undefined {
    if (!this.settings || !dataplane) return DEFAULT_POD_MTU;
    return this.carried(dataplane, endpoint);
  }

  /**
   * The MTU the fabric carries for a pod behind this dataplane (on this endpoint); undefined when the
   * fabric is off, the backend has no part in it, or it is not prepared yet.
   */
  carried(dataplane: FabricDataplane | undefined, endpoint?: string): number | undefined {
    const local = dataplane && this.locals.get(dataplane);
    if (!this.settings || !local) return undefined;
    return carriedMtu(this.settings.mode, local, endpoint);
  }

  /**
   * The MTU of a new interface whose network's MTU is auto. Attach never waits for the fabric: before
   * its dataplane is prepared (prepare failed and is being retried) the node's uplink is not known,
   * so the interface gets what a standard 1500-byte underlay carries in the mode — right on most
   * networks, too small (never too large) on a jumbo-frame one, and named in Status if the uplink turns
   * out smaller.
   */
  auto(dataplane: FabricDataplane | undefined, endpoint?: string): number {
    if (!this.settings || !dataplane) return DEFAULT_POD_MTU;
    return (
      this.carried(dataplane, endpoint) ??
      podMtu(this.settings.mode, { mtu: DEFAULT_POD_MTU, underlay: [this.settings.nodeIp] })
    );
  }
}

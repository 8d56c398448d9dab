import type { OwnPrefixes } from '../fabric-dataplane';
import type { Vtep } from '../peer-source';

// Where this node's gateway keys (the peers' neighbour keys for it, held on its VXLAN device) come
// from, as the fabric controller hands them to the dataplanes and the record: either the ranges whose
// first address no pod gets (a configured pool, a Node's podCIDRs), or, where a pool hands out every
// address (etcd blocks), the tunnel addresses the node reserved for itself (core/fabric/tunnel-addresses.ts),
// which its record then publishes.

export type TunnelAddressesNow = () => { 4?: string; 6?: string };

export class OwnKeys {
  constructor(
    private readonly keyRanges?: () => string[],
    private readonly tunnelAddresses?: TunnelAddressesNow,
  ) {}

  /** Whether there is anything to follow: the controller looks for a change only then. */
  get followed(): boolean {
    return this.keyRanges !== undefined || this.tunnelAddresses !== undefined;
  }

  /** What the keys depend on now, as text: a change means the dataplanes are told again. */
  fingerprint(): string {
    const t = this.tunnel();
    return [...[...new Set(this.keyRanges?.() ?? [])].sort(), t[4] ?? '', t[6] ?? ''].join(',');
  }

  /**
   * The book's cut (if any) with the keys' source added: the tunnel addresses once there is one (until
   * then the device is left alone), else the key ranges. Undefined when neither is known.
   */
  withKeys(cut: OwnPrefixes | undefined): OwnPrefixes | undefined {
    if (this.tunnelAddresses) {
      const keys = this.tunnel();
      if (keys[4] === undefined && keys[6] === undefined) return cut;
      return cut ? { ...cut, keys } : { ranges: [], byEndpoint: new Map(), keys };
    }
    if (!this.keyRanges) return cut;
    const keyRanges = [...new Set(this.keyRanges())];
    return cut ? { ...cut, keyRanges } : { ranges: keyRanges, byEndpoint: new Map(), keyRanges };
  }

  /** The VTEP as published: with the tunnel addresses as its gateways, when there are some. */
  vtep(vtep: Vtep): Vtep {
    const gateways = this.tunnel();
    return gateways[4] === undefined && gateways[6] === undefined ? vtep : { ...vtep, gateways };
  }

  /** The tunnel addresses now, per family present. */
  private tunnel(): { 4?: string; 6?: string } {
    const t = this.tunnelAddresses?.() ?? {};
    return { ...(t[4] !== undefined ? { 4: t[4] } : {}), ...(t[6] !== undefined ? { 6: t[6] } : {}) };
  }
}

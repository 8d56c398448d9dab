import { DEFAULT_NETWORK, type BackendName, type DaemonConfig } from '../config';

// The networks the daemon serves, every default filled in: the configured ones, or the one `default`
// network made of the daemon's own backend, podCidrs, mtu and masquerade. Its own file because it is
// what the networks (core/ipam/network.ts) and the wiring are built from, after the configuration has
// been checked; the configuration itself keeps only what a person writes.

/** A network with every default filled in. */
export interface ResolvedNetwork {
  name: string;
  backend: BackendName;
  podCidrs: string[];
  /** 0 = auto: what the fabric carries (see core/fabric/pod-mtu.ts), else 1500. */
  mtu: number;
  defaultRoute: boolean;
  routes: string[];
  masquerade: boolean;
}

/** The networks the daemon serves: the configured ones, or the one `default` network made of the flags. */
export function effectiveNetworks(c: DaemonConfig): ResolvedNetwork[] {
  if (c.networks.length === 0)
    return [
      {
        name: DEFAULT_NETWORK,
        backend: c.backend,
        podCidrs: c.podCidrs,
        mtu: c.mtu,
        defaultRoute: true,
        routes: [],
        masquerade: c.masquerade,
      },
    ];
  return c.networks.map((n) => ({
    name: n.name,
    backend: n.backend,
    podCidrs: n.podCidrs ?? [],
    mtu: n.mtu ?? c.mtu,
    defaultRoute: n.defaultRoute ?? n.name === DEFAULT_NETWORK,
    routes: n.routes ?? [],
    masquerade: n.masquerade ?? c.masquerade,
  }));
}

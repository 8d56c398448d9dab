import type { DaemonConfig } from '../config';
import type { FabricMode, FabricSettings } from '../fabric-dataplane';

// What the configuration makes of the fabric: the mode in effect ("auto" resolved against the pool
// source) and the settings its dataplanes are prepared with. Its own file because it is the fabric's
// reading of the configuration, taken by the daemon's wiring and the config command, not part of the
// configuration's check.

/** What the fabric's dataplanes are prepared with; undefined when the fabric is off. */
export function fabricSettings(c: DaemonConfig): FabricSettings | undefined {
  const mode = fabricMode(c);
  if (mode === 'off') return undefined;
  return {
    mode,
    nodeIp: c.fabric.nodeIp,
    vni: c.fabric.vni,
    port: c.fabric.port,
    // The etcd source knows the cluster's ranges; with the others only when configured.
    clusterCidrs: c.poolSource === 'etcd' ? c.etcd.clusterCidrs : c.fabric.clusterCidrs,
    sourceFilter: c.fabric.sourceFilter,
    probeIntervalSeconds: c.fabric.probeIntervalSeconds,
  };
}

/** The fabric mode in effect: "auto" is off with the static pool source, hybrid with a cluster one. */
export function fabricMode(c: DaemonConfig): FabricMode {
  if (c.fabric.mode !== 'auto') return c.fabric.mode;
  return c.poolSource === 'static' ? 'off' : 'hybrid';
}

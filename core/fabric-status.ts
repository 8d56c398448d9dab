import type { FabricMode, PeerPath, PeerProbe, PeerSeenBy } from './fabric-dataplane';
import type { PeerSourceStatus, TunnelEndpoint, Vtep } from './peer-source';

// The fabric as Status and `workloadnet peers` show it: whether this node reaches the others' pods
// now, and per peer how.

export interface FabricPeerStatus {
  node: string;
  underlay: string[];
  /** How it is reached now (external: routes come from elsewhere; this node only publishes). */
  path: PeerPath['path'];
  prefixes: string[];
  /** Why it is unreachable, or that it is kept only by the withdrawal grace. */
  reason: string;
  /** When its record, prefixes or path last changed as this node saw it (ISO time). */
  lastChange: string;
  /** When it left its source (ISO time), while the withdrawal grace still keeps it programmed. */
  withdrawnAt?: string;
  /** Its DPUs' endpoints, each with its slices. */
  endpoints?: TunnelEndpoint[];
  /** How this node's DPUs see it. */
  seenBy?: PeerSeenBy[];
  /** What this node's data-path probes say of it (degraded is shown, never withdrawn for). */
  probe?: PeerProbe;
}

/** What Status shows of the host port (core/host-port/host-port.ts). */
export interface HostPortStatus {
  /** "attached"; "pending" (not attached: `reason` says why); "off" (dpu.hostPort is false). */
  state: 'attached' | 'pending' | 'off';
  network: string;
  interface: string;
  /** The host namespace it is attached in (empty: the daemon's own). */
  netns: string;
  addresses: string[];
  /** The DPU agent holding it. */
  dpu: string;
  /** The ranges routed through it (left out when Status leaves out the peer rows). */
  routes: string[];
  /** How many ranges are routed through it (given also when `routes` is left out). */
  routeCount: number;
  /** Why it is pending or off, or how it is degraded (its DPU away); empty when all is well. */
  reason: string;
}

export interface FabricStatus {
  mode: FabricMode;
  /** The peer source has a full list and the last peer table is in the dataplane. */
  ready: boolean;
  reasons: string[];
  /** What works but not well (a pod MTU larger than the fabric carries); not part of `ready`. */
  warnings: string[];
  /** This node as it publishes itself (empty until the dataplane has found its underlay). */
  node: string;
  underlay: string[];
  uplink: string;
  /** MTU of the uplink. */
  mtu: number;
  /** The largest pod MTU that fits every path of this mode (the uplink's less the encapsulation). */
  podMtu: number;
  vtep?: Vtep;
  /** This node's DPUs that carry the fabric, with their slices (dpu backend). */
  endpoints?: TunnelEndpoint[];
  /** Addresses held outside the slices of the DPU holding their port (each announced as a /32 or /128). */
  borrowed?: number;
  /** Slices each pod range is cut into (dpu.fabricSlices, or the stored cut while it is kept). */
  slices?: number;
  source?: PeerSourceStatus;
  peers: FabricPeerStatus[];
  /** Rows of the last table applied (given also when `peers` is left out). */
  peerCount: number;
  /** Objects of ours in the kernel now. */
  objects: { routes: number; neighbours: number; fdb: number };
  /** Objects put back after they were removed or changed behind our back, since start. */
  repairs: number;
  /**
   * Packets the source filter dropped (VXLAN not from a peer, for another VNI or inner source; hybrid's
   * direct path from a peer not owning the source), as the kernel counts them since the filter was created; absent when no filter is programmed.
   */
  filteredPackets?: number;
  /** When the peer table was last applied (ISO time). */
  lastApply?: string;
  /** The host's path into the overlay through a DPU (core/host-port/host-port.ts); absent without DPUs on the fabric. */
  hostPort?: HostPortStatus;
}

import type { Peer, TunnelEndpoint, Vtep } from './peer-source';

// What a backend does for the fabric: make the node's own namespace (or the DPUs) reach every peer's
// prefixes. The core hands it the peer table; the backend programs only objects of its own (its
// route protocol, its VXLAN device) and never a foreign one.

export type FabricMode = 'off' | 'routed' | 'vxlan' | 'hybrid' | 'external';

export interface FabricSettings {
  mode: Exclude<FabricMode, 'off'>;
  /** The node address to use; empty: the address of the interface holding the default route. */
  nodeIp: string;
  vni: number;
  /** VXLAN UDP port (4789 by default). */
  port: number;
  /** Cluster ranges: a lowest-priority unreachable route covers them, so an unknown peer fails fast. */
  clusterCidrs: string[];
  /**
   * Accept VXLAN only from the peers' underlay addresses (fabric.sourceFilter); absent means true. A
   * dataplane that cannot filter says so in its report's warnings and works unfiltered.
   */
  sourceFilter?: boolean;
  /** Seconds between two data-path probes of one peer (fabric.probeIntervalSeconds); 0 or absent: none. */
  probeIntervalSeconds?: number;
  /**
   * This node's name: with the underlay address, what its VTEP MAC is derived from (two nodes with one
   * address on different underlays get different MACs). The controller gives it.
   */
  nodeName?: string;
}

/** This node on the underlay, as the dataplane found it at prepare(). */
export interface LocalNode {
  /** The node's underlay addresses, the preferred first. */
  underlay: string[];
  /** The uplink: the interface holding the node address. */
  uplink: string;
  /** MTU of the uplink. */
  mtu: number;
  /** Subnets directly connected on the uplink (CIDR text): peers inside them are routed directly. */
  subnets: string[];
  /** The VXLAN endpoint, in modes that run one. */
  vtep?: Vtep;
  /**
   * The node's DPUs that carry the fabric, with the prefixes apply() last gave each (empty before
   * the first). Changes as agents come and go: the dataplane tells onLocalChange listeners.
   */
  endpoints?: TunnelEndpoint[];
}

/** This node's own prefixes, as the core's allocation cut them: what each endpoint (DPU) owns. */
export interface OwnPrefixes {
  /** The node's pod ranges (every pool of every network using the backend). */
  ranges: string[];
  /** Per endpoint id: its slices of the ranges and the /32 (/128) it borrowed outside them. */
  byEndpoint: ReadonlyMap<string, readonly string[]>;
  /**
   * The ranges the peers route to this node whose first address no pod gets: per family, the first
   * address of the lowest (of what no endpoint covers) is this node's gateway key, the peers' neighbour
   * key for it, held on the node's VXLAN device. Absent: not known, the device is left as it is.
   */
  keyRanges?: readonly string[];
  /**
   * This node's tunnel addresses (core/fabric/tunnel-addresses.ts), when its pools hand out every address:
   * the gateway keys themselves, in place of those keyRanges would give.
   */
  keys?: { 4?: string; 6?: string };
}

/** How one peer is reached now. */
export interface PeerPath {
  node: string;
  /** direct: routes via the peer's underlay address; vxlan: through our device; unreachable: neither. */
  path: 'direct' | 'vxlan' | 'unreachable' | 'external';
  /** Why a peer is unreachable (an indirect peer in routed mode, no VTEP, no common family). */
  reason?: string;
  prefixes: string[];
  /** How each of this node's DPUs sees the peer (their PeerStatus), when DPUs carry the fabric. */
  seenBy?: PeerSeenBy[];
  /** What this node's data-path probes to the peer say, when it probes (fabric.probeIntervalSeconds). */
  probe?: PeerProbe;
  /** What the peer states that another peer (or this node) already holds: refused, and named in `reason`. */
  refused?: RefusedClaim[];
}

/** An identity a peer states: a prefix, its VTEP MAC, its underlay address, or a gateway key. */
export type ClaimKind = 'prefix' | 'mac' | 'underlay' | 'gateway';

/** A claim refused to a peer because `holder` (a peer, `peer/endpoint`, or "this node") holds it. */
export interface RefusedClaim {
  claim: ClaimKind;
  value: string;
  holder: string;
}

/**
 * The data-path probes to one peer. `unknown`: no answer yet (it may run no key to answer on);
 * `reachable`: the last probe was answered; `degraded`: it answered before, and the last few probes
 * were not. A degraded peer stays programmed: only its source's word (with the grace) removes it.
 */
export interface PeerProbe {
  state: 'unknown' | 'reachable' | 'degraded';
  /** The address probed: the peer's gateway key over VXLAN, its underlay address when routed. */
  target: string;
  /** Round-trip time of the last answer, and the median of the recent ones (ms). */
  rttMs?: number;
  medianRttMs?: number;
  /** Probes unanswered in a row. */
  lost: number;
  /** The peer has answered at least once since this node began probing it. */
  answered: boolean;
  /** When `state` last changed (ISO time). */
  since: string;
}

/** One DPU's word on one peer. */
export interface PeerSeenBy {
  /** The DPU's endpoint id (agent id). */
  endpoint: string;
  reachable: boolean;
  offloaded: boolean;
  txPackets: number;
  rxPackets: number;
  lastError: string;
}

export interface FabricReport {
  /** Everything the last apply asked for is in the kernel. */
  ready: boolean;
  reasons: string[];
  peers: PeerPath[];
  /** Objects of ours in the kernel now. */
  objects: { routes: number; neighbours: number; fdb: number };
  /** Objects put back after they were removed or changed behind our back. */
  repairs: number;
  /**
   * Packets the source filter dropped (VXLAN not from a peer, for another VNI or inner source; hybrid's
   * direct path from a peer not owning the source) (the kernel's counter,
   * kept across restarts); absent when no source filter is programmed.
   */
  filteredPackets?: number;
  /** What works but not as configured (the source filter off for want of nft); not part of `ready`. */
  warnings?: string[];
}

export interface FabricDataplane {
  /**
   * Finds the node's underlay and, in modes that need it, creates the VXLAN device or adopts the one
   * already there (never recreated: an established peer loses no packet across a restart). Refuses,
   * changing nothing, when a foreign device holds the VXLAN port.
   */
  prepare(settings: FabricSettings): Promise<LocalNode>;
  /**
   * Makes the kernel match the peers: per remote prefix one route, per VXLAN peer one permanent
   * neighbour and one FDB entry, the catch-all; objects of ours that match no peer are removed. Called
   * only once the peer source has a full list.
   */
  apply(peers: readonly Peer[], own?: OwnPrefixes): Promise<FabricReport>;
  /**
   * The node as it is now, when it changes after prepare() (a DPU connected or left): the controller
   * publishes the new record and applies again.
   */
  onLocalChange?(listener: (local: LocalNode) => void): void;
  /** The state of the last apply (and of the repairs since); peers carry their probes as of now. */
  report(): FabricReport;
  /** The probes' word per peer (by node name) as of now; absent: this dataplane does not probe. */
  probes?(): ReadonlyMap<string, PeerProbe>;
  /** Called with a peer's name when its probe state changes (the controller may withdraw it sooner). */
  onProbeChange?(listener: (node: string) => void): void;
  /** Stops watching for drift; the kernel state stays (routes keep working while the daemon is away). */
  stop(): Promise<void>;
}

/** The MTU of a pod interface when nothing says otherwise: the fabric is off, or its backend has none. */
export const DEFAULT_POD_MTU = 1500;

/**
 * What the fabric carries for a pod, asked by a network whose MTU is "auto" (core/fabric/pod-mtu.ts
 * answers). A contract here, so that the networks (core/ipam/) ask without importing the fabric's room.
 */
export interface PodMtuSource {
  /** The MTU of a new interface behind this dataplane (on this endpoint); never waits for the fabric. */
  auto(dataplane: FabricDataplane | undefined, endpoint?: string): number;
  /** What an existing interface should have now; undefined while the dataplane is not prepared. */
  settled(dataplane: FabricDataplane | undefined, endpoint?: string): number | undefined;
  /** What the fabric carries for a pod behind this dataplane; undefined while off or not prepared. */
  carried(dataplane: FabricDataplane | undefined, endpoint?: string): number | undefined;
  /** Calls `listener` whenever what a dataplane carries becomes known or changes. */
  onChange(listener: () => void): void;
}

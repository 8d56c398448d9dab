// Where the fabric learns the other nodes: a peer source, beside the pool source and from the same
// place (a file, etcd, the Kubernetes API). It publishes this node's record and delivers every other
// node's, with the prefixes the source itself vouches that node owns (etcd block ownership, a Node's
// podCIDRs, the file's word). Sources never touch a dataplane: the fabric controller takes their table
// to the backend.

/** One node as the fabric needs it: where it is on the underlay and how to tunnel to it. */
export interface NodeRecord {
  /** The node's name (the same name its pool source uses). */
  node: string;
  /** Underlay addresses the node is reached at, the preferred first (one per family it has). */
  underlay: string[];
  /** MTU of the node's uplink. */
  mtu: number;
  /** The node's VXLAN endpoint, when it runs one (modes vxlan and hybrid). */
  vtep?: Vtep;
  /** The kernel boot id of the node when it published: a new one means the node rebooted. */
  bootId: string;
  /**
   * Tunnel endpoints of the node other than its own VXLAN device: its DPUs, each owning slices of the
   * node's prefixes. Remote nodes route each endpoint's prefixes to that endpoint; what no endpoint
   * claims goes to the node's own vtep (or nowhere, when it has none).
   */
  endpoints?: TunnelEndpoint[];
}

/** One DPU of a node on the fabric: its own VTEP and the slices of the node's prefixes behind it. */
export interface TunnelEndpoint {
  /** Unique within the node: the DPU's agent id. */
  id: string;
  /** Its address on the underlay (the DPU's uplink, not the host's). */
  underlay: string;
  /** MTU of its uplink. */
  mtu: number;
  vtep: Vtep;
  /**
   * Slices of the node's prefixes it owns, and /32 (/128) of pods it holds outside them (borrowed);
   * a source drops an endpoint prefix that is not inside the prefixes it vouches the node owns.
   */
  prefixes: string[];
}

export interface Vtep {
  /** MAC of the node's VXLAN device (derived from the node address, so it survives reboots). */
  mac: string;
  vni: number;
  /** UDP destination port. */
  port: number;
  /**
   * The node's tunnel address per family ("4", "6"), held on its VXLAN device: peers use it as the
   * neighbour key of its routes and as its probe target. Absent (older records, static and Kubernetes
   * sources): peers use the first address of its lowest prefix, which those pools never hand out.
   */
  gateways?: { 4?: string; 6?: string };
}

/** Another node, with the prefixes its source vouches that it owns. */
export interface Peer extends NodeRecord {
  /** Remote prefixes (etcd blocks, Kubernetes podCIDRs, the file's), canonical CIDR text. */
  prefixes: string[];
}

export interface PeerSourceStatus {
  kind: string;
  /** A first full list has arrived and the source is following changes. */
  ready: boolean;
  /** Connected to its backing store now (a file source always is). */
  connected: boolean;
  /** Why it is not ready, or what it refused. */
  reasons: string[];
  /** Records the source ignored, each with why (a node announcing a block it does not own). */
  rejected: string[];
}

export interface PeerSource {
  readonly kind: string;
  /**
   * Publishes this node's record (and keeps it published: a lease kept alive, a file left alone) and
   * starts following the others: a full list, then changes from the list's revision.
   */
  start(self: NodeRecord): Promise<void>;
  /**
   * Publishes a changed record of this node (a DPU connected, a slice was borrowed from); a source
   * that publishes nothing (the static file) ignores it.
   */
  update?(self: NodeRecord): Promise<void>;
  /** Stops following; a lease-bound record is left to expire, never deleted on a clean stop. */
  stop(): Promise<void>;
  /**
   * Whether a first full list has arrived. Before it, the table is incomplete: nothing may be removed
   * from the dataplane on its word (a stray is only a stray against a full list).
   */
  readonly synced: boolean;
  /** Every other node, by name; never this node. */
  peers(): ReadonlyMap<string, Peer>;
  /** Called after each change of peers(); the listener coalesces. */
  onChange(listener: () => void): void;
  status(): PeerSourceStatus;
}

/** inversify identifier of the PeerSource. */
export const PEER_SOURCE = Symbol.for('workloadnet.PeerSource');

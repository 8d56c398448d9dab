// The seam between the core and a dataplane. The core owns validation, IP allocation, the store and
// the per-workload serialisation; a backend only programs (and unprograms) what it is told to. A
// backend never sees the store and never allocates: everything it needs arrives in the spec.

import type { FabricDataplane } from './fabric-dataplane';
import type { PolicyDataplane } from './policy-dataplane';
import type { Netns } from '../lib/netns/netns-handle';

/** What place() needs: the interface, before it has addresses. */
export interface PlacementRequest {
  workloadId: string;
  ifName: string;
  network: string;
  /** The DPU agent the caller asked for. */
  dpu?: string;
  dpuPort?: DpuPortOptions;
}

/** Where place() put an interface. */
export interface Placement {
  /** The DPU agent that will hold it (AttachSpec.dpu). */
  dpu: string;
  /**
   * The fabric endpoint whose slices its address comes from: the same agent when it carries the
   * fabric; absent when it does not (its pods are reachable only on this node, and it owns no slice).
   */
  endpoint?: string;
}

/** One address given to a workload interface, already allocated by the core. */
export interface IpAssignment {
  /** 4 or 6. */
  family: 4 | 6;
  /** The address itself, canonical text form ("10.88.0.5", "fd00::5"). */
  address: string;
  /** Gateway the workload should route through for this family (link-local in the routed model). */
  gateway: string;
}

/** A route handed to the workload in results (the backend decides what it actually programs). */
export interface RouteInfo {
  destination: string;
  gateway?: string;
}

/** What the core asks a backend to program for one (workload, interface). */
export interface AttachSpec {
  /** Stable key of the attachment: `${workloadId}/${ifName}`. Backends use it to name objects. */
  key: string;
  workloadId: string;
  /** Interface name inside the workload namespace (validated: 1–15 bytes, no '/', no whitespace). */
  ifName: string;
  /** Absolute path to the workload's network namespace, as the caller gave it. */
  netnsPath: string;
  /** Inode of that namespace: its identity, recorded to detect a path re-pointed later. */
  netnsInode: number;
  /**
   * The workload's namespace, opened and validated by the core (an nsfs network namespace, neither the
   * host's nor the daemon's), open until the call returns: the core closes it. A backend that works
   * inside the namespace uses it and never opens the path itself.
   */
  netns: Netns;
  ips: IpAssignment[];
  mtu: number;
  /** Name of the network the interface belongs to (absent: recorded before networks existed). */
  network?: string;
  /**
   * Whether this interface carries the namespace's default routes (absent means yes). Without them it
   * gets a gateway route scoped to itself and routes to `routes` only, so a second interface in a
   * namespace never clashes with the first (see backends/interface/workload-side.ts).
   */
  defaultRoute?: boolean;
  /** Without the default route: the ranges (CIDRs) routed through this interface's gateway. */
  routes?: string[];
  /** The DPU agent the caller asked for (dpu backend); others ignore it. */
  dpu?: string;
  /** Settings of the port's VF (dpu backend); others ignore them. */
  dpuPort?: DpuPortOptions;
}

/** Per-port VF settings, as SR-IOV CNI names them; an unset field keeps the agent's default. */
export interface DpuPortOptions {
  maxTxRateMbps?: number;
  minTxRateMbps?: number;
  spoofCheck?: boolean;
  trust?: boolean;
  linkState?: 'auto' | 'enable' | 'disable';
  /** The PF the VF must come from. */
  pf?: number;
}

/** What a backend reports back about the programmed interface. */
export interface DataplaneResult {
  /** Interface inside the workload namespace. */
  ifName: string;
  mac: string;
  mtu: number;
  /** Host-side interface name (veth end or VF), if there is one. */
  hostIfName?: string;
  /** Routes programmed inside the workload namespace. */
  routes: RouteInfo[];
  /** Backend-private details the backend needs later (detach/check/reconcile), stored verbatim. */
  details?: Record<string, string | number | boolean>;
}

/** A stored attachment as a backend sees it when asked to tear down, check or reconcile. */
export interface AttachmentView {
  key: string;
  workloadId: string;
  ifName: string;
  netnsPath: string;
  netnsInode: number;
  ips: IpAssignment[];
  mtu: number;
  network?: string;
  /** As in AttachSpec: absent means yes. */
  defaultRoute?: boolean;
  routes?: string[];
  /** Undefined when the attach never completed (a crash or failure mid-way). */
  dataplane?: DataplaneResult;
}

/**
 * How much check() looks at. `full` (the default): everything the backend can compare. `presence`:
 * whether the workload's interface is there at all (netns-missing, netns-changed, interface-missing),
 * for a caller that acts on nothing else: the host port, checked every few seconds, routes every pod
 * range of the cluster, and a full check reads and compares all of them (5,000 at 5,000 peers). A
 * backend may always look at more than it is asked.
 */
export type CheckScope = 'full' | 'presence';

export interface Drift {
  /** Machine-readable kind, e.g. "interface-missing", "address-missing", "mtu-changed". */
  kind: string;
  message: string;
}

export interface ReconcileOutcome {
  /** Host objects of ours that had no attachment and were removed. */
  orphansRemoved: string[];
  /** Keys of attachments whose dataplane is missing (the core decides to repair or release). */
  missing: string[];
  /** Keys of attachments whose dataplane is present and matches. */
  healthy: string[];
  /** Problems that did not prevent reconcile but an operator should see. */
  warnings: string[];
  /**
   * Dataplane objects of ours that no attachment accounts for, kept because the store cannot vouch for
   * their absence (ReconcileOptions.storeIsNew): what the dataplane itself says of each, so the core
   * can adopt it. Empty when the store vouches (orphans are then removed).
   */
  unclaimed?: UnclaimedAttachment[];
}

/** A workload's dataplane found without a row, as far as the dataplane can describe it. */
export interface UnclaimedAttachment {
  /** The attachment key its label names ("<workload id>/<interface>"). */
  key: string;
  /** The workload's addresses, as the dataplane routes them. */
  addresses: string[];
  mtu: number;
  /** What detach needs to remove it (host interface name, and the like). */
  dataplane: DataplaneResult;
}

export interface ReconcileOptions {
  /**
   * The store was created by this start: it has no memory of earlier workloads, so a dataplane object
   * without a row is not evidence of an orphan (the state may have been lost). Such objects are kept
   * and reported in ReconcileOutcome.unclaimed instead of being removed.
   */
  storeIsNew: boolean;
}

export interface BackendHealth {
  ready: boolean;
  /** Why it is not ready, or notes worth showing when it is. */
  reasons: string[];
  /** Free-form facts for `status` (e.g. agent id, last heartbeat). */
  details?: Record<string, string | number | boolean>;
  /** DPU backend: every agent it knows, by id. */
  dpus?: DpuAgentStatus[];
}

/** One DPU agent as the backend sees it (Status.dpus, `workloadnet dpus`). */
export interface DpuAgentStatus {
  id: string;
  connected: boolean;
  healthy: boolean;
  bootId: string;
  protocolVersion: number;
  firmwareVersion: string;
  agentVersion: string;
  pfs: Array<{
    index: number;
    name: string;
    pciAddress: string;
    linkState: string;
    speedMbps: number;
    mtu: number;
    vfsTotal: number;
    vfsFree: number;
  }>;
  vfsTotal: number;
  vfsFree: number;
  ports: number;
  lastHeartbeatAgeMs?: number;
  sessionId?: string;
  peer?: string;
  synced: boolean;
  /** Why it is not healthy. */
  reason?: string;
  /** Its part of the fabric, while the fabric is on (dpu backend). */
  fabric?: DpuFabricStatus;
}

/** One DPU agent's part of the fabric (`workloadnet dpus`). */
export interface DpuFabricStatus {
  /** It speaks protocol version 3, names "fabric-vxlan" and stated an uplink address. */
  carries: boolean;
  /** Why it does not carry the fabric, or how it carries it now (away); empty when all is well. */
  note: string;
  /** Its VTEP's underlay address. */
  vtep: string;
  /** Fabric objects it acknowledged at their current generations, of those it should hold. */
  objectsAcked: number;
  objectsDesired: number;
  /** Tunnel endpoints it reports reachable, of those it should hold. */
  peersReachable: number;
  peersTotal: number;
}

/**
 * A dataplane. All methods may be called concurrently for different keys; the core never calls two
 * methods concurrently for the same key.
 */
export interface Backend {
  /** Short name ("linux", "dpu") reported in results and metrics. */
  readonly name: string;
  /** Prepare the node (e.g. enable forwarding). Fails with a clear message if it cannot run here. */
  start(): Promise<void>;
  /**
   * What attach(spec) will report, decided before anything is programmed (interface names, MAC,
   * routes), so that the core can record the attachment while the dataplane is being programmed.
   * What only the dataplane can tell (an agent's endpoint) may be left out and reported by attach().
   */
  plan(spec: AttachSpec): DataplaneResult;
  /**
   * Program one interface as planned. Returns the plan, completed with what only programming could
   * tell. On failure the backend must leave nothing of its own behind (it rolls back its own steps)
   * and throw a WorkloadNetError (or any Error, mapped to INTERNAL).
   */
  attach(spec: AttachSpec, planned: DataplaneResult): Promise<DataplaneResult>;
  /**
   * Remove what attach created. Must succeed when things are already gone (namespace vanished, link
   * missing, attach never finished) and throw only for real failures.
   */
  detach(att: AttachmentView): Promise<void>;
  /** Compare the dataplane with the stored attachment; an empty list means no drift. */
  check(att: AttachmentView, scope?: CheckScope): Promise<Drift[]>;
  /**
   * Called once at start-up with every stored attachment; removes orphans (or, when the store is new,
   * reports them as unclaimed), reports missing ones.
   */
  reconcile(atts: AttachmentView[], opts?: ReconcileOptions): Promise<ReconcileOutcome>;
  health(): Promise<BackendHealth>;
  /**
   * "degraded" when the attachment's dataplane is out of the backend's reach for now (its DPU agent is
   * away) though it is still programmed; "ready" when not implemented.
   */
  attachmentState?(att: AttachmentView): 'ready' | 'degraded';
  /**
   * Where a new interface will live, chosen before its address is allocated so that the address can
   * come from that place's slice of the node's prefixes (a DPU's, core/ipam). The core passes the
   * place back as AttachSpec.dpu. Throws as attach would when no place can take the interface.
   */
  place?(spec: PlacementRequest): Placement | Promise<Placement>;
  /**
   * Gives a programmed interface another MTU in place, without re-attaching it (same interfaces, same
   * addresses): both ends of the link, and the routes on it that carry an MTU of their own. `netns` is
   * the attachment's namespace, opened and checked by the core, which holds the workload's lock and
   * records the new MTU once this returns. Setting the MTU it already has changes nothing. Not
   * implemented: interfaces keep the MTU they were attached with.
   */
  setMtu?(att: AttachmentView, netns: Netns, mtu: number): Promise<void>;
  /** The backend's part of the fabric between nodes, when it has one (core/fabric). */
  readonly fabric?: FabricDataplane;
  /** Masquerades its pods' traffic leaving the cluster, when it can (core/egress). */
  readonly egress?: EgressDataplane;
  /** Enforces NetworkPolicy for its pods, when it can (core/policy). */
  readonly policy?: PolicyDataplane;
  stop(): Promise<void>;
}

/**
 * A backend's masquerade of its pods' traffic leaving the cluster (core/egress drives it): the Linux
 * backend's nftables table.
 */
/** What to masquerade: sources in `pod`, unless the destination lies in `cluster` (CIDR texts). */
export interface EgressRanges {
  pod: readonly string[];
  cluster: readonly string[];
}

export interface EgressDataplane {
  /**
   * Masquerades exactly `ranges`; with no pod range, removes what it programmed. Cheap when nothing
   * changed since the last call. Throws, in words, when it cannot (a foreign table of its name, no
   * nftables): the caller reports it and calls again later.
   */
  apply(ranges: EgressRanges): Promise<void>;
  /** The next apply checks the dataplane against what it applied, and puts back what was changed by hand. */
  invalidate(): void;
}

/** inversify identifier under which the active backend is bound. */
export const BACKEND = Symbol.for('workloadnet.Backend');

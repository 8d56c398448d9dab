// The node's public surface: what the gRPC API and the CNI adapter both call (core/service implements it,
// behind the start-up gate). Adapters speak their own protocol and translate to these calls; they never
// touch the store or a backend.

import type { DataplaneResult, DpuAgentStatus, DpuPortOptions, Drift, IpAssignment } from './backend';
import type { FabricStatus } from './fabric-status';
import type { AttachmentKey } from './attachment-key';

/** What the pool source reports for Status and metrics (core/ipam/pool-source.ts). */
export interface PoolSourceStatus {
  /** "static", "kubernetes", "etcd". */
  kind: string;
  /** Attaches can be served (the source has supplied its pools). */
  ready: boolean;
  /** The source reaches its backing service (always true for static). */
  connected: boolean;
  /** Why it is not ready, or what an operator should know (a draining range, a lost claim). */
  reasons: string[];
  /** Free-form facts for `status` (node name, blocks owned, last error). */
  details?: Record<string, string | number | boolean>;
}

export interface PodMetadata {
  uid?: string;
  namespace?: string;
  name?: string;
}

export interface AttachCall {
  workloadId: string;
  netnsPath: string;
  ifName: string;
  /** Container/sandbox id when it differs from the workload id (kept as metadata). */
  containerId?: string;
  pod?: PodMetadata;
  /** Per-call MTU override; defaults to the configured MTU. */
  mtu?: number;
  /** DNS settings to echo back in results (CNI runtimeConfig.dns). */
  dns?: DnsInfo;
  /** The network the interface joins; absent means "default". Unknown → INVALID_ARGUMENT. */
  network?: string;
  /** Which entry point created the attachment ("api" by default, "cni"); GC can be scoped to one. */
  origin?: string;
  /** The agent the caller asked for (DPU backend); placement chooses when unset. */
  dpu?: string;
  /** VF settings (DPU backend): rates, spoof check, trust, link state, PF. */
  dpuPort?: DpuPortOptions;
}

export interface DetachCall {
  workloadId: string;
  /** Empty when the runtime no longer knows it (CNI DEL with empty CNI_NETNS). */
  netnsPath?: string;
  /** Empty means every interface of the workload. */
  ifName?: string;
}

export interface DnsInfo {
  nameservers: string[];
  search: string[];
  options: string[];
  domain?: string;
}

/** One attachment as stored and returned by Attach/Get/List. */
export interface Attachment {
  key: string;
  workloadId: string;
  ifName: string;
  netnsPath: string;
  containerId?: string;
  pod?: PodMetadata;
  ips: IpAssignment[];
  mtu: number;
  backend: string;
  /** The network the interface belongs to (rows recorded before networks existed have none: default). */
  network?: string;
  /**
   * Whether the interface carries its namespace's default routes (absent means yes). One interface per
   * namespace does; the others route their network's ranges (`routes`) only.
   */
  defaultRoute?: boolean;
  /** Ranges routed through this interface, when it does not carry the default routes. */
  routes?: string[];
  dns?: DnsInfo;
  dataplane?: DataplaneResult;
  /** Entry point that created it ("api" or "cni"). */
  origin?: string;
  /**
   * "ready" once its dataplane is programmed (an attachment is recorded only then); "degraded" while
   * the backend cannot reach its dataplane (its DPU agent is away), computed when read.
   */
  state: 'ready' | 'degraded';
  createdAt: string;
}

export interface PoolUsage {
  cidr: string;
  family: 4 | 6;
  size: number;
  used: number;
  /** "active" (hands out addresses) or "draining" (keeps those in use, takes no new ones). */
  state?: 'active' | 'draining';
  /** Kind of the pool source that supplied it. */
  source?: string;
  /** The network whose pool it is. */
  network?: string;
}

/** One network as Status shows it. */
export interface NetworkStatus {
  name: string;
  backend: string;
  ready: boolean;
  reasons: string[];
  mtu: number;
  defaultRoute: boolean;
  /** Ranges its interfaces route when they do not carry the default route. */
  routes: string[];
  pools: PoolUsage[];
  backendDetails: Record<string, string | number | boolean>;
  /** Attachments recorded on it. */
  attachments: number;
  /** Running interfaces given its MTU in place since the daemon started (the MTU changed after attach). */
  mtuUpdated: number;
  /** Running interfaces whose MTU could not be changed: they keep another than the network's. */
  mtuFailed: number;
}

export interface ServiceStatus {
  ready: boolean;
  reasons: string[];
  backend: string;
  backendDetails: Record<string, string | number | boolean>;
  pools: PoolUsage[];
  /** Where the pools come from, and whether that source is connected. */
  poolSource?: PoolSourceStatus;
  attachments: number;
  reconcile?: ReconcileSummary;
  /** Every network the node serves (the fields above describe the `default` one's backend). */
  networks?: NetworkStatus[];
  /** DPU backend: its agents. */
  dpus?: DpuAgentStatus[];
  /**
   * The fabric between nodes: whether this node reaches the other nodes' pods, and each peer. Not part
   * of `ready`: a node attaches its own pods without it (and without its peer source).
   */
  fabric?: FabricStatus;
  /** NetworkPolicy, when it is on (core/policy). */
  policy?: PolicyStatus;
}

/** NetworkPolicy on this node (Status.policy, `workloadnet policy`). */
export interface PolicyStatus {
  /** The source has listed everything once and every dataplane holds the rules. */
  ready: boolean;
  reasons: string[];
  /** What the source holds. */
  namespaces: number;
  pods: number;
  policies: number;
  /** This node's pods isolated in a direction, their rules, and the address sets the rules name. */
  podsIsolated: number;
  rules: number;
  sets: number;
  /** Attachments of pods on a network that cannot enforce (dpu.allowUnenforcedPolicy). */
  unenforced: string[];
  /** Each backend that enforces: where, and its last failure. */
  enforcers: Array<{ backend: string; where: string; failure: string; lastApply: string }>;
  denied: { ingress: number; egress: number };
}

export interface ReconcileSummary {
  at: string;
  orphansRemoved: number;
  /** Dataplane objects found without a row beside a new store, recorded as they are. */
  adopted: number;
  repaired: number;
  /** Workloads found gone (their namespace is), and their attachments released. */
  released: number;
  /** Attaches cut short by the daemon's end, removed (cut-short.ts); not in `released`. */
  cutShort: number;
  healthy: number;
  warnings: string[];
}

export interface GcResult {
  removed: string[];
}

/** What a Status call leaves out. */
export interface StatusOptions {
  /** The fabric's per-peer rows (default true): readiness polls and `workloadnet dpus` need counts only. */
  fabricPeers?: boolean;
  /**
   * NetworkPolicy's denied-packet counters (default true): a read of every enforcing dataplane (the
   * kernel's table), which the readiness poll every 5 s has no use for.
   */
  policyCounters?: boolean;
}

export interface WorkloadService {
  attach(call: AttachCall): Promise<Attachment>;
  detach(call: DetachCall): Promise<void>;
  status(opts?: StatusOptions): Promise<ServiceStatus>;
  /**
   * Every attachment. Lazy: rows are read from the store as the caller iterates, so a List of
   * thousands never holds them all at once.
   */
  list(): Promise<Iterable<Attachment>>;
  /**
   * Up to `limit` attachments in List's order, after the one keyed `after` (from the first when it
   * is undefined): ListStream reads the table a page at a time with it.
   */
  listPage(after: AttachmentKey | undefined, limit: number): Promise<Attachment[]>;
  /** Attachments of one workload (all interfaces, or one when ifName is given). NOT_FOUND when none. */
  get(workloadId: string, ifName?: string): Promise<Attachment[]>;
  /** Drift for one attachment; NOT_FOUND when it is unknown. */
  check(workloadId: string, ifName: string): Promise<Drift[]>;
  /**
   * Keep exactly the attachments named (workloadId + ifName) and detach all others — only among those
   * created through `origin` when it is given, so a CNI runtime's GC never removes API-made attachments,
   * and only among those of `network` when it is given (a runtime lists one network's at a time).
   */
  gc(
    keep: Array<{ workloadId: string; ifName?: string }>,
    origin?: string,
    network?: string,
  ): Promise<GcResult>;
  /**
   * What the periodic leak sweep does, now: detach attachments whose namespace was seen gone on the
   * previous sweep too (released), and note those seen gone for the first time (suspected). With
   * `dryRun`, nothing changes and nothing counts as a sighting.
   */
  sweep(dryRun: boolean): Promise<SweepResult>;
  /**
   * What NetworkPolicy enforces for this node's pods: all (both empty), a namespace's, or one pod's.
   * FAILED_PRECONDITION when NetworkPolicy is off.
   */
  policy?(namespace: string, pod: string): Promise<PodPolicyView[]>;
}

/** One of this node's pods under NetworkPolicy (`workloadnet policy`). */
export interface PodPolicyView {
  /** `namespace/name`. */
  pod: string;
  attachment: string;
  backend: string;
  /** "host" or "dpu". */
  where: string;
  hostInterface: string;
  ips: string[];
  policies: string[];
  ingressIsolated: boolean;
  egressIsolated: boolean;
  ingress: PolicyRuleView[];
  egress: PolicyRuleView[];
  sets: Array<{ name: string; prefixes: string[] }>;
  /** RFC 3339; empty when not known. */
  appliedAt: string;
  deniedIngress: number;
  deniedEgress: number;
}

export interface PolicyRuleView {
  sets: string[];
  anyPeer: boolean;
  /** "TCP/80", "UDP/80-81", "SCTP". */
  ports: string[];
  anyPort: boolean;
}

/** What a leak sweep did (or, in a dry run, would do). */
export interface SweepResult {
  /** Detached by this sweep (or, in a dry run, the ones it would detach). */
  released: string[];
  /** Seen gone for the first time; the next sweep detaches them if they are still gone. */
  suspected: string[];
  /** Why a periodic sweep would release nothing now (a forced one releases all the same). */
  held?: string;
}

/** inversify identifier of what the API and the endpoints serve. */
export const WORKLOAD_SERVICE = Symbol.for('workloadnet.WorkloadService');

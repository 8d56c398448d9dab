import * as os from 'node:os';
import type { FabricConfig } from './fabric-config';
import { OPTION_DOCS } from './option-docs';

// The daemon's configuration: its shape and embedded defaults, which a JSON file (--config, read in
// core/daemon/config-file.ts) and then flags override, checked as a whole in core/daemon/config-check.ts.
// Each option is described once, in OPTION_DOCS, which the reference in docs/ and the CLI help are
// checked against.

export type BackendName = 'linux' | 'dpu';
export type PoolSourceName = 'static' | 'kubernetes' | 'etcd';
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface LinuxConfig {
  /** Netns whose links face the workloads; empty = the daemon's own namespace (the normal case). */
  hostNetns: string;
  /** Link group that marks host interfaces created by workloadnet (orphans are found by it). */
  linkGroup: number;
  detachGroup: number;
  /** Keep the kernel's IPv6 link-local (fe80::) addresses on interfaces without IPv6 addresses. */
  ipv6LinkLocal: boolean;
}

export interface DpuConfig {
  /** Unix socket on which DPU agents connect. */
  agentSocket: string;
  /** Optional TCP listener "HOST:PORT" for agents; requires TLS. */
  agentListen: string;
  tlsCert: string;
  tlsKey: string;
  tlsCa: string;
  /** How long Attach waits for the agent to acknowledge a port. */
  ackTimeoutMs: number;
  heartbeatIntervalMs: number;
  /** Slices each pod range is cut into, one per DPU carrying the fabric (a power of two). */
  fabricSlices: number;
  /** With the fabric on: the host's namespace reaches the overlay through a DPU (core/host-port/host-port.ts). */
  hostPort: boolean;
  /** etcd pool source: a DPU unseen this long gives back its empty blocks (sources/etcd/dpu-liveness.ts). */
  goneGraceSeconds: number;
  /** With NetworkPolicy on, a pod on a DPU whose agent cannot enforce it is attached (and reported), not refused. */
  allowUnenforcedPolicy: boolean;
}

export interface EtcdConfig {
  /** Client URLs of the etcd cluster's members. */
  endpoints: string[];
  /** Cluster-wide ranges cut into blocks, at most one per family. */
  clusterCidrs: string[];
  /** Prefix length of IPv4 blocks; IPv6 blocks hold as many addresses (prefix 96 + this). */
  blockSize: number;
  /** Key prefix of everything workloadnet keeps in etcd. */
  prefix: string;
  ca: string;
  cert: string;
  key: string;
  /** How long a block stays empty before it is given back. */
  emptyBlockGraceSeconds: number;
}

export type { FabricConfig } from './fabric-config';
export { OPTION_DOCS };

/** One named network as the config file gives it (see docs/configuration.md, "Networks"). */
export interface NetworkConfig {
  /** What selects it: Attach's `network`, a CNI network config's `name`. */
  name: string;
  backend: BackendName;
  /** Its own address pools (the `default` network may take them from poolSource instead). */
  podCidrs?: string[];
  /** MTU of its interfaces unless a call asks for another; 0 = auto; the daemon's mtu when absent. */
  mtu?: number;
  /** Whether its interfaces carry the workload's default route; by default only `default`'s do. */
  defaultRoute?: boolean;
  /** More ranges routed through its interfaces when they do not carry the default route. */
  routes?: string[];
  /** Whether its pods' traffic leaving the cluster ranges is masqueraded; the daemon's when absent. */
  masquerade?: boolean;
}

/** `mtu` (daemon or network) meaning: follow the fabric's pod MTU when it is on, else 1500. */
export const AUTO_MTU = 0;

/** The network an Attach without one, and every seed-contract client, gets. */
export const DEFAULT_NETWORK = 'default';

export type NetworkPolicyMode = 'auto' | 'on' | 'off';

/** Whether NetworkPolicy is enforced: "auto" means with the kubernetes pool source. */
export function networkPolicyOn(c: Pick<DaemonConfig, 'networkPolicy' | 'poolSource'>): boolean {
  return c.networkPolicy === 'on' || (c.networkPolicy === 'auto' && c.poolSource === 'kubernetes');
}

/** The node's name as the cluster knows it: `nodeName`, or else the host name (as the kubelet's default). */
export function nodeNameOf(c: Pick<DaemonConfig, 'nodeName'>): string {
  return c.nodeName || os.hostname();
}

export interface DaemonConfig {
  socket: string;
  cniSocket: string;
  /** Group owning the API and CNI sockets (name or gid); empty keeps the daemon's group. */
  socketGroup: string;
  stateDir: string;
  backend: BackendName;
  podCidrs: string[];
  /** Where the address pools come from: podCidrs (static), a Node's podCIDRs, or etcd blocks. */
  poolSource: PoolSourceName;
  /** This node's name for the kubernetes and etcd sources; empty = the host name. */
  nodeName: string;
  /** kubeconfig file for the kubernetes source; empty = $KUBECONFIG, else the in-cluster account. */
  kubeconfig: string;
  /**
   * MTU of workload interfaces; 0 = auto: with the fabric on, what it carries (the uplink's less the
   * encapsulation), else 1500. A default of 1500 could not be told from a 1500 set on purpose.
   */
  mtu: number;
  /** Pods' traffic leaving every cluster range leaves with the node's address (per network: its own key). */
  masquerade: boolean;
  /** NetworkPolicy enforcement: "auto" is on with the kubernetes pool source (the policies' source). */
  networkPolicy: NetworkPolicyMode;
  /** How long an attach of a pod may wait to learn its labels before it is refused, retryably. */
  policyAdmitTimeoutMs: number;
  logLevel: LogLevel;
  /** Attach calls allowed in flight at once; more are refused with RESOURCE_EXHAUSTED. */
  maxInFlight: number;
  /** "HOST:PORT" for the Prometheus endpoint; empty = off. */
  metricsListen: string;
  /** How often the event-loop delay metrics sample the loop (ms): each sample wakes an idle daemon. */
  eventLoopResolutionMs: number;
  /** Connections the gRPC API holds at once; at the cap the longest-silent one makes room. */
  apiMaxConnections: number;
  /** An API connection without calls for this long is closed (the client reconnects when it needs to). */
  apiIdleTimeoutMs: number;
  /** Connections the CNI endpoint holds at once; at the cap one still sending its request makes room. */
  cniMaxConnections: number;
  /** Time a CNI connection has to send its request headers. */
  cniHeaderTimeoutMs: number;
  /** Time a CNI request has, after its headers, to send its body. */
  cniBodyTimeoutMs: number;
  /** A kept-alive CNI connection without a request for this long is closed. */
  cniIdleTimeoutMs: number;
  /** On SIGTERM, how long in-flight calls may take before both servers close every connection. */
  shutdownTimeoutMs: number;
  /** Period of the sweep that releases attachments whose namespace is gone; 0 turns it off. */
  sweepIntervalMs: number;
  /** Named networks; empty means one network, `default`, made of backend, podCidrs and mtu. */
  networks: NetworkConfig[];
  linux: LinuxConfig;
  dpu: DpuConfig;
  etcd: EtcdConfig;
  fabric: FabricConfig;
}

export const DEFAULT_CONFIG: DaemonConfig = {
  socket: '/run/workloadnet/workloadnet.sock',
  cniSocket: '/run/workloadnet/cni.sock',
  socketGroup: '',
  stateDir: '/var/lib/workloadnet',
  backend: 'linux',
  podCidrs: ['10.88.0.0/16'],
  poolSource: 'static',
  nodeName: '',
  kubeconfig: '',
  mtu: AUTO_MTU,
  masquerade: true,
  networkPolicy: 'auto',
  policyAdmitTimeoutMs: 10_000,
  logLevel: 'info',
  maxInFlight: 1024,
  metricsListen: '',
  // Not prom-client's 10 ms: every sample wakes the daemon, and an idle daemon should stay asleep;
  // 100 ms still measures any stall longer than that.
  eventLoopResolutionMs: 100,
  apiMaxConnections: 512,
  apiIdleTimeoutMs: 60_000,
  cniMaxConnections: 512,
  cniHeaderTimeoutMs: 5000,
  cniBodyTimeoutMs: 10_000,
  cniIdleTimeoutMs: 5000,
  shutdownTimeoutMs: 5000,
  sweepIntervalMs: 60_000,
  networks: [],
  linux: { hostNetns: '', linkGroup: 0x776e, detachGroup: 0x776f, ipv6LinkLocal: false },
  dpu: {
    agentSocket: '/run/workloadnet/agent.sock',
    agentListen: '',
    tlsCert: '',
    tlsKey: '',
    tlsCa: '',
    ackTimeoutMs: 5000,
    heartbeatIntervalMs: 500,
    fabricSlices: 4,
    hostPort: true,
    goneGraceSeconds: 600,
    allowUnenforcedPolicy: false,
  },
  etcd: {
    endpoints: [],
    clusterCidrs: [],
    blockSize: 26,
    prefix: '/workloadnet',
    ca: '',
    cert: '',
    key: '',
    emptyBlockGraceSeconds: 300,
  },
  fabric: {
    mode: 'auto',
    nodeIp: '',
    vni: 30574,
    port: 4789,
    peersFile: '',
    leaseTtlSeconds: 15,
    withdrawGraceSeconds: 180,
    probeIntervalSeconds: 5,
    strictSlices: false,
    sourceFilter: true,
    clusterCidrs: [],
  },
};

/** A partial configuration as read from a file or assembled from flags. */
export type ConfigOverrides = Partial<Omit<DaemonConfig, 'linux' | 'dpu' | 'etcd' | 'fabric'>> & {
  linux?: Partial<LinuxConfig>;
  dpu?: Partial<DpuConfig>;
  etcd?: Partial<EtcdConfig>;
  fabric?: Partial<FabricConfig>;
};

export /** 0 (auto) or an MTU an interface can have. */
function validMtu(mtu: unknown): boolean {
  return mtu === AUTO_MTU || (Number.isInteger(mtu) && (mtu as number) >= 68 && (mtu as number) <= 65535);
}

/** inversify identifier of the effective configuration. */
export const CONFIG = Symbol.for('workloadnet.Config');

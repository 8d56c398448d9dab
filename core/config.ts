import * as fs from 'node:fs';
import { cidrsOverlap } from './address-space';
import { clusterRanges, validateFabric, type FabricConfig } from './fabric-config';
import { parseCidr, type Cidr } from '../lib/cidr';
import { closestName, closestOption } from '../lib/closest-name';
import { invalidArgument } from './errors';
import type { FabricMode, FabricSettings } from './fabric-dataplane';
import { OPTION_DOCS } from './option-docs';

// The daemon's configuration: embedded defaults, then a JSON file (--config), then flags. Each option is
// described once, in OPTION_DOCS, which the reference in docs/ and the CLI help are checked against.

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
  /** etcd pool source: a DPU unseen this long gives back its empty blocks (pools/etcd/dpu-liveness.ts). */
  goneGraceSeconds: number;
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

/** `mtu` (daemon or network) meaning: follow the fabric's pod MTU when it is on, else 1500. */
export const AUTO_MTU = 0;

/** The network an Attach without one, and every seed-contract client, gets. */
export const DEFAULT_NETWORK = 'default';

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
  logLevel: 'info',
  maxInFlight: 1024,
  metricsListen: '',
  // Sampling the loop every 10 ms (prom-client's default) woke an idle daemon 100 times a second, 5
  // of its 13 millicores; 100 ms still measures a stall longer than that.
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

export function mergeConfig(base: DaemonConfig, ...layers: ConfigOverrides[]): DaemonConfig {
  let out: DaemonConfig = structuredClone(base);
  for (const layer of layers) {
    const { linux, dpu, etcd, fabric, ...top } = layer;
    const defined = Object.fromEntries(Object.entries(top).filter(([, v]) => v !== undefined));
    out = {
      ...out,
      ...defined,
      linux: { ...out.linux, ...stripUndefined(linux) },
      dpu: { ...out.dpu, ...stripUndefined(dpu) },
      etcd: { ...out.etcd, ...stripUndefined(etcd) },
      fabric: { ...out.fabric, ...stripUndefined(fabric) },
    };
  }
  return validateConfig(out);
}

function stripUndefined<T extends object>(o: T | undefined): Partial<T> {
  return Object.fromEntries(Object.entries(o ?? {}).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** Reads a JSON config file; unknown keys are an error, so a typo does not silently fall back to a default. */
export function loadConfigFile(file: string): ConfigOverrides {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw invalidArgument(`cannot read config file ${file}: ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw invalidArgument(`config file ${file} is not valid JSON: ${(err as Error).message}`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw invalidArgument(`config file ${file} must hold a JSON object`);
  }
  checkKeys(parsed as Record<string, unknown>, '', file);
  // "auto" reads as AUTO_MTU, so that the rest of the daemon sees a number.
  const config = parsed as Record<string, unknown>;
  if (config.mtu === 'auto') config.mtu = AUTO_MTU;
  if (Array.isArray(config.networks))
    for (const n of config.networks as unknown[])
      if (n && typeof n === 'object' && (n as { mtu?: unknown }).mtu === 'auto')
        (n as { mtu: number }).mtu = AUTO_MTU;
  return config as ConfigOverrides;
}

/**
 * The configuration a daemon would start with (defaults, the file, then `layers`: flags), validated and
 * nothing started; throws INVALID_ARGUMENT with the words the daemon would exit with.
 */
export function checkConfig(file: string | undefined, ...layers: ConfigOverrides[]): DaemonConfig {
  return mergeConfig(DEFAULT_CONFIG, file === undefined ? {} : loadConfigFile(file), ...layers);
}

/** An MTU as a flag gives it: "auto" is AUTO_MTU, else a whole number (validation checks its range). */
export function parseMtu(flag: string): number {
  if (flag === 'auto') return AUTO_MTU;
  if (!/^\d{1,6}$/.test(flag.trim()))
    throw invalidArgument(`--mtu must be "auto" (or 0) or a whole number in 68..65535, not "${flag}"`);
  return Number(flag);
}

function checkKeys(obj: Record<string, unknown>, prefix: string, file: string): void {
  for (const [k, v] of Object.entries(obj)) {
    const dotted = prefix + k;
    if ((k === 'linux' || k === 'dpu' || k === 'etcd' || k === 'fabric') && prefix === '') {
      if (!v || typeof v !== 'object') throw invalidArgument(`${file}: "${k}" must be an object`);
      checkKeys(v as Record<string, unknown>, `${k}.`, file);
    } else if (!(dotted in OPTION_DOCS)) {
      throw invalidArgument(`${file}: unknown option "${dotted}"; ${suggestOption(dotted, prefix)}`);
    }
  }
}

/** The likely fix of an unknown key (lib/closest-name.ts), else where its section's options are. */
function suggestOption(dotted: string, prefix: string): string {
  const options = Object.keys(OPTION_DOCS);
  const guess = closestOption(dotted, options);
  const section = options.filter((o) => prefix && o.startsWith(prefix));
  if (guess) return `did you mean "${guess}"?`;
  if (section.length) return `the options of "${prefix.slice(0, -1)}" are ${section.join(', ')}`;
  return 'every option is listed in docs/operations.md ("Configure")';
}

export function validateConfig(c: DaemonConfig): DaemonConfig {
  const fail = (msg: string): never => {
    throw invalidArgument(`invalid configuration: ${msg}`);
  };
  for (const key of ['socket', 'cniSocket', 'stateDir'] as const) {
    if (typeof c[key] !== 'string' || !c[key].startsWith('/')) fail(`${key} must be an absolute path`);
  }
  if (c.backend !== 'linux' && c.backend !== 'dpu')
    fail(`backend must be "linux" or "dpu", not "${String(c.backend)}"`);
  if (!Array.isArray(c.podCidrs) || c.podCidrs.some((p) => typeof p !== 'string')) {
    fail('podCidrs must be a list of CIDR strings');
  }
  if (!validMtu(c.mtu)) fail(`mtu must be 0 (auto) or an integer in 68..65535, not ${String(c.mtu)}`);
  if (typeof c.masquerade !== 'boolean') fail('masquerade must be true or false');
  if (!(LOG_LEVELS as readonly unknown[]).includes(c.logLevel))
    fail(`logLevel must be one of ${LOG_LEVELS.join(', ')}, not ${JSON.stringify(c.logLevel)}`);
  if (!Number.isInteger(c.maxInFlight) || c.maxInFlight < 1) fail('maxInFlight must be a positive integer');
  for (const key of [
    'apiMaxConnections',
    'apiIdleTimeoutMs',
    'cniMaxConnections',
    'cniHeaderTimeoutMs',
    'cniBodyTimeoutMs',
    'cniIdleTimeoutMs',
    'shutdownTimeoutMs',
  ] as const) {
    if (!Number.isInteger(c[key]) || c[key] < 1) fail(`${key} must be a positive integer`);
  }
  if (!Number.isInteger(c.sweepIntervalMs) || c.sweepIntervalMs < 0)
    fail('sweepIntervalMs must be 0 (off) or a positive integer (ms)');
  if (c.metricsListen && !/^[^\s]+:\d{1,5}$/.test(c.metricsListen)) fail('metricsListen must be HOST:PORT');
  if (
    !Number.isInteger(c.eventLoopResolutionMs) ||
    c.eventLoopResolutionMs < 1 ||
    c.eventLoopResolutionMs > 10_000
  )
    fail('eventLoopResolutionMs must be an integer in 1..10000 (ms)');
  if (!Number.isInteger(c.linux.linkGroup) || c.linux.linkGroup < 1 || c.linux.linkGroup > 0xffffffff) {
    fail('linux.linkGroup must be an integer in 1..4294967295');
  }
  if (
    !Number.isInteger(c.linux.detachGroup) ||
    c.linux.detachGroup < 1 ||
    c.linux.detachGroup > 0xffffffff ||
    c.linux.detachGroup === c.linux.linkGroup
  ) {
    fail('linux.detachGroup must be an integer in 1..4294967295 other than linux.linkGroup');
  }
  if (typeof c.linux.ipv6LinkLocal !== 'boolean') fail('linux.ipv6LinkLocal must be true or false');
  if (c.dpu.agentListen && !(c.dpu.tlsCert && c.dpu.tlsKey && c.dpu.tlsCa)) {
    fail('dpu.agentListen needs dpu.tlsCert, dpu.tlsKey and dpu.tlsCa: agents over TCP must use mutual TLS');
  }
  if (!Number.isInteger(c.dpu.ackTimeoutMs) || c.dpu.ackTimeoutMs < 1)
    fail('dpu.ackTimeoutMs must be a positive integer');
  if (typeof c.dpu.hostPort !== 'boolean')
    fail(`dpu.hostPort must be true or false, not ${JSON.stringify(c.dpu.hostPort)}`);
  if (!Number.isInteger(c.dpu.goneGraceSeconds) || c.dpu.goneGraceSeconds < 1)
    fail(
      `dpu.goneGraceSeconds must be a positive whole number of seconds (default 600), not ${JSON.stringify(c.dpu.goneGraceSeconds)}`,
    );
  validatePoolSource(c, fail);
  validateFabric(c, fail); // before the networks, which are checked against its cluster ranges
  validateNetworks(c, fail);
  return c;
}

/** 0 (auto) or an MTU an interface can have. */
function validMtu(mtu: unknown): boolean {
  return mtu === AUTO_MTU || (Number.isInteger(mtu) && (mtu as number) >= 68 && (mtu as number) <= 65535);
}

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

const NETWORK_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
const NETWORK_KEYS = new Set(['name', 'backend', 'podCidrs', 'mtu', 'defaultRoute', 'routes', 'masquerade']);

function validateNetworks(c: DaemonConfig, fail: (msg: string) => never): void {
  if (!Array.isArray(c.networks)) fail('networks must be a list of objects');
  const names = new Set<string>();
  // Every network's pools, so that no address is in two networks: the configured podCidrs, and the
  // default network's cluster ranges (etcd's or fabric.clusterCidrs; a Node's ranges are known only
  // at run time: the address space refuses those, see core/address-space.ts).
  const ranges: Array<{ network: string; cidr: Cidr; from: string }> = [];
  const cluster = c.poolSource === 'etcd' ? 'etcd.clusterCidrs' : 'fabric.clusterCidrs';
  if (c.networks.length > 0)
    for (const text of c.poolSource === 'etcd' ? c.etcd.clusterCidrs : c.fabric.clusterCidrs)
      ranges.push({ network: DEFAULT_NETWORK, cidr: parseCidr(text), from: cluster });
  if (
    c.networks.length > 0 &&
    c.poolSource !== 'static' &&
    !c.networks.some((n) => (n as { name?: unknown } | null)?.name === DEFAULT_NETWORK)
  )
    fail(
      `poolSource "${c.poolSource}" supplies the "default" network's pools; networks has none named "default"`,
    );
  for (const [i, n] of c.networks.entries()) {
    if (!n || typeof n !== 'object' || Array.isArray(n)) fail(`networks[${i}] must be an object`);
    for (const k of Object.keys(n))
      if (!NETWORK_KEYS.has(k)) {
        const guess = closestName(k, NETWORK_KEYS);
        fail(
          `networks[${i}]: unknown key "${k}"; ` +
            (guess ? `did you mean "${guess}"?` : `a network's keys are ${[...NETWORK_KEYS].join(', ')}`),
        );
      }
    const where = `network "${String(n.name)}"`;
    if (typeof n.name !== 'string' || !NETWORK_NAME.test(n.name) || n.name.length > 64)
      fail(
        `networks[${i}].name must be 1-64 letters, digits, "_", "." and "-", starting with a letter or digit`,
      );
    if (names.has(n.name)) fail(`two networks are named "${n.name}"`);
    names.add(n.name);
    if (n.backend !== 'linux' && n.backend !== 'dpu')
      fail(`${where}: backend must be "linux" or "dpu", not "${String(n.backend)}"`);
    if (n.mtu !== undefined && !validMtu(n.mtu))
      fail(`${where}: mtu must be 0 (auto) or an integer in 68..65535, not ${String(n.mtu)}`);
    for (const key of ['defaultRoute', 'masquerade'] as const)
      if (n[key] !== undefined && typeof n[key] !== 'boolean') fail(`${where}: ${key} must be true or false`);
    for (const key of ['podCidrs', 'routes'] as const) {
      const v = n[key];
      if (v === undefined) continue;
      if (!Array.isArray(v) || v.some((x) => typeof x !== 'string'))
        fail(`${where}: ${key} must be a list of CIDR strings`);
      for (const text of v) {
        let cidr;
        try {
          cidr = parseCidr(text);
        } catch (err) {
          return fail(`${where}: ${key}: ${(err as Error).message}`);
        }
        if (key === 'podCidrs') {
          // The default network's own podCidrs may repeat the cluster range its source supplies.
          const clash = ranges.find(
            (r) => cidrsOverlap(r.cidr, cidr) && !(r.network === n.name && r.from !== 'podCidrs'),
          );
          if (clash)
            fail(
              `${where}: pod CIDR ${text} overlaps ${clash.cidr.text} of network "${clash.network}"` +
                (clash.from === 'podCidrs' ? '' : ` (its ${clash.from})`),
            );
          ranges.push({ network: n.name, cidr, from: 'podCidrs' });
        }
      }
    }
    const ownPools = n.name === DEFAULT_NETWORK && c.poolSource !== 'static';
    if (!ownPools && (n.podCidrs ?? []).length === 0)
      fail(`${where} has no podCidrs (only the "default" network takes its pools from poolSource)`);
  }
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

function validatePoolSource(c: DaemonConfig, fail: (msg: string) => never): void {
  if (!['static', 'kubernetes', 'etcd'].includes(c.poolSource))
    fail(`poolSource must be "static", "kubernetes" or "etcd", not "${String(c.poolSource)}"`);
  if (
    typeof c.nodeName !== 'string' ||
    (c.nodeName !== '' && !/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(c.nodeName))
  )
    fail(
      `nodeName "${String(c.nodeName)}" is not a valid node name (lowercase letters, digits, "-" and ".")`,
    );
  const e = c.etcd;
  const list = (v: unknown): boolean => Array.isArray(v) && v.every((x) => typeof x === 'string');
  if (!list(e.endpoints)) fail('etcd.endpoints must be a list of URLs');
  if (!list(e.clusterCidrs)) fail('etcd.clusterCidrs must be a list of CIDR strings');
  if (!Number.isInteger(e.blockSize) || e.blockSize < 20 || e.blockSize > 30)
    fail(`etcd.blockSize must be an IPv4 prefix length in 20..30, not ${e.blockSize}`);
  if (typeof e.prefix !== 'string' || !e.prefix.startsWith('/') || e.prefix.endsWith('/'))
    fail('etcd.prefix must start with "/" and not end with one (e.g. /workloadnet)');
  if (!Number.isInteger(e.emptyBlockGraceSeconds) || e.emptyBlockGraceSeconds < 0)
    fail('etcd.emptyBlockGraceSeconds must be a non-negative integer');
  if ((e.cert === '') !== (e.key === '')) fail('etcd.cert and etcd.key go together');
  if (c.poolSource !== 'etcd') return;
  if (e.endpoints.length === 0) fail('poolSource "etcd" needs etcd.endpoints (--etcd-endpoints)');
  for (const url of e.endpoints)
    if (!/^https?:\/\/[^\s/]+$/.test(url)) fail(`etcd endpoint "${url}" must look like http(s)://HOST:PORT`);
  if (e.endpoints.some((u) => u.startsWith('https:')) && !e.ca) fail('https etcd endpoints need etcd.ca');
  if (e.clusterCidrs.length === 0) fail('poolSource "etcd" needs etcd.clusterCidrs (--cluster-cidr)');
  for (const cidr of clusterRanges('etcd.clusterCidrs', e.clusterCidrs, fail)) {
    const block = cidr.family === 4 ? e.blockSize : 96 + e.blockSize;
    if (cidr.prefixLength > block)
      fail(
        `cluster CIDR ${cidr.text} is smaller than one /${block} block; use a larger range or etcd.blockSize`,
      );
  }
}

/** inversify identifier of the effective configuration. */
export const CONFIG = Symbol.for('workloadnet.Config');

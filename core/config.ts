import * as fs from 'node:fs';
import { invalidArgument } from './errors';

// The daemon's configuration: embedded defaults, then a JSON file (--config), then command-line flags.
// Each option is described once, in OPTION_DOCS, which the reference in docs/ and the CLI help are
// checked against.

export type BackendName = 'linux' | 'dpu';
export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal';

export interface LinuxConfig {
  /** Netns whose links face the workloads; empty = the daemon's own namespace (the normal case). */
  hostNetns: string;
  /** Link group that marks host interfaces created by workloadnet (orphans are found by it). */
  linkGroup: number;
  detachGroup: number;
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
}

export interface DaemonConfig {
  socket: string;
  cniSocket: string;
  /** Group owning the API and CNI sockets (name or gid); empty keeps the daemon's group. */
  socketGroup: string;
  stateDir: string;
  backend: BackendName;
  podCidrs: string[];
  mtu: number;
  logLevel: LogLevel;
  /** Attach calls allowed in flight at once; more are refused with RESOURCE_EXHAUSTED. */
  maxInFlight: number;
  /** "HOST:PORT" for the Prometheus endpoint; empty = off. */
  metricsListen: string;
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
  linux: LinuxConfig;
  dpu: DpuConfig;
}

export const DEFAULT_CONFIG: DaemonConfig = {
  socket: '/run/workloadnet/workloadnet.sock',
  cniSocket: '/run/workloadnet/cni.sock',
  socketGroup: '',
  stateDir: '/var/lib/workloadnet',
  backend: 'linux',
  podCidrs: ['10.88.0.0/16'],
  mtu: 1500,
  logLevel: 'info',
  maxInFlight: 1024,
  metricsListen: '',
  apiMaxConnections: 512,
  apiIdleTimeoutMs: 60_000,
  cniMaxConnections: 512,
  cniHeaderTimeoutMs: 5000,
  cniBodyTimeoutMs: 10_000,
  cniIdleTimeoutMs: 5000,
  shutdownTimeoutMs: 5000,
  linux: { hostNetns: '', linkGroup: 0x776e, detachGroup: 0x776f },
  dpu: {
    agentSocket: '/run/workloadnet/agent.sock',
    agentListen: '',
    tlsCert: '',
    tlsKey: '',
    tlsCa: '',
    ackTimeoutMs: 5000,
    heartbeatIntervalMs: 1000,
  },
};

/** One line per option, keyed by its dotted path in the config file. */
export const OPTION_DOCS: Record<string, string> = {
  socket: 'Unix socket of the gRPC workload API.',
  cniSocket: 'Unix socket of the CNI endpoint that the workloadnet-cni forwarder calls.',
  socketGroup: "Group (name or numeric gid) owning both sockets (mode 0660); empty keeps the daemon's group.",
  stateDir: 'Directory of the embedded store (LMDB). Keep it on persistent storage.',
  backend: 'Dataplane backend: "linux" (veth + rtnetlink) or "dpu" (SmartNIC agent over gRPC).',
  podCidrs:
    'Address pools, at most one address per family per attachment (e.g. ["10.88.0.0/16","fd00:88::/64"]).',
  mtu: 'MTU of workload interfaces (68-65535), unless a call asks for another.',
  logLevel: 'Log level: trace, debug, info, warn, error or fatal.',
  maxInFlight: 'Attach calls allowed in flight at once; further calls get RESOURCE_EXHAUSTED.',
  metricsListen: 'HOST:PORT of the Prometheus /metrics endpoint; empty disables it. Keep it on loopback.',
  apiMaxConnections:
    'Connections the gRPC API holds at once; at the cap the connection silent longest is closed to make room.',
  apiIdleTimeoutMs:
    'An API connection without a call for this long is closed (ms); clients reconnect on demand.',
  cniMaxConnections:
    'Connections the CNI endpoint holds at once; at the cap one still sending its request is closed to make room.',
  cniHeaderTimeoutMs: 'Time a CNI connection has to send its request headers (ms).',
  cniBodyTimeoutMs: 'Time a CNI request has, after its headers, to send its body (ms).',
  cniIdleTimeoutMs: 'A kept-alive CNI connection without a new request for this long is closed (ms).',
  shutdownTimeoutMs:
    'On SIGTERM, how long in-flight calls may finish before every connection is closed and the daemon exits (ms).',
  'linux.hostNetns': "Network namespace path facing the workloads; empty means the daemon's own.",
  'linux.linkGroup': 'Link group number marking host interfaces created by workloadnet.',
  'linux.detachGroup':
    'Link group host interfaces pass through while being deleted (many are deleted at once); give it to nothing else.',
  'dpu.agentSocket': 'Unix socket on which DPU agents connect.',
  'dpu.agentListen': 'Optional HOST:PORT on which DPU agents connect over TCP with mutual TLS.',
  'dpu.tlsCert': 'Server certificate (PEM file) for dpu.agentListen.',
  'dpu.tlsKey': 'Server private key (PEM file) for dpu.agentListen.',
  'dpu.tlsCa': 'CA bundle (PEM file) that agent client certificates must chain to.',
  'dpu.ackTimeoutMs': 'How long Attach waits for the agent to acknowledge the port (ms).',
  'dpu.heartbeatIntervalMs':
    'Interval of heartbeats to agents (ms); an agent silent for 3 intervals is lost.',
};

/** A partial configuration as read from a file or assembled from flags. */
export type ConfigOverrides = Partial<Omit<DaemonConfig, 'linux' | 'dpu'>> & {
  linux?: Partial<LinuxConfig>;
  dpu?: Partial<DpuConfig>;
};

export function mergeConfig(base: DaemonConfig, ...layers: ConfigOverrides[]): DaemonConfig {
  let out: DaemonConfig = structuredClone(base);
  for (const layer of layers) {
    const { linux, dpu, ...top } = layer;
    const defined = Object.fromEntries(Object.entries(top).filter(([, v]) => v !== undefined));
    out = {
      ...out,
      ...defined,
      linux: { ...out.linux, ...stripUndefined(linux) },
      dpu: { ...out.dpu, ...stripUndefined(dpu) },
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
  return parsed as ConfigOverrides;
}

function checkKeys(obj: Record<string, unknown>, prefix: string, file: string): void {
  for (const [k, v] of Object.entries(obj)) {
    const dotted = prefix + k;
    if ((k === 'linux' || k === 'dpu') && prefix === '') {
      if (!v || typeof v !== 'object') throw invalidArgument(`${file}: "${k}" must be an object`);
      checkKeys(v as Record<string, unknown>, `${k}.`, file);
    } else if (!(dotted in OPTION_DOCS)) {
      throw invalidArgument(
        `${file}: unknown option "${dotted}" (known: ${Object.keys(OPTION_DOCS).join(', ')})`,
      );
    }
  }
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
  if (!Number.isInteger(c.mtu) || c.mtu < 68 || c.mtu > 65535)
    fail(`mtu must be an integer in 68..65535, not ${c.mtu}`);
  if (!['trace', 'debug', 'info', 'warn', 'error', 'fatal'].includes(c.logLevel))
    fail(`unknown logLevel "${c.logLevel}"`);
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
  if (c.metricsListen && !/^[^\s]+:\d{1,5}$/.test(c.metricsListen)) fail('metricsListen must be HOST:PORT');
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
  if (c.dpu.agentListen && !(c.dpu.tlsCert && c.dpu.tlsKey && c.dpu.tlsCa)) {
    fail('dpu.agentListen needs dpu.tlsCert, dpu.tlsKey and dpu.tlsCa: agents over TCP must use mutual TLS');
  }
  if (!Number.isInteger(c.dpu.ackTimeoutMs) || c.dpu.ackTimeoutMs < 1)
    fail('dpu.ackTimeoutMs must be a positive integer');
  return c;
}

/** inversify identifier of the effective configuration. */
export const CONFIG = Symbol.for('workloadnet.Config');

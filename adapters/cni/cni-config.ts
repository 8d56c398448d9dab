import type { DpuPortOptions } from '../../core/backend';
import type { DnsInfo } from '../../core/workload-service';
import { CniError, CniErrorCode } from './cni-error';
import { type CniResult, parsePrevResult } from './cni-result';
import { IMPLIED_CNI_VERSION, SUPPORTED_CNI_VERSIONS, isSupportedCniVersion } from './cni-version';

// The network configuration a runtime writes on the plugin's stdin: the plugin's conflist entry plus
// cniVersion and name, prevResult in a chain, runtimeConfig for declared capabilities, and on GC the
// list of attachments still in use.

export interface PortMapping {
  hostPort: number;
  containerPort: number;
  protocol: string;
  hostIP?: string;
}

export interface Bandwidth {
  ingressRate?: number;
  ingressBurst?: number;
  egressRate?: number;
  egressBurst?: number;
}

export interface RuntimeConfig {
  portMappings: PortMapping[];
  bandwidth?: Bandwidth;
  dns?: DnsInfo;
}

export interface ValidAttachment {
  containerId: string;
  ifName: string;
}

export interface NetworkConfig {
  cniVersion: string;
  name: string;
  type: string;
  /** 0 or absent: the daemon's default. */
  mtu?: number;
  /** Daemon socket for the forwarder; the daemon itself does not use it. */
  socket?: string;
  /** Static DNS from the config file ("dns" key, spec field names). */
  dns?: DnsInfo;
  /** DPU backend: the agent this network's ports go to ("dpu" key); CNI_ARGS WORKLOADNET_DPU wins. */
  dpu?: string;
  /** DPU backend: VF settings, under SR-IOV CNI's keys (max_tx_rate, spoofchk, trust, ...). */
  dpuPort?: DpuPortOptions;
  prevResult?: CniResult;
  runtimeConfig: RuntimeConfig;
  /** Only on GC; undefined when the runtime sent none. */
  validAttachments?: ValidAttachment[];
}

const NETWORK_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

function invalid(msg: string): CniError {
  return new CniError(CniErrorCode.INVALID_NETWORK_CONFIG, msg);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Look a key up the way Go's encoding/json does: an exact match first, else a case-insensitive one.
 * containerd marshals go-cni's untagged structs, so runtimeConfig arrives as {"HostPort": …} while the
 * conventions document writes {"hostPort": …}; both must work.
 */
function getFold(o: Record<string, unknown>, key: string): unknown {
  if (key in o) return o[key];
  const lower = key.toLowerCase();
  for (const k of Object.keys(o)) if (k.toLowerCase() === lower) return o[k];
  return undefined;
}

function strings(v: unknown, where: string): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || !v.every((s) => typeof s === 'string'))
    throw invalid(`${where} must be a list of strings`);
  return v as string[];
}

function optString(v: unknown, where: string): string | undefined {
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string') throw invalid(`${where} must be a string`);
  return v;
}

function onOff(v: unknown, where: string): boolean | undefined {
  if (v === undefined || v === null || v === '') return undefined;
  if (v === 'on') return true;
  if (v === 'off') return false;
  throw invalid(`${where} must be "on" or "off"`);
}

function wholeNumber(v: unknown, where: string): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
    throw invalid(`${where} must be a whole number >= 0`);
  return v;
}

/** The VF settings of a network, under the keys SR-IOV CNI uses for them; undefined when none is set. */
function parseVfSettings(raw: Record<string, unknown>): DpuPortOptions | undefined {
  const out: DpuPortOptions = {};
  const max = wholeNumber(raw.max_tx_rate, 'max_tx_rate');
  if (max !== undefined) out.maxTxRateMbps = max;
  const min = wholeNumber(raw.min_tx_rate, 'min_tx_rate');
  if (min !== undefined) out.minTxRateMbps = min;
  const spoof = onOff(raw.spoofchk, 'spoofchk');
  if (spoof !== undefined) out.spoofCheck = spoof;
  const trust = onOff(raw.trust, 'trust');
  if (trust !== undefined) out.trust = trust;
  const ls = optString(raw.link_state, 'link_state');
  if (ls !== undefined) {
    if (ls !== 'auto' && ls !== 'enable' && ls !== 'disable')
      throw invalid('link_state must be "auto", "enable" or "disable"');
    out.linkState = ls;
  }
  const pf = wholeNumber(raw.pf, 'pf');
  if (pf !== undefined) out.pf = pf;
  return Object.keys(out).length ? out : undefined;
}

function port(v: unknown, where: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > 65535) {
    throw invalid(`${where} must be a port number 1–65535`);
  }
  return v;
}

function rate(v: unknown, where: string): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0)
    throw invalid(`${where} must be a non-negative integer`);
  return v;
}

function parsePortMappings(v: unknown): PortMapping[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw invalid('runtimeConfig.portMappings must be a list');
  return v.map((m: unknown, n) => {
    const where = `runtimeConfig.portMappings[${n}]`;
    if (!isObject(m)) throw invalid(`${where} must be an object`);
    const protocol = (optString(getFold(m, 'protocol'), `${where}.protocol`) ?? 'tcp').toLowerCase();
    if (!['tcp', 'udp', 'sctp'].includes(protocol))
      throw invalid(`${where}.protocol must be tcp, udp or sctp`);
    const pm: PortMapping = {
      hostPort: port(getFold(m, 'hostPort'), `${where}.hostPort`),
      containerPort: port(getFold(m, 'containerPort'), `${where}.containerPort`),
      protocol,
    };
    const hostIP = optString(getFold(m, 'hostIP'), `${where}.hostIP`);
    if (hostIP) pm.hostIP = hostIP;
    return pm;
  });
}

function parseBandwidth(v: unknown): Bandwidth | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) throw invalid('runtimeConfig.bandwidth must be an object');
  const bw: Bandwidth = {};
  for (const k of ['ingressRate', 'ingressBurst', 'egressRate', 'egressBurst'] as const) {
    const r = rate(getFold(v, k), `runtimeConfig.bandwidth.${k}`);
    if (r !== undefined) bw[k] = r;
  }
  return bw;
}

/** runtimeConfig.dns uses the conventions' names (servers, searches, options). */
function parseRuntimeDns(v: unknown): DnsInfo | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) throw invalid('runtimeConfig.dns must be an object');
  const dns: DnsInfo = {
    nameservers: strings(getFold(v, 'servers'), 'runtimeConfig.dns.servers'),
    search: strings(getFold(v, 'searches'), 'runtimeConfig.dns.searches'),
    options: strings(getFold(v, 'options'), 'runtimeConfig.dns.options'),
  };
  const domain = optString(getFold(v, 'domain'), 'runtimeConfig.dns.domain');
  if (domain) dns.domain = domain;
  return dns;
}

/** The config's own "dns" uses the spec's result names (nameservers, domain, search, options). */
function parseConfigDns(v: unknown): DnsInfo | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) throw invalid('dns must be an object');
  const dns: DnsInfo = {
    nameservers: strings(getFold(v, 'nameservers'), 'dns.nameservers'),
    search: strings(getFold(v, 'search'), 'dns.search'),
    options: strings(getFold(v, 'options'), 'dns.options'),
  };
  const domain = optString(getFold(v, 'domain'), 'dns.domain');
  if (domain) dns.domain = domain;
  return dns;
}

function parseRuntimeConfig(v: unknown): RuntimeConfig {
  if (v === undefined || v === null) return { portMappings: [] };
  if (!isObject(v)) throw invalid('runtimeConfig must be an object');
  const rc: RuntimeConfig = { portMappings: parsePortMappings(getFold(v, 'portMappings')) };
  const bw = parseBandwidth(getFold(v, 'bandwidth'));
  if (bw) rc.bandwidth = bw;
  const dns = parseRuntimeDns(getFold(v, 'dns'));
  if (dns) rc.dns = dns;
  return rc;
}

function parseValidAttachments(v: unknown): ValidAttachment[] | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) throw invalid('cni.dev/valid-attachments must be a list');
  return v.map((a: unknown, n) => {
    const where = `cni.dev/valid-attachments[${n}]`;
    if (!isObject(a)) throw invalid(`${where} must be an object`);
    const containerId = a.containerID;
    const ifName = a.ifname;
    if (typeof containerId !== 'string' || containerId === '')
      throw invalid(`${where}.containerID is missing`);
    if (typeof ifName !== 'string' || ifName === '') throw invalid(`${where}.ifname is missing`);
    return { containerId, ifName };
  });
}

/** Decode stdin as JSON (code 6 when it is not a JSON object). */
export function decodeStdin(stdin: string): Record<string, unknown> {
  let raw: unknown;
  try {
    raw = JSON.parse(stdin);
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new CniError(CniErrorCode.DECODING_FAILURE, `network config on stdin is not valid JSON: ${why}`);
  }
  if (!isObject(raw)) {
    throw new CniError(CniErrorCode.DECODING_FAILURE, 'network config on stdin must be a JSON object');
  }
  return raw;
}

/** The config's cniVersion, refusing (code 1) anything not supported. */
export function configVersion(raw: Record<string, unknown>): string {
  const v = raw.cniVersion;
  if (v !== undefined && typeof v !== 'string') {
    throw new CniError(CniErrorCode.DECODING_FAILURE, 'cniVersion in the network config must be a string');
  }
  const version = v === undefined || v === '' ? IMPLIED_CNI_VERSION : v;
  if (!isSupportedCniVersion(version)) {
    const said =
      v === undefined || v === '' ? `no cniVersion (taken as ${IMPLIED_CNI_VERSION})` : `"${version}"`;
    throw new CniError(
      CniErrorCode.INCOMPATIBLE_VERSION,
      'incompatible CNI versions',
      `config is ${said}, workloadnet supports ${SUPPORTED_CNI_VERSIONS.join(', ')}`,
    );
  }
  return version;
}

/** Validate the rest of an already-decoded config whose version has been checked. */
export function parseNetworkConfig(raw: Record<string, unknown>, cniVersion: string): NetworkConfig {
  const name = raw.name;
  if (typeof name !== 'string' || name === '') throw invalid('network config has no "name"');
  if (!NETWORK_NAME.test(name)) {
    throw invalid(`network name "${name}" has characters other than letters, digits, "_", "." and "-"`);
  }
  const type = raw.type;
  if (typeof type !== 'string' || type === '') throw invalid('network config has no plugin "type"');

  const config: NetworkConfig = {
    cniVersion,
    name,
    type,
    runtimeConfig: parseRuntimeConfig(raw.runtimeConfig),
  };

  const mtu = raw.mtu;
  if (mtu !== undefined && mtu !== null && mtu !== 0) {
    if (typeof mtu !== 'number' || !Number.isInteger(mtu) || mtu < 68 || mtu > 65535) {
      // Quote numbers and short strings only: stringifying an arbitrary (deeply nested) value can
      // overflow the stack.
      const shown =
        typeof mtu === 'number' || (typeof mtu === 'string' && mtu.length <= 32)
          ? JSON.stringify(mtu)
          : `a ${Array.isArray(mtu) ? 'list' : typeof mtu}`;
      throw invalid(`mtu must be an integer from 68 to 65535, not ${shown}`);
    }
    config.mtu = mtu;
  }
  const socket = optString(raw.socket, 'socket');
  if (socket) config.socket = socket;
  const dpu = optString(raw.dpu, 'dpu');
  if (dpu) config.dpu = dpu;
  const dpuPort = parseVfSettings(raw);
  if (dpuPort) config.dpuPort = dpuPort;
  const dns = parseConfigDns(raw.dns);
  if (dns) config.dns = dns;
  if (raw.prevResult !== undefined && raw.prevResult !== null)
    config.prevResult = parsePrevResult(raw.prevResult);
  const valid = parseValidAttachments(raw['cni.dev/valid-attachments']);
  if (valid) config.validAttachments = valid;
  return config;
}

import type { Attachment, DnsInfo } from '../../core/workload-service';
import { CniError, CniErrorCode } from './cni-error';
import { resultHasExtendedFields, resultHasIpVersion } from './cni-version';

// The CNI result in one version-neutral shape, converted to a given spec version only when printed.
// prevResult (from earlier plugins in a chain) is parsed into the same shape so the two can be merged.

export interface ResultInterface {
  name: string;
  mac?: string;
  /** 1.1.0+ only. */
  mtu?: number;
  sandbox?: string;
  /** 1.1.0+ only. */
  socketPath?: string;
  /** 1.1.0+ only. */
  pciID?: string;
}

export interface ResultIp {
  /** CIDR: address and prefix length. */
  address: string;
  gateway?: string;
  /** Index into `interfaces`. */
  interface?: number;
}

export interface ResultRoute {
  dst: string;
  gw?: string;
  /** The rest are 1.1.0+ only. */
  mtu?: number;
  advmss?: number;
  priority?: number;
  table?: number;
  scope?: number;
}

export interface ResultDns {
  nameservers?: string[];
  domain?: string;
  search?: string[];
  options?: string[];
}

export interface CniResult {
  interfaces: ResultInterface[];
  ips: ResultIp[];
  routes: ResultRoute[];
  dns?: ResultDns;
}

/*
 * Addresses are reported as address/32 (/128 for IPv6), not with the pool's prefix length. That is what
 * the backend programs: the routed model gives the workload a host address and reaches the gateway over
 * an on-link route, with no connected subnet. A pool prefix (10.88.0.5/16) would tell a chained plugin
 * or a CHECK that the whole pool is on-link, which it is not. Runtimes only read the address part.
 */
function hostCidr(address: string, family: 4 | 6): string {
  return `${address}/${family === 4 ? 32 : 128}`;
}

function defaultRouteFor(family: 4 | 6): string {
  return family === 4 ? '0.0.0.0/0' : '::/0';
}

function dnsIsEmpty(dns: ResultDns | undefined): boolean {
  if (!dns) return true;
  return (
    !dns.domain &&
    (dns.nameservers?.length ?? 0) === 0 &&
    (dns.search?.length ?? 0) === 0 &&
    (dns.options?.length ?? 0) === 0
  );
}

export function dnsToResult(dns: DnsInfo | undefined): ResultDns | undefined {
  if (!dns) return undefined;
  const out: ResultDns = {};
  if (dns.nameservers.length > 0) out.nameservers = [...dns.nameservers];
  if (dns.domain) out.domain = dns.domain;
  if (dns.search.length > 0) out.search = [...dns.search];
  if (dns.options.length > 0) out.options = [...dns.options];
  return dnsIsEmpty(out) ? undefined : out;
}

/**
 * The result for one attachment. The host-side interface is listed first (no sandbox), like the ptp
 * and bridge plugins do, so that chained plugins that look for the host end (bandwidth) find it.
 */
export function resultFromAttachment(att: Attachment, dns: DnsInfo | undefined): CniResult {
  const interfaces: ResultInterface[] = [];
  const dp = att.dataplane;
  if (dp?.hostIfName) interfaces.push({ name: dp.hostIfName });
  const container: ResultInterface = { name: att.ifName, mtu: dp?.mtu ?? att.mtu, sandbox: att.netnsPath };
  if (dp?.mac) container.mac = dp.mac;
  interfaces.push(container);
  const index = interfaces.length - 1;

  const ips: ResultIp[] = att.ips.map((ip) => {
    const r: ResultIp = { address: hostCidr(ip.address, ip.family), interface: index };
    if (ip.gateway) r.gateway = ip.gateway;
    return r;
  });

  // Report the routes the backend says it programmed; without them, the default route per family
  // through the gateway is what the routed model installs.
  let routes: ResultRoute[];
  if (dp && dp.routes.length > 0) {
    routes = dp.routes.map((r) =>
      r.gateway ? { dst: r.destination, gw: r.gateway } : { dst: r.destination },
    );
  } else {
    routes = att.ips
      .filter((ip) => ip.gateway)
      .map((ip) => ({ dst: defaultRouteFor(ip.family), gw: ip.gateway }));
  }

  const result: CniResult = { interfaces, ips, routes };
  const resultDns = dnsToResult(dns ?? att.dns);
  if (resultDns) result.dns = resultDns;
  return result;
}

/**
 * Our result when earlier plugins in the chain produced one: theirs first, ours appended, with our IPs'
 * interface indexes shifted past their interfaces. DNS from this call wins, else theirs is kept.
 */
export function mergeWithPrevResult(prev: CniResult | undefined, ours: CniResult): CniResult {
  if (!prev) return ours;
  const shift = prev.interfaces.length;
  const merged: CniResult = {
    interfaces: [...prev.interfaces, ...ours.interfaces],
    ips: [
      ...prev.ips,
      ...ours.ips.map((ip) => (ip.interface === undefined ? ip : { ...ip, interface: ip.interface + shift })),
    ],
    routes: [...prev.routes, ...ours.routes],
  };
  const dns = ours.dns ?? prev.dns;
  if (dns) merged.dns = dns;
  return merged;
}

function ipVersionOf(cidr: string): '4' | '6' {
  return cidr.includes(':') ? '6' : '4';
}

/** The JSON object a plugin prints for `result` at spec version `cniVersion`. */
export function formatCniResult(result: CniResult, cniVersion: string): Record<string, unknown> {
  const extended = resultHasExtendedFields(cniVersion);
  const withIpVersion = resultHasIpVersion(cniVersion);
  const interfaces = result.interfaces.map((i) => {
    const o: Record<string, unknown> = { name: i.name };
    if (i.mac) o.mac = i.mac;
    if (extended && i.mtu !== undefined) o.mtu = i.mtu;
    if (i.sandbox) o.sandbox = i.sandbox;
    if (extended && i.socketPath) o.socketPath = i.socketPath;
    if (extended && i.pciID) o.pciID = i.pciID;
    return o;
  });
  const ips = result.ips.map((ip) => {
    const o: Record<string, unknown> = {};
    if (withIpVersion) o.version = ipVersionOf(ip.address);
    o.address = ip.address;
    if (ip.gateway) o.gateway = ip.gateway;
    if (ip.interface !== undefined) o.interface = ip.interface;
    return o;
  });
  const routes = result.routes.map((r) => {
    const o: Record<string, unknown> = { dst: r.dst };
    if (r.gw) o.gw = r.gw;
    if (extended) {
      for (const k of ['mtu', 'advmss', 'priority', 'table', 'scope'] as const) {
        if (r[k] !== undefined) o[k] = r[k];
      }
    }
    return o;
  });
  const out: Record<string, unknown> = { cniVersion, interfaces, ips, routes };
  if (!dnsIsEmpty(result.dns)) out.dns = result.dns;
  return out;
}

// ---- prevResult parsing ----

function bad(what: string): CniError {
  return new CniError(CniErrorCode.INVALID_NETWORK_CONFIG, `prevResult is not a valid CNI result: ${what}`);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function optString(o: Record<string, unknown>, key: string, where: string): string | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw bad(`${where}.${key} must be a string`);
  return v;
}

function optNumber(o: Record<string, unknown>, key: string, where: string): number | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v)) throw bad(`${where}.${key} must be an integer`);
  return v;
}

function optStrings(o: Record<string, unknown>, key: string, where: string): string[] | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v) || !v.every((s) => typeof s === 'string')) {
    throw bad(`${where}.${key} must be a list of strings`);
  }
  return v as string[];
}

function list(o: Record<string, unknown>, key: string): Record<string, unknown>[] {
  const v = o[key];
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || !v.every(isObject)) throw bad(`${key} must be a list of objects`);
  return v;
}

/** Parse a prevResult of any supported version (0.4.0's per-IP "version" is simply dropped). */
export function parsePrevResult(raw: unknown): CniResult {
  if (!isObject(raw)) throw bad('it must be an object');
  const interfaces = list(raw, 'interfaces').map((o, n) => {
    const where = `interfaces[${n}]`;
    const name = optString(o, 'name', where);
    if (!name) throw bad(`${where}.name is missing`);
    const i: ResultInterface = { name };
    const mac = optString(o, 'mac', where);
    if (mac) i.mac = mac;
    const mtu = optNumber(o, 'mtu', where);
    if (mtu !== undefined) i.mtu = mtu;
    const sandbox = optString(o, 'sandbox', where);
    if (sandbox) i.sandbox = sandbox;
    const socketPath = optString(o, 'socketPath', where);
    if (socketPath) i.socketPath = socketPath;
    const pciID = optString(o, 'pciID', where);
    if (pciID) i.pciID = pciID;
    return i;
  });
  const ips = list(raw, 'ips').map((o, n) => {
    const where = `ips[${n}]`;
    const address = optString(o, 'address', where);
    if (!address || !address.includes('/')) throw bad(`${where}.address must be an address in CIDR form`);
    const ip: ResultIp = { address };
    const gateway = optString(o, 'gateway', where);
    if (gateway) ip.gateway = gateway;
    const idx = optNumber(o, 'interface', where);
    if (idx !== undefined) {
      if (idx < 0 || idx >= interfaces.length) throw bad(`${where}.interface ${idx} names no interface`);
      ip.interface = idx;
    }
    return ip;
  });
  const routes = list(raw, 'routes').map((o, n) => {
    const where = `routes[${n}]`;
    const dst = optString(o, 'dst', where);
    if (!dst) throw bad(`${where}.dst is missing`);
    const r: ResultRoute = { dst };
    const gw = optString(o, 'gw', where);
    if (gw) r.gw = gw;
    for (const k of ['mtu', 'advmss', 'priority', 'table', 'scope'] as const) {
      const v = optNumber(o, k, where);
      if (v !== undefined) r[k] = v;
    }
    return r;
  });
  const result: CniResult = { interfaces, ips, routes };
  const dnsRaw = raw.dns;
  if (dnsRaw !== undefined && dnsRaw !== null) {
    if (!isObject(dnsRaw)) throw bad('dns must be an object');
    const dns: ResultDns = {};
    const ns = optStrings(dnsRaw, 'nameservers', 'dns');
    if (ns) dns.nameservers = ns;
    const domain = optString(dnsRaw, 'domain', 'dns');
    if (domain) dns.domain = domain;
    const search = optStrings(dnsRaw, 'search', 'dns');
    if (search) dns.search = search;
    const options = optStrings(dnsRaw, 'options', 'dns');
    if (options) dns.options = options;
    if (!dnsIsEmpty(dns)) result.dns = dns;
  }
  return result;
}

import { cidrContains, formatAddress, parseAddress, parseCidr } from '../../lib/cidr';
import type { TunnelEndpoint } from '../peer-source';

// A node's tunnel endpoints (its DPUs) as every source stores them beside the node: an etcd record,
// a Node annotation, a peers-file entry. Read from JSON someone else wrote, so checked field by field:
// a list that is malformed anywhere is refused whole (the caller says what that costs). Whether an
// endpoint's prefixes are the node's to give is a separate question (vouchedEndpoints): a node may
// hand its DPUs slices only of what its source says it owns.

const KEYS = new Set(['id', 'underlay', 'mtu', 'vtep', 'prefixes']);
const VTEP_KEYS = new Set(['mac', 'vni', 'port']);
/** An agent id, as the DPU backend admits one: printable, no spaces. */
const ID = /^[\x21-\x7e]{1,253}$/;
const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

/** The stored endpoints, canonical; throws an Error whose message names the entry and field. */
export function decodeEndpoints(value: unknown): TunnelEndpoint[] {
  if (!Array.isArray(value)) throw new Error('"endpoints" must be a list');
  const ids = new Set<string>();
  return value.map((e: unknown, i) => {
    const at = `endpoints[${i}]`;
    if (!isObject(e)) throw new Error(`${at} must be an object {"id","underlay","mtu","vtep","prefixes"}`);
    for (const k of Object.keys(e))
      if (!KEYS.has(k)) throw new Error(`${at}: unknown key "${k}" (known: ${[...KEYS].join(', ')})`);
    if (typeof e.id !== 'string' || !ID.test(e.id))
      throw new Error(`${at}.id must be 1-253 printable characters without spaces (the agent id)`);
    if (ids.has(e.id)) throw new Error(`${at}.id "${e.id}" is listed twice`);
    ids.add(e.id);
    let underlay: string;
    try {
      const a = parseAddress(e.underlay as string);
      underlay = formatAddress(a.family, a.value);
    } catch (err) {
      throw new Error(`${at}.underlay must be one IP address: ${(err as Error).message}`);
    }
    if (!Number.isInteger(e.mtu) || (e.mtu as number) < 576 || (e.mtu as number) > 65535)
      throw new Error(`${at}.mtu must be an integer in 576..65535, not ${JSON.stringify(e.mtu)}`);
    const v = e.vtep;
    if (!isObject(v)) throw new Error(`${at}.vtep must be an object {"mac","vni","port"}`);
    for (const k of Object.keys(v))
      if (!VTEP_KEYS.has(k)) throw new Error(`${at}.vtep: unknown key "${k}" (known: mac, vni, port)`);
    const mac = typeof v.mac === 'string' ? v.mac.toLowerCase() : '';
    if (!MAC.test(mac)) throw new Error(`${at}.vtep.mac must be a MAC address like 0e:77:0a:00:00:02`);
    if (!Number.isInteger(v.vni) || (v.vni as number) < 1 || (v.vni as number) > 0xffffff)
      throw new Error(`${at}.vtep.vni must be an integer in 1..16777215`);
    if (!Number.isInteger(v.port) || (v.port as number) < 1 || (v.port as number) > 65535)
      throw new Error(`${at}.vtep.port must be an integer in 1..65535`);
    if (!Array.isArray(e.prefixes)) throw new Error(`${at}.prefixes must be a list of CIDRs`);
    const prefixes = e.prefixes.map((p: unknown, j) => {
      try {
        return parseCidr(p as string).text;
      } catch (err) {
        throw new Error(`${at}.prefixes[${j}]: ${(err as Error).message}`);
      }
    });
    return {
      id: e.id,
      underlay,
      mtu: e.mtu as number,
      vtep: { mac, vni: v.vni as number, port: v.port as number },
      prefixes,
    };
  });
}

/** Endpoints as stored: only their own fields, in a fixed order (what a reader compares). */
export function encodeEndpoints(endpoints: readonly TunnelEndpoint[]): TunnelEndpoint[] {
  return endpoints.map((e) => ({
    id: e.id,
    underlay: e.underlay,
    mtu: e.mtu,
    vtep: { mac: e.vtep.mac, vni: e.vtep.vni, port: e.vtep.port },
    prefixes: [...e.prefixes],
  }));
}

/**
 * The endpoints with only the prefixes inside `vouched` (what the source says the node owns), and a
 * line per prefix dropped. A prefix two endpoints claim stays with the first: traffic cannot go to
 * both. The rest of each endpoint stays: one bad slice does not cut off the others.
 */
export function vouchedEndpoints(
  node: string,
  endpoints: readonly TunnelEndpoint[],
  vouched: readonly string[],
  /** How the source names what it vouches for ("blocks it owns", "spec.podCIDRs"). */
  what: string,
): { endpoints: TunnelEndpoint[]; rejected: string[] } {
  const owned = vouched.map((p) => parseCidr(p));
  const rejected: string[] = [];
  const claimed = new Map<string, string>();
  const out = endpoints.map((e) => {
    const prefixes = e.prefixes.filter((p) => {
      const c = parseCidr(p);
      const inside = owned.some(
        (o) => o.family === c.family && o.prefixLength <= c.prefixLength && cidrContains(o, c.network),
      );
      if (!inside) {
        rejected.push(
          `node ${node}: endpoint ${e.id} claims ${p}, which is not inside ${what} (${vouched.join(', ') || 'none'}); prefix ignored`,
        );
        return false;
      }
      const other = claimed.get(c.text);
      if (other !== undefined) {
        rejected.push(
          `node ${node}: endpoint ${e.id} claims ${p}, which endpoint ${other} claims; prefix ignored`,
        );
        return false;
      }
      claimed.set(c.text, e.id);
      return true;
    });
    return { ...e, vtep: { ...e.vtep }, prefixes };
  });
  return { endpoints: out, rejected };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

import { parseAddress, parseCidr } from '../../lib/cidr';
import type { NodeRecord } from '../../core/fabric/peer-source';

// A node's record as JSON under <prefix>/nodes/<node>. Other nodes' records are untrusted input: one
// that does not parse, names another node than its key, or carries an address, MTU or VTEP that could
// not be programmed is ignored as a whole and reported, never half-used.

/** A record as read from etcd: the node's data, plus the prefixes it claims to announce, if any. */
export interface ReadRecord {
  record: NodeRecord;
  /** Prefixes the record itself names (an extra field); only ever checked against block ownership. */
  announced: string[];
}

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

export function encodeRecord(r: NodeRecord): string {
  const out: NodeRecord = { node: r.node, underlay: r.underlay, mtu: r.mtu, bootId: r.bootId };
  if (r.vtep) out.vtep = { mac: r.vtep.mac, vni: r.vtep.vni, port: r.vtep.port };
  return JSON.stringify(out);
}

/** Parses the record stored under `node`'s key; throws an Error saying what is wrong with it. */
export function decodeRecord(node: string, text: string): ReadRecord {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new Error('is not JSON');
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('is not a JSON object');
  const o = v as Record<string, unknown>;
  if (o.node !== node) throw new Error(`names node ${JSON.stringify(o.node)}, not ${node}`);
  if (!Array.isArray(o.underlay) || o.underlay.length === 0)
    throw new Error('has no underlay address (field "underlay")');
  const underlay = o.underlay.map((a) => {
    if (typeof a !== 'string') throw new Error('has an underlay address that is not a string');
    try {
      parseAddress(a);
    } catch (err) {
      throw new Error(`has an invalid underlay address: ${(err as Error).message}`);
    }
    return a;
  });
  if (!Number.isInteger(o.mtu) || (o.mtu as number) < 576 || (o.mtu as number) > 65535)
    throw new Error(`has MTU ${JSON.stringify(o.mtu)}, not a number 576-65535`);
  const record: NodeRecord = {
    node,
    underlay,
    mtu: o.mtu as number,
    bootId: typeof o.bootId === 'string' ? o.bootId : '',
  };
  if (o.vtep !== undefined) {
    const t = o.vtep as Record<string, unknown> | null;
    if (!t || typeof t !== 'object') throw new Error('has a "vtep" that is not an object');
    if (typeof t.mac !== 'string' || !MAC.test(t.mac))
      throw new Error(`has VTEP MAC ${JSON.stringify(t.mac)}, not six lowercase hex bytes`);
    if (!Number.isInteger(t.vni) || (t.vni as number) < 1 || (t.vni as number) > 0xffffff)
      throw new Error(`has VNI ${JSON.stringify(t.vni)}, not a number 1-16777215`);
    if (!Number.isInteger(t.port) || (t.port as number) < 1 || (t.port as number) > 65535)
      throw new Error(`has VTEP port ${JSON.stringify(t.port)}, not a number 1-65535`);
    record.vtep = { mac: t.mac, vni: t.vni as number, port: t.port as number };
  }
  const announced: string[] = [];
  if (o.prefixes !== undefined) {
    if (!Array.isArray(o.prefixes)) throw new Error('has a "prefixes" field that is not a list');
    for (const p of o.prefixes) {
      try {
        announced.push(parseCidr(String(p)).text);
      } catch (err) {
        throw new Error(`announces an invalid prefix: ${(err as Error).message}`);
      }
    }
  }
  return { record, announced };
}

import { decodeEndpoints, encodeEndpoints } from '../../core/fabric/endpoint-fields';
import { decodeVtep } from '../../core/fabric/vtep-fields';
import { parseAddress, parseCidr } from '../../lib/cidr';
import type { NodeRecord } from '../../core/peer-source';
import type { HolderStamp } from './alive-key';

// A node's record as JSON under <prefix>/nodes/<node>. Other nodes' records are untrusted input: one
// that does not parse, names another node than its key, or carries an address, MTU, VTEP or endpoint
// that could not be programmed is ignored as a whole and reported, never half-used. (Whether its
// endpoints' prefixes are the node's to give is the peer table's question: it knows the blocks.)
// A record carries its writer's stamp (store id and boot, field "holder"; alive-key.ts): whether the
// writer holds the name is the peer table's question too (it knows the alive keys).

/**
 * Most endpoints a record may list. A daemon serves at most 16 DPU agents at once (the DPU backend's
 * maxAgents), so a node has at most that many; four times it leaves room without letting one record
 * put thousands of routes and filter elements on every node. A record listing more is ignored whole.
 */
export const MAX_RECORD_ENDPOINTS = 64;

/** A record as read from etcd: the node's data, plus the prefixes it claims to announce, if any. */
export interface ReadRecord {
  record: NodeRecord;
  /** Prefixes the record itself names (an extra field); only ever checked against block ownership. */
  announced: string[];
  /** The daemon that wrote it, as it says; absent in records of daemons before stamps. */
  holder?: HolderStamp;
}

/** `r` as stored, stamped with `holder`, the daemon writing it (only a test writes none). */
export function encodeRecord(r: NodeRecord, holder?: HolderStamp): string {
  const out: NodeRecord & { holder?: HolderStamp } = {
    node: r.node,
    underlay: r.underlay,
    mtu: r.mtu,
    bootId: r.bootId,
  };
  if (r.vtep) out.vtep = { mac: r.vtep.mac, vni: r.vtep.vni, port: r.vtep.port };
  // The node's tunnel addresses (etcd blocks hand out their first address); older readers ignore them.
  if (out.vtep && r.vtep?.gateways && Object.keys(r.vtep.gateways).length > 0)
    out.vtep.gateways = { ...r.vtep.gateways };
  // Only when there are some: a node without DPUs writes the record it always wrote.
  if (r.endpoints && r.endpoints.length > 0) out.endpoints = encodeEndpoints(r.endpoints);
  if (holder) out.holder = { store: holder.store, boot: holder.boot };
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
  if (o.vtep !== undefined) record.vtep = decodeVtep(o.vtep);
  // Absent in records of daemons before DPU endpoints: those stay readable as they were.
  if (Array.isArray(o.endpoints) && o.endpoints.length > MAX_RECORD_ENDPOINTS)
    throw new Error(
      `lists ${o.endpoints.length} endpoints, more than the ${MAX_RECORD_ENDPOINTS} a node may have ` +
        '(a daemon serves at most 16 DPUs)',
    );
  if (o.endpoints !== undefined)
    try {
      record.endpoints = decodeEndpoints(o.endpoints);
    } catch (err) {
      throw new Error(`has an invalid endpoint list: ${(err as Error).message}`);
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
  const read: ReadRecord = { record, announced };
  if (o.holder !== undefined) read.holder = decodeStamp(o.holder);
  return read;
}

function decodeStamp(v: unknown): HolderStamp {
  const h = v as Partial<HolderStamp> | null;
  if (
    typeof h !== 'object' ||
    typeof h?.store !== 'string' ||
    typeof h.boot !== 'string' ||
    h.store === '' ||
    h.boot === ''
  )
    throw new Error('has a "holder" field that is not {"store","boot"} (the daemon that wrote it)');
  return { store: h.store, boot: h.boot };
}

// Our table as the kernel holds it, read from nft's JSON listing into the values the diff compares
// (policy-ruleset.ts). Whatever does not read as we write it — a rule edited or removed by hand, an
// element that is not one of our prefixes, a verdict that is not a jump — comes out as something the
// diff replaces, never as something it trusts.

import { parseCidr } from '../cidr';
import { NftablesError } from './libnftables';
import { POLICY_TABLE, type RulesetState } from './policy-ruleset';

export interface KernelTable {
  /** The table's handle: a table deleted and made again (by anyone) gets a new one. */
  handle: number;
  state: RulesetState;
}

type Json = Record<string, unknown>;

const RULE_COMMENT = /^([0-9a-f]{12}):(\d+)\/(\d+)$/;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The objects of a listing (`{"nftables": [...]}`) of our table, each as [kind, body]. */
function objectsOf(listing: string): [string, Json][] {
  let doc: unknown;
  try {
    doc = JSON.parse(listing);
  } catch (err) {
    throw new NftablesError(`nft printed a listing that is not JSON: ${(err as Error).message}`);
  }
  const items = isObject(doc) && Array.isArray(doc.nftables) ? (doc.nftables as unknown[]) : [];
  const out: [string, Json][] = [];
  for (const item of items) {
    if (!isObject(item)) continue;
    for (const [kind, body] of Object.entries(item))
      if (isObject(body) && (body.table === undefined || body.table === POLICY_TABLE)) out.push([kind, body]);
  }
  return out;
}

/** An element as our renderer writes it (canonical prefix text), or its own text when it is not one. */
function setElement(elem: unknown, family: 4 | 6): string {
  const bits = family === 4 ? 32 : 128;
  const value = isObject(elem) && isObject(elem.elem) ? elem.elem.val : elem;
  try {
    if (typeof value === 'string') return parseCidr(`${value}/${bits}`).text;
    if (isObject(value) && isObject(value.prefix))
      return parseCidr(`${String(value.prefix.addr)}/${String(value.prefix.len)}`).text;
  } catch {
    // Not a prefix of ours: kept as its own text below, so the diff deletes it.
  }
  if (isObject(value) && Array.isArray(value.range))
    return `${String(value.range[0])}-${String(value.range[1])}`;
  return JSON.stringify(value);
}

/** A verdict map element's interface and the chain it jumps to ('' for any other verdict). */
function mapElement(elem: unknown): [string, string] | undefined {
  if (!Array.isArray(elem) || typeof elem[0] !== 'string') return undefined;
  const verdict: unknown = elem[1];
  const jump = isObject(verdict) && isObject(verdict.jump) ? verdict.jump.target : undefined;
  return [elem[0], typeof jump === 'string' ? jump : ''];
}

/** The digest of a chain whose rules carry exactly our comments, in order; undefined otherwise. */
function chainDigest(comments: readonly (string | undefined)[]): string | undefined {
  let digest: string | undefined;
  for (const [i, c] of comments.entries()) {
    const m = RULE_COMMENT.exec(c ?? '');
    if (!m || Number(m[2]) !== i || Number(m[3]) !== comments.length) return undefined;
    if (digest !== undefined && m[1] !== digest) return undefined;
    digest = m[1];
  }
  return digest;
}

/** Reads nft's JSON listing of `table inet workloadnet_policy` (with handles). */
export function parseTableListing(listing: string): KernelTable {
  let handle = -1;
  const state: RulesetState = { sets: new Map(), vmaps: new Map(), chains: new Map(), counters: new Set() };
  const comments = new Map<string, (string | undefined)[]>();
  for (const [kind, body] of objectsOf(listing)) {
    const name = String(body.name);
    if (kind === 'table' && body.name === POLICY_TABLE) handle = Number(body.handle);
    else if (kind === 'set' && body.type === 'ifname') {
      state.vmaps.set(name, new Map([...deniedPackets(body).keys()].map((i) => [i, ''])));
    } else if (kind === 'set') {
      const family = body.type === 'ipv6_addr' ? 6 : 4;
      const elems = Array.isArray(body.elem) ? (body.elem as unknown[]) : [];
      state.sets.set(name, new Set(elems.map((e) => setElement(e, family))));
    } else if (kind === 'map') {
      const elems = Array.isArray(body.elem) ? (body.elem as unknown[]) : [];
      const entries = elems.map(mapElement).filter((e): e is [string, string] => e !== undefined);
      state.vmaps.set(name, new Map(entries));
    } else if (kind === 'chain') {
      if (!comments.has(name)) comments.set(name, []);
    } else if (kind === 'rule') {
      const chain = String(body.chain);
      const list = comments.get(chain) ?? [];
      list.push(typeof body.comment === 'string' ? body.comment : undefined);
      comments.set(chain, list);
    } else if (kind === 'counter') state.counters.add(name);
  }
  if (handle < 0) throw new NftablesError(`the listing of ${POLICY_TABLE} holds no table`);
  for (const [chain, list] of comments) state.chains.set(chain, chainDigest(list));
  return { handle, state };
}

/** Packets counted per interface by the elements of a `*_denied` set. */
function deniedPackets(body: Json): Map<string, number> {
  const out = new Map<string, number>();
  for (const e of Array.isArray(body.elem) ? (body.elem as unknown[]) : []) {
    if (typeof e === 'string') out.set(e, 0);
    else if (isObject(e) && isObject(e.elem) && typeof e.elem.val === 'string') {
      const counter = isObject(e.elem.counter) ? Number(e.elem.counter.packets) : 0;
      out.set(e.elem.val, Number.isFinite(counter) ? counter : 0);
    }
  }
  return out;
}

/** Packets dropped per interface, from a JSON listing of one `*_denied` set (empty when absent). */
export function parseDenied(listing: string): Map<string, number> {
  for (const [kind, body] of objectsOf(listing)) if (kind === 'set') return deniedPackets(body);
  return new Map();
}

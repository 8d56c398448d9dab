import { formatAddress, parseAddress, parseCidr } from '../../lib/cidr';
import { invalidArgument, type WorkloadNetError } from '../../core/errors';
import { decodeEndpoints, vouchedEndpoints } from '../../core/fabric/endpoint-fields';
import type { Peer } from '../../core/peer-source';
import { scanPeersList } from './peers-list-scan';

// The static peer source's file (--peers-file): {"peers":[{"node","underlay","mtu","vtep","prefixes",
// "bootId","endpoints"}]}. A file that is wrong anywhere is refused whole, with the field named, so
// that a typo in one entry never withdraws the others (the source keeps its previous table). The one
// exception is a well-formed endpoint prefix outside its entry's own prefixes: the file vouches for
// a node only what the entry lists, so such a prefix is dropped and reported, the rest kept. Whether
// a well-formed prefix may be routed (inside the cluster ranges, over no underlay address, no own
// range, no other node's prefix) depends on what was routed before: the source settles that
// (prefix-ledger.ts), not the reader, which reads the same bytes the same way whatever came before.

const PEER_KEYS = new Set(['node', 'underlay', 'mtu', 'vtep', 'prefixes', 'bootId', 'endpoints']);
const VTEP_KEYS = new Set(['mac', 'vni', 'port']);
const NODE_NAME = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

/** The peers the text lists, canonical (addresses and prefixes as the kernel prints them), by node name. */
export function parsePeersFile(text: string, file: string): Map<string, Peer> {
  return readPeersFile(text, file).peers;
}

/** A line of `rejected`, with the entry it is about (a node skips what its own entry says). */
export interface PeersFileRejection {
  node: string;
  why: string;
}

/** The peers, and the endpoint prefixes dropped because their entry does not list them. */
export function readPeersFile(
  text: string,
  file: string,
): { peers: Map<string, Peer>; rejected: PeersFileRejection[] } {
  return new PeersFileReader().read(Buffer.from(text, 'utf8'), file);
}

/** What a read made of one entry of the list. */
interface ReadEntry {
  peer: Peer;
  /** Its endpoint prefixes dropped (not in its own prefixes), each with why. */
  dropped: string[];
  /** The last read that listed it. */
  seen: number;
  /** Its index in that read's list. */
  index: number;
}

/** The last scanned read that was accepted: its bytes, its entries' byte ranges, and their reads. */
interface LastList {
  bytes: Buffer;
  ranges: readonly number[];
  entries: ReadEntry[];
}

/**
 * Reads the file again and again, keeping what each entry's text was read as: an entry whose text did
 * not change is taken as it is, record included. The file is re-read whole for every change of one
 * entry, so only new entries are checked and canonicalised, and an unchanged peer keeps its record,
 * which everything downstream then compares by identity rather than field by field.
 */
export class PeersFileReader {
  /** By the entry's JSON text (as this file writes it). */
  private readonly known = new Map<string, ReadEntry>();
  private reads = 0;
  /**
   * The last accepted list, and where in it the read under way expects its next entry. An entry whose
   * bytes equal the expected one's is that entry, found without making its text a string: making and
   * hashing a string of every entry would be most of a read's time and its garbage.
   */
  private last: LastList | undefined;
  private cursor = 0;

  /** The peers the bytes list; throws, naming the field, when they are wrong anywhere. */
  read(bytes: Buffer, file: string): { peers: Map<string, Peer>; rejected: PeersFileRejection[] } {
    const fail = (msg: string): WorkloadNetError => invalidArgument(`peers file ${file}: ${msg}`);
    const ranges = scanPeersList(bytes);
    if (ranges) {
      const entries: ReadEntry[] = [];
      this.cursor = 0;
      try {
        const out = this.readList(
          ranges.length / 2,
          (i) => this.scanned(bytes, ranges, i),
          file,
          fail,
          entries,
        );
        this.last = { bytes, ranges, entries };
        return out;
      } catch (err) {
        if (!(err instanceof NotJson)) throw err;
      }
    }
    this.last = undefined;
    const list = wholeList(bytes, fail);
    return this.readList(list.length, (i) => list[i] as ListEntry, file, fail);
  }

  private readList(
    count: number,
    entryAt: (i: number) => ListEntry,
    file: string,
    fail: (m: string) => WorkloadNetError,
    entries?: ReadEntry[],
  ): { peers: Map<string, Peer>; rejected: PeersFileRejection[] } {
    const stamp = ++this.reads;
    const peers = new Map<string, Peer>();
    const rejected: PeersFileRejection[] = [];
    for (let i = 0; i < count; i++) {
      const { key, entry, read: same } = entryAt(i);
      const at = (): string => `peers[${i}]`;
      let read = same ?? this.known.get(key);
      if (!read) {
        read = { ...entryOf(entry, at(), fail), seen: stamp, index: i };
        this.known.set(key, read);
      }
      read.seen = stamp;
      read.index = i;
      entries?.push(read);
      const { peer } = read;
      for (const r of read.dropped)
        rejected.push({ node: peer.node, why: `peers file ${file}: ${at()}: ${r}` });
      if (peers.has(peer.node)) throw fail(`${at()}.node: "${peer.node}" is listed twice`);
      peers.set(peer.node, peer);
    }
    // forEach, not for-of: for-of makes an entry array per peer per read, garbage at thousands of peers.
    this.known.forEach((read, key) => {
      if (read.seen !== stamp) this.known.delete(key);
    });
    return { peers, rejected };
  }

  /**
   * Entry `i` of a scanned list: the last list's entry where its bytes are that one's, else its text,
   * parsed only when new; NotJson when it does not parse.
   */
  private scanned(bytes: Buffer, ranges: readonly number[], i: number): ListEntry {
    const start = ranges[2 * i] ?? 0;
    const end = ranges[2 * i + 1] ?? 0;
    const last = this.last;
    const j = this.cursor;
    if (last && j < last.entries.length) {
      const from = last.ranges[2 * j] ?? 0;
      const to = last.ranges[2 * j + 1] ?? 0;
      if (to - from === end - start && bytes.compare(last.bytes, from, to, start, end) === 0) {
        this.cursor = j + 1;
        const read = last.entries[j] as ReadEntry;
        return { key: '', read };
      }
    }
    const key = bytes.toString('utf8', start, end);
    const known = this.known.get(key);
    if (known) {
      // An entry moved (one before it added or removed): expect the one that followed it last time.
      if (last && last.entries[known.index] === known) this.cursor = known.index + 1;
      return { key };
    }
    try {
      return { key, entry: JSON.parse(key) as unknown };
    } catch {
      throw new NotJson();
    }
  }
}

/** An entry a scan found is not JSON: the file is parsed whole, which says where. */
class NotJson extends Error {}

/**
 * The list's entries from the file parsed whole (not of its plain shape, or an entry not JSON): it
 * names what is wrong.
 */
function wholeList(bytes: Buffer, fail: (m: string) => WorkloadNetError): ListEntry[] {
  let doc: unknown;
  try {
    doc = JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    throw fail(`not valid JSON: ${(err as Error).message}`);
  }
  if (!isObject(doc) || !Array.isArray(doc.peers))
    throw fail('must hold a JSON object with a "peers" list: {"peers":[{"node":…}]}');
  for (const k of Object.keys(doc)) if (k !== 'peers') throw fail(`unknown key "${k}" (known: peers)`);
  return (doc.peers as unknown[]).map((entry) => ({ key: JSON.stringify(entry), entry }));
}

interface ListEntry {
  /** The entry's JSON text ('' when `read` is given). */
  key: string;
  /** The entry parsed; absent when its text was read before. */
  entry?: unknown;
  /** What the last read made of the same bytes. */
  read?: ReadEntry;
}

/** One entry checked and made canonical, with its endpoint prefixes it does not vouch for dropped. */
function entryOf(
  entry: unknown,
  at: string,
  fail: (m: string) => WorkloadNetError,
): { peer: Peer; dropped: string[] } {
  if (!isObject(entry)) throw fail(`${at} must be an object`);
  for (const k of Object.keys(entry))
    if (!PEER_KEYS.has(k)) throw fail(`${at}: unknown key "${k}" (known: ${[...PEER_KEYS].join(', ')})`);
  const peer = parsePeer(entry, at, fail);
  if (!peer.endpoints) return { peer, dropped: [] };
  const vouched = vouchedEndpoints(peer.node, peer.endpoints, peer.prefixes, "its entry's prefixes");
  peer.endpoints = vouched.endpoints;
  return { peer, dropped: vouched.rejected };
}

function parsePeer(e: Record<string, unknown>, at: string, fail: (m: string) => WorkloadNetError): Peer {
  if (typeof e.node !== 'string' || !NODE_NAME.test(e.node))
    throw fail(`${at}.node must be a node name (lowercase letters, digits, "-" and ".")`);
  if (!Array.isArray(e.underlay) || e.underlay.length === 0)
    throw fail(`${at}.underlay must be a non-empty list of addresses`);
  const underlay = e.underlay.map((a: unknown, j) => {
    try {
      const { family, value } = parseAddress(a as string);
      return formatAddress(family, value);
    } catch (err) {
      throw fail(`${at}.underlay[${j}]: ${(err as Error).message}`);
    }
  });
  const mtu = e.mtu ?? 1500;
  if (!Number.isInteger(mtu) || (mtu as number) < 68 || (mtu as number) > 65535)
    throw fail(`${at}.mtu must be an integer in 68..65535`);
  let vtep: Peer['vtep'];
  if (e.vtep !== undefined) {
    const v = e.vtep;
    if (!isObject(v)) throw fail(`${at}.vtep must be an object {"mac","vni","port"}`);
    for (const k of Object.keys(v))
      if (!VTEP_KEYS.has(k)) throw fail(`${at}.vtep: unknown key "${k}" (known: mac, vni, port)`);
    const mac = typeof v.mac === 'string' ? v.mac.toLowerCase() : '';
    if (!MAC.test(mac)) throw fail(`${at}.vtep.mac must be a MAC address like 0e:77:0a:00:00:02`);
    const vni = v.vni ?? 30574;
    if (!Number.isInteger(vni) || (vni as number) < 1 || (vni as number) > 0xffffff)
      throw fail(`${at}.vtep.vni must be an integer in 1..16777215`);
    const port = v.port ?? 4789;
    if (!Number.isInteger(port) || (port as number) < 1 || (port as number) > 65535)
      throw fail(`${at}.vtep.port must be an integer in 1..65535`);
    vtep = { mac, vni: vni as number, port: port as number };
  }
  if (!Array.isArray(e.prefixes)) throw fail(`${at}.prefixes must be a list of CIDRs`);
  const prefixes = e.prefixes.map((p: unknown, j) => {
    try {
      return parseCidr(p as string).text;
    } catch (err) {
      throw fail(`${at}.prefixes[${j}]: ${(err as Error).message}`);
    }
  });
  const bootId = e.bootId ?? '';
  if (typeof bootId !== 'string') throw fail(`${at}.bootId must be text`);
  let endpoints: Peer['endpoints'];
  if (e.endpoints !== undefined)
    try {
      endpoints = decodeEndpoints(e.endpoints);
    } catch (err) {
      throw fail(`${at}.${(err as Error).message.replace(/^"endpoints"/, 'endpoints')}`);
    }
  return {
    node: e.node,
    underlay,
    mtu: mtu as number,
    ...(vtep ? { vtep } : {}),
    bootId,
    ...(endpoints ? { endpoints } : {}),
    prefixes,
  };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

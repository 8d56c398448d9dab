import { vouchedEndpoints } from '../../core/fabric/endpoint-fields';
import { parseCidr } from '../../lib/cidr';
import type { Peer } from '../../core/peer-source';
import {
  describeHolder,
  parseAliveHolder,
  sameDaemon,
  type AliveHolder,
  type HolderStamp,
} from './alive-key';
import { byAffinity, sortBlocks, type Block } from './block-affinity';
import { decodeOwner } from './block-owner';
import { blockIndex, type BlockLayout } from './block-layout';
import { BLOCKS, NODES, blockOfKey } from './block-registry';
import { decodeRecord } from './node-record';

// The other nodes as etcd says they are at one revision: node records and block ownership, kept as the
// raw keys under the prefix (a full list, then the watch's changes) and turned into peers. A peer's
// prefixes are the blocks whose keys name it, nothing else: a record may not add to them, and one that
// tries is ignored as a whole. Blocks outside the configured cluster CIDRs are never routed (a forged
// "blocks/0.0.0.0-0" must not become a default route). A record's endpoints (its DPUs) may hold slices
// only of the node's own blocks: an endpoint prefix outside them is dropped and reported, the rest of
// the record stays. A block whose key names one of the node's DPUs (block-owner.ts) is that DPU's
// prefix whatever the record says: an endpoint's prefixes are its blocks, then what its record adds
// inside the node's own blocks (slices) or as one address anywhere in them (borrowed). A record
// giving an endpoint a prefix of a block that names another DPU is refused that prefix, and reported.
// An endpoint left with no prefix is not part of the peer: nothing routes to it, and its underlay is
// not admitted by the VXLAN filter (a record cannot add addresses to every node's filter by listing
// endpoints that hold nothing).
//
// Records count only as daemons write them: under a lease (record-publisher.ts). One without a lease
// (lease 0, written by a person or another program) never expires and is ignored: for a node whose
// daemon is alive (its alive key exists), the last record written under a lease stays in use until the
// daemon, which holds the name, writes its own over it; a name known by nothing else is not routed.
// And only as the name's holder writes them: while the node's alive key names a daemon that stamps its
// record (alive-key.ts), a record whose stamp names another daemon, or that carries none or does not
// parse, is not the holder's (a clone that raced a write in, an older daemon, another program with a
// lease): it is ignored and reported, and the node's last record that counted stays in use until the
// holder writes its own back (it does, seeing its record changed). While the node has no alive key
// (its daemon stopped or died), its leased record stands, stamped or not, until its lease expires, as
// it always did. An alive key that does not say its holder stamps is a daemon of an earlier version
// (a rolling upgrade): its unstamped records count as before, so a mixed cluster routes every node; a
// stamped record under such a name is still checked against the holder it names.
//
// A change touches one or two nodes (a record's, a block's old and new owner); only those are worked
// out again, so a watch event costs the same with 5 or 5,000 nodes.

/** How many names a status line lists before it only counts. */
const NAMES_SHOWN = 5;

/** A key's value as stored, with the lease it is bound to ('0': none). */
export interface Stored {
  value: string;
  lease: string;
}

export class PeerTable {
  /** Raw record per node name. */
  private readonly records = new Map<string, Stored>();
  /**
   * The last record per node that counted (leased, and its writer's stamp fit the holder), while its
   * key holds a record; kept over a full list, which may find a record that does not count.
   */
  private readonly good = new Map<string, string>();
  /** Holder per node whose alive key exists (undefined: a key that names no daemon). */
  private readonly alive = new Map<string, AliveHolder | undefined>();
  /** Owning node per block key name (the key's text after blocks/). */
  private readonly blocks = new Map<string, string>();
  /** Valid blocks per owner, by key name. */
  private readonly byOwner = new Map<string, Map<string, Block>>();
  /** Why a block key is not routed, by key name. */
  private readonly badBlocks = new Map<string, string>();
  /** Why a node's record is ignored, by node: what is wrong with it, or the blocks it may not announce. */
  private readonly badRecords = new Map<string, string | string[]>();
  /** Endpoint prefixes dropped from an accepted record, by node, each with why. */
  private readonly droppedPrefixes = new Map<string, string[]>();
  /** Nodes to work out again. */
  private readonly dirty = new Set<string>();
  private view = new Map<string, Peer>();
  private readonly viewText = new Map<string, string>();

  constructor(
    private readonly self: string,
    private readonly layouts: readonly BlockLayout[],
  ) {}

  /** Forgets every key: a full list follows. */
  clear(): void {
    for (const node of this.records.keys()) this.dirty.add(node);
    for (const owner of this.byOwner.keys()) this.dirty.add(owner);
    this.records.clear();
    this.alive.clear();
    this.blocks.clear();
    this.byOwner.clear();
    this.badBlocks.clear();
  }

  /** A key under the prefix (relative to it) now holds `value`, bound to `lease` ('0': none). */
  put(key: string, value: string, lease: string): void {
    const node = recordNode(key);
    const alive = aliveNode(key);
    if (node !== undefined) {
      this.records.set(node, { value, lease });
      this.dirty.add(node);
    } else if (alive !== undefined) {
      this.alive.set(alive, parseAliveHolder(value));
      this.dirty.add(alive);
    } else if (key.startsWith(BLOCKS)) {
      const name = key.slice(BLOCKS.length);
      this.dropBlock(name);
      const owner = decodeOwner(value);
      // A value naming nobody still marks the block taken (by a "node" of that literal name).
      const node = owner?.node ?? value;
      this.blocks.set(name, node);
      this.dirty.add(node);
      const block = owner && this.validBlock(name);
      if (!block) {
        this.badBlocks.set(
          name,
          owner
            ? `block key ${key} (owner ${value}) is not a block of the cluster CIDRs; not routed`
            : `block key ${key} holds ${JSON.stringify(value)}, which names no node (a node name, or {"node","endpoint"}); not routed`,
        );
        return;
      }
      if (owner.endpoint !== undefined) block.endpoint = owner.endpoint;
      let owned = this.byOwner.get(node);
      if (!owned) this.byOwner.set(node, (owned = new Map()));
      owned.set(name, block);
    }
  }

  /** A key under the prefix (relative to it) is gone. */
  delete(key: string): void {
    const node = recordNode(key);
    const alive = aliveNode(key);
    if (node !== undefined) {
      this.records.delete(node);
      this.dirty.add(node);
    } else if (alive !== undefined) {
      this.alive.delete(alive);
      this.dirty.add(alive);
    } else if (key.startsWith(BLOCKS)) this.dropBlock(key.slice(BLOCKS.length));
  }

  /** This node's own record as stored, with its lease, if any. */
  ownRecord(): Stored | undefined {
    return this.records.get(this.self);
  }

  /** Works out the nodes changes touched; true when peers() changed. */
  recompute(): boolean {
    let next: Map<string, Peer> | undefined;
    for (const node of this.dirty) {
      const peer = node === this.self ? undefined : this.peerOf(node);
      const text = peer && JSON.stringify(peer);
      if (text === this.viewText.get(node)) continue;
      // Copy on change: a table handed out by peers() never changes under its holder.
      next ??= new Map(this.view);
      if (peer) {
        next.set(node, peer);
        this.viewText.set(node, text!);
      } else {
        next.delete(node);
        this.viewText.delete(node);
      }
    }
    this.dirty.clear();
    if (next) this.view = next;
    return next !== undefined;
  }

  peers(): ReadonlyMap<string, Peer> {
    return this.view;
  }

  /** What the source ignored, each with why. */
  rejected(): string[] {
    // Owners are named as they are now, not as they were when the record was refused.
    const records = [...this.badRecords].map(([node, why]) =>
      typeof why === 'string'
        ? `node ${node}: its record ${why}; record ignored`
        : `node ${node}: its record announces ${why.map((p) => `${p} (${this.ownerOf(p)})`).join(', ')}, ` +
          'which it does not own; record ignored',
    );
    return [...records, ...[...this.droppedPrefixes.values()].flat(), ...this.badBlocks.values()];
  }

  /** Nodes that own blocks but publish no record, with their blocks: nothing to route them to. */
  unrouted(): Map<string, string[]> {
    const out = new Map<string, string[]>();
    for (const [owner, owned] of this.byOwner)
      if (owner !== this.self && !this.records.has(owner) && owned.size > 0)
        out.set(owner, sortBlocks([...owned.values()]));
    return out;
  }

  /** One status line about unrouted blocks, or undefined when there are none. */
  unroutedReason(): string | undefined {
    const entries = [...this.unrouted()].sort(([a], [b]) => a.localeCompare(b));
    if (entries.length === 0) return undefined;
    const shown = entries
      .slice(0, NAMES_SHOWN)
      .map(([node, blocks]) => `${node} (${blocks.join(', ')})`)
      .join(', ');
    const more = entries.length > NAMES_SHOWN ? ` and ${entries.length - NAMES_SHOWN} more` : '';
    return (
      `blocks owned by nodes that publish no node record are unreachable from here: ${shown}${more}; ` +
      'such a node is down or runs without the fabric'
    );
  }

  /** The peer `node` is, or undefined (no record, or one that is refused: then said why). */
  private peerOf(node: string): Peer | undefined {
    this.badRecords.delete(node);
    this.droppedPrefixes.delete(node);
    const stored = this.records.get(node);
    if (stored === undefined) {
      this.good.delete(node);
      return undefined;
    }
    const text = this.counted(node, stored);
    if (text === undefined) return undefined;
    let read;
    try {
      read = decodeRecord(node, text);
    } catch (err) {
      this.badRecords.set(node, (err as Error).message);
      return undefined;
    }
    const owned = [...(this.byOwner.get(node)?.values() ?? [])];
    const mine = new Set(owned.map((b) => b.text));
    const foreign = read.announced.filter((p) => !mine.has(p));
    if (foreign.length > 0) {
      this.badRecords.set(node, foreign);
      return undefined;
    }
    const prefixes = sortBlocks(owned);
    if (!read.record.endpoints) return { ...read.record, prefixes };
    const vouched = vouchedEndpoints(node, read.record.endpoints, prefixes, 'the blocks it owns');
    const endpoints = byAffinity(node, vouched.endpoints, owned, vouched.rejected).filter(
      (e) => e.prefixes.length > 0,
    );
    if (vouched.rejected.length > 0) this.droppedPrefixes.set(node, vouched.rejected);
    if (endpoints.length > 0) return { ...read.record, endpoints, prefixes };
    const { endpoints: _none, ...hostOnly } = read.record;
    return { ...hostOnly, prefixes };
  }

  /**
   * The record that stands for `node`: the stored one when it counts; otherwise, said why, the last
   * one that counted while the node's daemon is alive, or nothing. A stored record that does not parse
   * is returned as it is when nothing says it is not the holder's: decoding it says what is wrong.
   */
  private counted(node: string, stored: Stored): string | undefined {
    if (stored.lease === '0')
      return this.kept(
        node,
        'was written without a lease (every daemon writes its record under one; a person or another ' +
          'program wrote this one)',
      );
    const why = this.notTheHolders(node, stored.value);
    if (why === undefined) {
      this.good.set(node, stored.value);
      return stored.value;
    }
    return why === 'unreadable' ? stored.value : this.kept(node, why);
  }

  /**
   * Why the leased `text` under `node`'s key is not its holder's; undefined when it is, or when no
   * daemon holds the name (no alive key: the record stands until its lease expires, as a record of a
   * node whose daemon is gone always did); 'unreadable' for a record that does not parse under a
   * holder that does not stamp (an older daemon's: the record is refused for what is wrong with it).
   */
  private notTheHolders(node: string, text: string): string | 'unreadable' | undefined {
    if (!this.alive.has(node)) return undefined;
    const holder = this.alive.get(node);
    let stamp: HolderStamp | undefined;
    try {
      stamp = decodeRecord(node, text).holder;
    } catch (err) {
      // The holder stamps every record it writes, and writes none that does not parse.
      if (!holder?.stampsRecord) return 'unreadable';
      return `${(err as Error).message}, so it is not the record of ${held(node, holder)}`;
    }
    if (stamp)
      return holder && sameDaemon(stamp, holder)
        ? undefined
        : `was written by the daemon of store ${stamp.store} (boot ${stamp.boot}), not by ${held(node, holder)}`;
    return holder?.stampsRecord
      ? `names no daemon that wrote it, but ${held(node, holder)}, which stamps every record it ` +
          'writes: an older daemon given the same name, or another program, wrote this one'
      : undefined;
  }

  /** The last record that counted for `node`, while its daemon is alive; said why, either way. */
  private kept(node: string, why: string): string | undefined {
    const kept = this.alive.has(node) ? this.good.get(node) : undefined;
    this.badRecords.set(
      node,
      `${why}${kept !== undefined ? ", and the node's daemon is alive: its last record stays in use until it writes its own again" : ''}`,
    );
    return kept;
  }

  private dropBlock(name: string): void {
    const owner = this.blocks.get(name);
    if (owner === undefined) return;
    this.blocks.delete(name);
    this.badBlocks.delete(name);
    this.dirty.add(owner);
    const owned = this.byOwner.get(owner);
    owned?.delete(name);
    if (owned?.size === 0) this.byOwner.delete(owner);
  }

  private ownerOf(prefix: string): string {
    const name = prefix.replace('/', '-');
    const owner = this.blocks.get(name);
    return owner !== undefined && !this.badBlocks.has(name) ? `owned by ${owner}` : 'owned by no node';
  }

  private validBlock(name: string): Block | undefined {
    const text = blockOfKey(`${BLOCKS}${name}`);
    if (text === undefined) return undefined;
    if (!this.layouts.some((l) => blockIndex(l, text) !== undefined)) return undefined;
    const c = parseCidr(text);
    return { text: c.text, family: c.family, network: c.network, prefixLength: c.prefixLength };
  }
}

/** Who holds `node`'s name, for a reason. */
function held(node: string, holder: AliveHolder | undefined): string {
  return `node name ${node}'s holder, ${describeHolder(holder)} (its alive key)`;
}

const ALIVE = '/alive';

/** The node an alive key names (nodes/<node>/alive), or undefined for any other key. */
function aliveNode(key: string): string | undefined {
  if (!key.startsWith(NODES) || !key.endsWith(ALIVE)) return undefined;
  const name = key.slice(NODES.length, -ALIVE.length);
  return name.length > 0 && !name.includes('/') ? name : undefined;
}

/** The node a record key names (nodes/<node>), or undefined for any other key (an alive key too). */
function recordNode(key: string): string | undefined {
  if (!key.startsWith(NODES)) return undefined;
  const name = key.slice(NODES.length);
  return name.length > 0 && !name.includes('/') ? name : undefined;
}

export const recordKey = (node: string): string => `${NODES}${node}`;

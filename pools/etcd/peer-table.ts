import { parseCidr } from '../../lib/cidr';
import type { Peer } from '../../core/fabric/peer-source';
import { blockIndex, type BlockLayout } from './block-layout';
import { BLOCKS, NODES, blockOfKey } from './block-registry';
import { decodeRecord } from './node-record';

// The other nodes as etcd says they are at one revision: node records and block ownership, kept as the
// raw keys under the prefix (a full list, then the watch's changes) and turned into peers on demand.
// A peer's prefixes are the blocks whose keys name it, nothing else: a record may not add to them,
// and one that tries is ignored as a whole. Blocks outside the configured cluster CIDRs are never
// routed (a forged "blocks/0.0.0.0-0" must not become a default route).

/** How many names a status line lists before it only counts. */
const NAMES_SHOWN = 5;

export class PeerTable {
  /** Raw record per node name. */
  private readonly records = new Map<string, string>();
  /** Owner per block key (the key's text after blocks/). */
  private readonly blocks = new Map<string, string>();
  private view = new Map<string, Peer>();
  private viewText = new Map<string, string>();
  private rejectedLines: string[] = [];
  private unroutedBlocks = new Map<string, string[]>();

  constructor(
    private readonly self: string,
    private readonly layouts: readonly BlockLayout[],
  ) {}

  /** Forgets everything: a full list follows. */
  clear(): void {
    this.records.clear();
    this.blocks.clear();
  }

  /** A key under the prefix (relative to it) now holds `value`. */
  put(key: string, value: string): void {
    const node = recordNode(key);
    if (node !== undefined) this.records.set(node, value);
    else if (key.startsWith(BLOCKS)) this.blocks.set(key.slice(BLOCKS.length), value);
  }

  /** A key under the prefix (relative to it) is gone. */
  delete(key: string): void {
    const node = recordNode(key);
    if (node !== undefined) this.records.delete(node);
    else if (key.startsWith(BLOCKS)) this.blocks.delete(key.slice(BLOCKS.length));
  }

  /** This node's own record as stored, if any. */
  ownRecord(): string | undefined {
    return this.records.get(this.self);
  }

  /** Recomputes peers from the keys; true when peers() changed. */
  recompute(): boolean {
    const rejected: string[] = [];
    const owned = new Map<string, Array<{ text: string; family: 4 | 6; network: bigint }>>();
    for (const [name, owner] of this.blocks) {
      const block = this.validBlock(name);
      if (!block) {
        rejected.push(
          `block key ${BLOCKS}${name} (owner ${owner}) is not a block of the cluster CIDRs; not routed`,
        );
        continue;
      }
      let list = owned.get(owner);
      if (!list) owned.set(owner, (list = []));
      list.push(block);
    }
    const peers = new Map<string, Peer>();
    for (const [node, text] of this.records) {
      if (node === this.self) continue;
      let read;
      try {
        read = decodeRecord(node, text);
      } catch (err) {
        rejected.push(`node ${node}: its record ${(err as Error).message}; record ignored`);
        continue;
      }
      const mine = new Set((owned.get(node) ?? []).map((b) => b.text));
      const foreign = read.announced.filter((p) => !mine.has(p));
      if (foreign.length > 0) {
        rejected.push(
          `node ${node}: its record announces ${foreign.map((p) => `${p} (${this.ownerOf(p)})`).join(', ')}, ` +
            'which it does not own; record ignored',
        );
        continue;
      }
      const prefixes = [...(owned.get(node) ?? [])]
        .sort((a, b) => a.family - b.family || (a.network < b.network ? -1 : a.network > b.network ? 1 : 0))
        .map((b) => b.text);
      peers.set(node, { ...read.record, prefixes });
    }
    const unrouted = new Map<string, string[]>();
    for (const [owner, list] of owned)
      if (owner !== this.self && !this.records.has(owner))
        unrouted.set(
          owner,
          list.map((b) => b.text),
        );
    this.rejectedLines = rejected;
    this.unroutedBlocks = unrouted;
    const texts = new Map([...peers].map(([n, p]) => [n, JSON.stringify(p)]));
    const changed =
      texts.size !== this.viewText.size || [...texts].some(([n, t]) => this.viewText.get(n) !== t);
    this.view = peers;
    this.viewText = texts;
    return changed;
  }

  peers(): ReadonlyMap<string, Peer> {
    return this.view;
  }

  rejected(): string[] {
    return this.rejectedLines;
  }

  /** Nodes that own blocks but publish no record, with their blocks: nothing to route them to. */
  unrouted(): ReadonlyMap<string, string[]> {
    return this.unroutedBlocks;
  }

  /** One status line about unrouted blocks, or undefined when there are none. */
  unroutedReason(): string | undefined {
    if (this.unroutedBlocks.size === 0) return undefined;
    const entries = [...this.unroutedBlocks].sort(([a], [b]) => a.localeCompare(b));
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

  private ownerOf(prefix: string): string {
    for (const [name, owner] of this.blocks)
      if (this.validBlock(name)?.text === prefix) return `owned by ${owner}`;
    return 'owned by no node';
  }

  private validBlock(name: string): { text: string; family: 4 | 6; network: bigint } | undefined {
    const text = blockOfKey(`${BLOCKS}${name}`);
    if (text === undefined) return undefined;
    if (!this.layouts.some((l) => blockIndex(l, text) !== undefined)) return undefined;
    const c = parseCidr(text);
    return { text: c.text, family: c.family, network: c.network };
  }
}

/** The node a record key names (nodes/<node>), or undefined for any other key (an alive key too). */
function recordNode(key: string): string | undefined {
  if (!key.startsWith(NODES)) return undefined;
  const name = key.slice(NODES.length);
  return name.length > 0 && !name.includes('/') ? name : undefined;
}

export const recordKey = (node: string): string => `${NODES}${node}`;

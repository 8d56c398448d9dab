import type { Etcd3, Namespace } from 'etcd3';
import { decodeOwner, encodeOwner, type BlockOwner } from './block-owner';

// Block ownership as etcd keys, under the configured prefix:
//   blocks/<block, "/" written "-">  = owning node name, or {"node","endpoint"} for a block claimed
//                                      for one DPU of the node (block-owner.ts). Durable: no lease, so
//                                      a daemon restart or upgrade never frees a block whose workloads
//                                      still run.
//   nodes/<node>/alive               = lease-bound: exists while the node's daemon is alive. Its value
//                                      says which daemon holds the name (alive-key.ts); only that one
//                                      serves the name's blocks, and only it deletes the key.
// Every change is a transaction that compares first (create only if absent, delete only if still ours),
// so two nodes can never both own a block whatever the timing: etcd's linearizable transactions are
// the only arbiter, as with Calico's block affinities and flannel's subnet leases.

export const BLOCKS = 'blocks/';
export const NODES = 'nodes/';

export const blockKey = (block: string): string => `${BLOCKS}${block.replace('/', '-')}`;
export const aliveKey = (node: string): string => `${NODES}${node}/alive`;

/** The block a key under blocks/ names, as CIDR text (not validated). */
export function blockOfKey(key: string): string | undefined {
  const name = key.slice(BLOCKS.length);
  const dash = name.lastIndexOf('-');
  return dash < 0 ? undefined : `${name.slice(0, dash)}/${name.slice(dash + 1)}`;
}

export class BlockRegistry {
  readonly ns: Namespace;

  constructor(client: Etcd3 | Namespace, prefix: string) {
    this.ns = client.namespace(`${prefix}/`);
  }

  /** Every claimed block and its owning node, whether claimed for the node or one of its DPUs. */
  async blocks(): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    for (const [block, owner] of await this.affinities()) out.set(block, owner.node);
    return out;
  }

  /**
   * Every claimed block and its owner (one range read). A value that names no owner is listed as a
   * node of that literal name: the block is taken all the same, and nobody here may claim it.
   */
  async affinities(): Promise<Map<string, BlockOwner>> {
    const all = await this.ns.getAll().prefix(BLOCKS).strings();
    const out = new Map<string, BlockOwner>();
    for (const [key, value] of Object.entries(all)) {
      const block = blockOfKey(key);
      if (block) out.set(block, decodeOwner(value) ?? { node: value });
    }
    return out;
  }

  /** Claims a block for `owner` (a node name, or a node's DPU) if nobody owns it. True when this call created the key. */
  async create(block: string, owner: string | BlockOwner): Promise<boolean> {
    const key = blockKey(block);
    const value = encodeOwner(typeof owner === 'string' ? { node: owner } : owner);
    const res = await this.ns.if(key, 'Create', '==', 0).then(this.ns.put(key).value(value)).commit();
    return res.succeeded;
  }

  /** Gives a block back if `owner` still owns it, exactly. True when this call deleted the key. */
  async release(block: string, owner: string | BlockOwner): Promise<boolean> {
    const key = blockKey(block);
    const value = encodeOwner(typeof owner === 'string' ? { node: owner } : owner);
    const res = await this.ns.if(key, 'Value', '==', value).then(this.ns.delete().key(key)).commit();
    return res.succeeded;
  }

  /** The value of `node`'s alive key, or undefined when it does not exist. */
  async alive(node: string): Promise<string | undefined> {
    return (await this.ns.get(aliveKey(node)).string()) ?? undefined;
  }

  /**
   * Writes `node`'s alive key bound to `lease` if it still holds `expected` (or, with undefined, does
   * not exist). True when this call wrote it.
   */
  async takeAlive(
    node: string,
    expected: string | undefined,
    value: string,
    lease: string,
  ): Promise<boolean> {
    const key = aliveKey(node);
    const cmp =
      expected === undefined ? this.ns.if(key, 'Create', '==', 0) : this.ns.if(key, 'Value', '==', expected);
    const res = await cmp.then(this.ns.put(key).value(value).lease(lease)).commit();
    return res.succeeded;
  }

  /** Deletes `node`'s alive key if it still holds `value`, the deleting daemon's own. */
  async dropAlive(node: string, value: string): Promise<boolean> {
    const key = aliveKey(node);
    const res = await this.ns.if(key, 'Value', '==', value).then(this.ns.delete().key(key)).commit();
    return res.succeeded;
  }

  /** Names of nodes whose alive key exists. */
  async aliveNodes(): Promise<Set<string>> {
    const keys = await this.ns.getAll().prefix(NODES).keys();
    const out = new Set<string>();
    for (const k of keys) if (k.endsWith('/alive')) out.add(k.slice(NODES.length, -'/alive'.length));
    return out;
  }
}

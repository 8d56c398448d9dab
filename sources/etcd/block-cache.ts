import type { Database } from 'lmdb';
import type { Store } from '../../core/store/store';

// The blocks this node owns, kept in the local store: the daemon starts and serves from them with
// etcd down. A claim is written here after etcd accepted it and before any address of it is handed
// out; a release is removed here only after etcd deleted the key. A crash in between leaves etcd
// ahead of the cache, which start-up reconciliation settles in etcd's favour.

export interface CachedBlock {
  /** Node name the block was claimed for (a renamed node does not inherit it). */
  node: string;
  /** The DPU of the node it was claimed for (absent: the node's own block). */
  endpoint?: string;
  cluster: string;
  claimedAt: string;
}

const PREFIX = 'etcd-block:';

export class BlockCache {
  private readonly db: Database<CachedBlock, string>;

  constructor(store: Store) {
    this.db = store.poolSourceState<CachedBlock>();
  }

  all(): Map<string, CachedBlock> {
    const out = new Map<string, CachedBlock>();
    for (const { key, value } of this.db.getRange({ start: PREFIX, end: `${PREFIX}\uffff` }))
      out.set(key.slice(PREFIX.length), value);
    return out;
  }

  async add(block: string, entry: CachedBlock): Promise<void> {
    await this.db.put(PREFIX + block, entry);
  }

  async remove(block: string): Promise<void> {
    await this.db.remove(PREFIX + block);
  }
}

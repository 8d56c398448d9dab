import type { AttachmentRecord } from './attachment-record';
import type { Store } from './store';

// One attachment row kept decoded until the store writes again. Status shows the host port on every
// call, readiness asks every 2 s, and a poller of `workloadnet dpus` many times a second: the host
// port's row carries a route per pod range of the cluster (5,000 at 5,000 peers), and decoding it for
// each of those reads would be a large share of what the daemon allocates (docs/benchmarks.md). The store
// is this process's alone, so no write can reach it unseen: the row is read again after any write has
// settled, and never kept while one is under way. The record handed out is shared: read it, never
// change it.

export class RowCache {
  private mark: number | undefined;
  private value: AttachmentRecord | undefined;

  constructor(
    private readonly store: Pick<Store, 'get' | 'writeMark'>,
    private readonly key: string,
  ) {}

  get(): AttachmentRecord | undefined {
    const mark = this.store.writeMark;
    if (mark !== undefined && mark === this.mark) return this.value;
    const value = this.store.get(this.key);
    // Read during a write: handed out, not kept (the write may be about to change it).
    this.mark = mark;
    this.value = value;
    return value;
  }
}

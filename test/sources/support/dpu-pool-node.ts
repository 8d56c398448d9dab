import { IpAllocator } from '../../../core/ipam/ip-allocator';
import { PoolSupply } from '../../../core/ipam/pool-supply';
import { SliceBook } from '../../../core/fabric/slice-book';
import { silentLogger } from '../../../core/logger';
import { Metrics } from '../../../core/metrics';
import { Store } from '../../../core/store/store';
import { EtcdPoolSource, type EtcdPoolSourceOptions } from '../../../sources/etcd/etcd-pool-source';
import type { EtcdCluster } from '../../support/etcd-cluster';

// One node of the etcd pool source with DPUs, as the daemon wires it, without the daemon around it:
// its store, allocator, pool source and slice book. Attaches and detaches go through the book.

export const DPU_PREFIX = '/workloadnet';

export interface DpuPoolNodeOptions {
  cluster: string;
  blockSize: number;
  /** etcd.emptyBlockGraceSeconds, in ms (default an hour). */
  graceMs?: number;
  strict?: boolean;
  /** Further pool source options (the DPUs' liveness). */
  source?: Partial<EtcdPoolSourceOptions>;
}

export class DpuPoolNode {
  readonly store: Store;
  readonly allocator = new IpAllocator([]);
  readonly source: EtcdPoolSource;
  readonly supply: PoolSupply;
  readonly book: SliceBook;
  private seq = 0;
  /** Addresses held per attachment key. */
  readonly held = new Map<string, string[]>();

  constructor(
    readonly name: string,
    dir: string,
    etcd: EtcdCluster,
    opts: DpuPoolNodeOptions,
  ) {
    this.store = Store.open(dir, { node: name, bootId: 'boot-1' });
    this.source = new EtcdPoolSource({
      endpoints: etcd.localEndpoints,
      clusterCidrs: [opts.cluster],
      blockSize: opts.blockSize,
      prefix: DPU_PREFIX,
      nodeName: name,
      emptyBlockGraceMs: opts.graceMs ?? 3_600_000,
      store: this.store,
      metrics: new Metrics(),
      logger: silentLogger(),
      tickMs: 100,
      ...opts.source,
    });
    this.supply = new PoolSupply(this.source, this.allocator);
    this.book = new SliceBook({
      count: 4,
      strict: opts.strict ?? false,
      networks: [{ name: 'default', allocator: this.allocator, supply: this.supply }],
      store: () => this.store,
      log: silentLogger(),
    });
  }

  /** What the daemon's start does: the source's pools, then the book (no stored rows here). */
  async start(dpus: string[]): Promise<this> {
    await this.supply.start();
    await this.book.load([]);
    this.book.restoredAll();
    await this.book.setPresent(dpus);
    return this;
  }

  async attach(endpoint: string): Promise<{ key: string; address: string }> {
    const key = `w${this.seq++}`;
    const ips = await this.book.allocate(this.supply, endpoint);
    this.held.set(
      key,
      ips.map((i) => i.address),
    );
    return { key, address: ips[0]!.address };
  }

  detach(key: string): void {
    const addresses = this.held.get(key) ?? [];
    this.held.delete(key);
    this.supply.release(addresses);
    this.book.released(addresses);
  }

  pools(endpoint: string | undefined): string[] {
    return this.allocator
      .allPools()
      .filter((p) => p.endpoint === endpoint)
      .map((p) => p.cidr.text);
  }

  async stop(): Promise<void> {
    await this.source.stop();
    await this.store.close();
  }
}

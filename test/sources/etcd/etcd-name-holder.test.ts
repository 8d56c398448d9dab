import { expect } from 'chai';
import { nodeRecord } from '../support/node-records';
import * as path from 'node:path';
import type { NodeRecord } from '../../../core/peer-source';
import { IpAllocator } from '../../../core/ipam/ip-allocator';
import { silentLogger } from '../../../core/logger';
import { Metrics } from '../../../core/metrics';
import { Store } from '../../../core/store/store';
import { currentBootId } from '../../../lib/boot-id';
import { BlockRegistry } from '../../../sources/etcd/block-registry';
import { EtcdPeerSource } from '../../../sources/etcd/etcd-peer-source';
import { EtcdPoolSource } from '../../../sources/etcd/etcd-pool-source';
import { rejection } from '../../support/expect-error';
import { EtcdCluster } from '../../support/etcd-cluster';
import { describeEtcd, etcdSuite, until } from '../support/etcd-suite';

// One holder per node name, for everything published under it: two daemons given one --node-name on
// the same kernel boot (another namespace, its own state directory, so another store id) are told
// apart by their stores. Each daemon here is what the daemon wires for etcd, in this process: its
// store, the pool source (alive key, blocks) and the peer source (record) beside it, on a real
// 3-member etcd.

const V4 = '10.96.0.0/22';
const TTL = 2;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

// One kernel: both daemons of a name report the same boot.
const record = (node: string, ip: string): NodeRecord => nodeRecord(node, ip, 'the-one-boot');

/** One daemon's etcd side. */
class Daemon {
  readonly store: Store;
  readonly pool: EtcdPoolSource;
  readonly peers: EtcdPeerSource;

  constructor(
    readonly name: string,
    dir: string,
    etcd: EtcdCluster,
    prefix: string,
  ) {
    this.store = Store.open(dir, { node: name, bootId: 'the-one-boot' });
    const common = { endpoints: etcd.localEndpoints, clusterCidrs: [V4], blockSize: 26, prefix };
    this.pool = new EtcdPoolSource({
      ...common,
      nodeName: name,
      emptyBlockGraceMs: 3_600_000,
      store: this.store,
      metrics: new Metrics(),
      logger: silentLogger(),
      aliveTtlSeconds: TTL,
      tickMs: 200,
    });
    this.peers = new EtcdPeerSource({
      ...common,
      nodeName: name,
      storeId: () => this.store.identity.storeId,
      leaseTtlSeconds: TTL,
      logger: silentLogger(),
      tickMs: 200,
    });
  }

  async start(ip: string): Promise<this> {
    await this.pool.start(new IpAllocator([]));
    await this.peers.start(record(this.name, ip));
    return this;
  }

  async stop(): Promise<void> {
    await this.peers.stop();
    await this.pool.stop();
    await this.store.close();
  }
}

describeEtcd('one holder per node name (real 3-member etcd cluster)', function () {
  this.timeout(120_000);
  const suite = etcdSuite('wn-holder-');
  let seq = 0;
  const daemons: Daemon[] = [];

  const daemon = (name: string, ip: string): Promise<Daemon> => {
    const d = new Daemon(name, path.join(suite.root, `${name}-${seq++}`), suite.etcd, suite.prefix);
    daemons.push(d);
    return d.start(ip);
  };
  const blocksOf = async (node: string): Promise<string[]> =>
    [...(await new BlockRegistry(suite.client, suite.prefix).blocks())]
      .filter(([, owner]) => owner === node)
      .map(([b]) => b)
      .sort();
  afterEach(async () => {
    for (const d of daemons.splice(0)) await d.stop().catch(() => undefined);
  });

  /** n1 and n2 started, once n2 sees n1 with its block. */
  async function n1WatchedByN2(): Promise<[Daemon, Daemon]> {
    const n1 = await daemon('n1', '192.0.2.1');
    const n2 = await daemon('n2', '192.0.2.2');
    await until('n2 sees n1 with its block', () => (n2.peers.peers().get('n1')?.prefixes.length ?? 0) > 0);
    return [n1, n2];
  }

  it('a second daemon with a live node name on the same boot writes nothing under it, says who holds it, and takes over once the first is gone', async () => {
    const [first, watcher] = await n1WatchedByN2();
    const underlays = new Set<string>();
    watcher.peers.onChange(() => {
      const p = watcher.peers.peers().get('n1');
      if (p) underlays.add(p.underlay[0]!);
    });
    // Every write under the name from now on.
    const since = Number((await suite.client.get(`${suite.prefix}/nodes/n1`).exec()).header.revision) + 1;
    const puts: string[] = [];
    const w = await suite.client.watch().prefix(`${suite.prefix}/`).startRevision(String(since)).create();
    w.on('put', (kv) => {
      const key = kv.key.toString().slice(suite.prefix.length + 1);
      if (key === 'nodes/n1' || (key.startsWith('blocks/') && kv.value.toString().includes('n1')))
        puts.push(key);
    });

    const blocksBefore = await blocksOf('n1');
    const clone = await daemon('n1', '192.0.2.101');
    expect(clone.store.identity.storeId).to.not.equal(first.store.identity.storeId);
    // Long enough for a clone that fought over the name to have written several times.
    await sleep(3000);
    await w.cancel();
    expect(puts, 'nothing written under n1 while the first holds it').to.deep.equal([]);
    expect(watcher.peers.peers().get('n1')!.underlay).to.deep.equal(['192.0.2.1']);
    expect([...underlays], 'n2 never routed n1 elsewhere').to.deep.equal([]);
    const held = new RegExp(`node name n1 is held by the daemon of store ${first.store.identity.storeId} `);
    expect(clone.peers.status().reasons.join('\n')).to.match(held);
    expect(clone.peers.status().reasons.join('\n')).to.match(
      /publishes no node record for n1; give one of the two daemons another --node-name, or stop the other one/,
    );
    expect(clone.pool.status().reasons.join('\n')).to.match(held);
    // An attach on the clone finds no address: it may not claim a block under the name.
    const err = await rejection(clone.pool.needMore(4), 'UNAVAILABLE');
    expect(err.message).to.match(held);
    expect(await blocksOf('n1'), 'no block claimed by the clone').to.deep.equal(blocksBefore);

    // The first daemon stops for good: the name is free, and the clone takes record and blocks.
    await first.stop();
    daemons.splice(daemons.indexOf(first), 1);
    await until(
      'n2 routes n1 to the clone',
      () => watcher.peers.peers().get('n1')?.underlay[0] === '192.0.2.101',
    );
    await until('the clone reports nothing', () => clone.peers.status().reasons.length === 0);
    expect(clone.pool.status().reasons).to.deep.equal([]);
  });

  it("never routes a held name's node by a leased record another writer puts under its key, says so, and the holder's record comes back", async () => {
    const [holder, watcher] = await n1WatchedByN2();
    const key = `${suite.prefix}/nodes/n1`;
    const own = (await suite.client.get(key).exec()).kvs[0]!;
    // Every n1 that n2's peer source hands out from now on, and every reason it gives about n1.
    const underlays = new Set<string>();
    watcher.peers.onChange(() => {
      const p = watcher.peers.peers().get('n1');
      underlays.add(p ? p.underlay.join(',') : 'withdrawn');
    });
    const said = new Set<string>();
    const listen = setInterval(() => {
      for (const r of watcher.peers.status().rejected) if (r.startsWith('node n1:')) said.add(r);
    }, 5);

    // Another writer with a lease of its own: well-formed records, as an older daemon or another
    // program writes them (no stamp) and as a daemon of other state on this boot would (its stamp).
    const lease = suite.client.lease(30, { autoKeepAlive: false });
    const leaseId = await lease.grant();
    const forged = [
      JSON.stringify(record('n1', '192.0.2.66')),
      JSON.stringify({ ...record('n1', '192.0.2.67'), holder: { store: 'a-clone', boot: currentBootId() } }),
    ];
    try {
      for (let i = 0; i < 6; i++) {
        await suite.client
          .put(key)
          .value(forged[i % 2]!)
          .lease(leaseId)
          .exec();
        await sleep(150);
      }
      await until('the holder wrote its own back', async () => {
        const kv = (await suite.client.get(key).exec()).kvs[0];
        return kv !== undefined && kv.lease === own.lease && kv.value.equals(own.value);
      });
      await until('n2 reports nothing about n1', () =>
        watcher.peers.status().rejected.every((r) => !r.startsWith('node n1:')),
      );
    } finally {
      clearInterval(listen);
      await lease.revoke().catch(() => undefined);
    }
    expect([...underlays], "n2 never routed n1 by another writer's record, nor withdrew it").to.deep.equal(
      [],
    );
    expect(watcher.peers.peers().get('n1')!.underlay).to.deep.equal(['192.0.2.1']);
    const holderWords = `node name n1's holder, the daemon of store ${holder.store.identity.storeId} on host `;
    const reasons = [...said].join('\n');
    expect(reasons, 'the unstamped record named').to.include(
      `node n1: its record names no daemon that wrote it, but ${holderWords}`,
    );
    expect(reasons, 'the stamped one named').to.include(
      `node n1: its record was written by the daemon of store a-clone (boot ${currentBootId()}), not by ${holderWords}`,
    );
    expect(reasons).to.include(
      "the node's daemon is alive: its last record stays in use until it writes its own again",
    );
    expect(holder.peers.status().reasons).to.deep.equal([]);
  });
});

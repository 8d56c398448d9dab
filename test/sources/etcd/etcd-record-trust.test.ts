import { expect } from 'chai';
import { nodeRecord, tunnelEndpoint } from '../support/node-records';
import { peerAddresses } from '../../../backends/linux/fabric/vxlan-filter-script';
import type { NodeRecord } from '../../../core/peer-source';
import { silentLogger } from '../../../core/logger';
import { currentBootId } from '../../../lib/boot-id';
import { BlockRegistry } from '../../../sources/etcd/block-registry';
import { EtcdPeerSource } from '../../../sources/etcd/etcd-peer-source';
import { holdName, type HeldName } from '../support/name-holder';
import { describeEtcd, etcdSuite, until } from '../support/etcd-suite';

// Records count only as daemons write them, on a real 3-member etcd: one without a lease (a person's,
// an impostor's) is never routed, and the live node whose key it took writes its own back over it; a
// record's endpoints reach routes and the VXLAN filter only with prefixes of the node's own blocks,
// and a record listing more endpoints than a node may have is refused whole.

const TTL = 2;

const record = (node: string, ip: string): NodeRecord => nodeRecord(node, ip);

const endpoint = tunnelEndpoint;

describeEtcd('etcd records as daemons write them (real 3-member etcd cluster)', function () {
  this.timeout(120_000);
  const suite = etcdSuite('wn-trust-');
  let registry: BlockRegistry;
  const running: EtcdPeerSource[] = [];
  const names: HeldName[] = [];

  /** A node's peer source, its name held for it as its pool source would. */
  async function started(node: string, self: NodeRecord): Promise<EtcdPeerSource> {
    names.push(await holdName(suite.client, suite.prefix, node, `store-of-${node}`));
    const s = new EtcdPeerSource({
      endpoints: suite.etcd.localEndpoints,
      prefix: suite.prefix,
      clusterCidrs: ['10.96.0.0/22'],
      blockSize: 26,
      nodeName: node,
      storeId: () => `store-of-${node}`,
      leaseTtlSeconds: TTL,
      logger: silentLogger(),
      tickMs: 200,
    });
    running.push(s);
    await s.start(self);
    await until(`${node} synced`, () => s.synced);
    return s;
  }

  beforeEach(() => {
    registry = new BlockRegistry(suite.client, suite.prefix);
  });

  afterEach(async () => {
    for (const s of running.splice(0)) await s.stop().catch(() => undefined);
    for (const n of names.splice(0)) await n.drop();
  });

  it("routes nothing by a record written without a lease into a live node's key, and the node writes its own back under its lease", async () => {
    await registry.create('10.96.0.64/26', 'n2');
    const a = await started('n1', record('n1', '192.0.2.1'));
    const b = await started('n2', record('n2', '192.0.2.2'));
    await until('n1 sees n2', () => a.peers().has('n2'));
    const key = `${suite.prefix}/nodes/n2`;
    const ours = (await suite.client.get(key).exec()).kvs[0]!;
    // Every n2 that n1 is given from now on.
    const seen: string[] = [];
    a.onChange(() => seen.push(JSON.stringify(a.peers().get('n2') ?? null)));
    const forged = { ...record('n2', '192.0.2.66'), bootId: 'another-boot' };
    await suite.client.put(key).value(JSON.stringify(forged)).exec();
    await until('n2 wrote its own back', async () => {
      const kv = (await suite.client.get(key).exec()).kvs[0];
      return kv !== undefined && kv.lease !== '0' && kv.value.toString().includes('192.0.2.2');
    });
    const back = (await suite.client.get(key).exec()).kvs[0]!;
    expect(back.lease, 'under its own lease').to.equal(ours.lease);
    expect(JSON.parse(back.value.toString())).to.deep.equal({
      ...record('n2', '192.0.2.2'),
      holder: { store: 'store-of-n2', boot: currentBootId() },
    });
    await until('n1 follows the record back', () => a.status().rejected.length === 0);
    expect(a.peers().get('n2')!.underlay).to.deep.equal(['192.0.2.2']);
    expect(seen, 'n1 was never given another n2').to.deep.equal([]);
    expect(b.status().reasons).to.deep.equal([]);
  });

  it('routes no name known only by a record written without a lease, and says why', async () => {
    await registry.create('10.96.0.128/26', 'ghost');
    const a = await started('n1', record('n1', '192.0.2.1'));
    await suite.client
      .put(`${suite.prefix}/nodes/ghost`)
      .value(JSON.stringify(record('ghost', '192.0.2.77')))
      .exec();
    await until(
      'n1 read the ghost',
      () => a.peers().has('ghost') || a.status().rejected.some((r) => r.startsWith('node ghost:')),
    );
    expect(a.peers().has('ghost'), 'not routed').to.equal(false);
    expect(a.status().rejected).to.deep.equal([
      'node ghost: its record was written without a lease (every daemon writes its record under one; a ' +
        'person or another program wrote this one); record ignored',
    ]);
    // The same record under a lease, as a daemon writes it, is routed.
    const lease = await suite.client.lease(60, { autoKeepAlive: false }).grant();
    await suite.client
      .put(`${suite.prefix}/nodes/ghost`)
      .value(JSON.stringify(record('ghost', '192.0.2.77')))
      .lease(lease)
      .exec();
    await until('ghost routed', () => a.peers().has('ghost'));
    expect(a.peers().get('ghost')!.prefixes).to.deep.equal(['10.96.0.128/26']);
  });

  it("gives a record's endpoints routes and VXLAN filter elements only with prefixes of its node's blocks", async () => {
    await registry.create('10.96.0.64/26', 'n2');
    await registry.create('10.96.1.0/26', 'n3');
    const a = await started('n1', record('n1', '192.0.2.1'));
    const endpoints = [
      endpoint('dpu-0', 20, ['10.96.0.64/28']),
      // A slice of n3's block only: nothing of it is n2's to give.
      endpoint('dpu-1', 21, ['10.96.1.0/28']),
      // Holding nothing.
      endpoint('dpu-2', 22, []),
    ];
    await started('n2', { ...record('n2', '192.0.2.2'), endpoints });
    await until('n1 sees n2', () => a.peers().has('n2'));
    const n2 = a.peers().get('n2')!;
    expect(n2.endpoints).to.deep.equal([endpoints[0]]);
    expect(peerAddresses([...a.peers().values()]).v4, 'what the VXLAN filter admits').to.deep.equal([
      '192.0.2.2',
      '192.0.2.20',
    ]);
    expect(a.status().rejected).to.deep.equal([
      'node n2: endpoint dpu-1 claims 10.96.1.0/28, which is not inside the blocks it owns (10.96.0.64/26); prefix ignored',
    ]);
  });

  it('refuses whole a record listing more endpoints than a node may have, and says so', async () => {
    await registry.create('10.96.0.64/26', 'n2');
    const a = await started('n1', record('n1', '192.0.2.1'));
    const many = Array.from({ length: 5000 }, (_, i) => ({
      ...endpoint(`dpu-${i}`, 30, [`10.96.0.${64 + (i % 64)}/32`]),
      underlay: `198.18.${i >> 8}.${i & 255}`,
    }));
    const lease = await suite.client.lease(60, { autoKeepAlive: false }).grant();
    await suite.client
      .put(`${suite.prefix}/nodes/n2`)
      .value(JSON.stringify({ ...record('n2', '192.0.2.2'), endpoints: many }))
      .lease(lease)
      .exec();
    await until('refused', () => a.status().rejected.length > 0);
    expect(a.status().rejected).to.deep.equal([
      'node n2: its record lists 5000 endpoints, more than the 64 a node may have (a daemon serves at most 16 DPUs); record ignored',
    ]);
    expect(a.peers().has('n2')).to.equal(false);
  });
});

import { expect } from 'chai';
import { describeEtcd } from '../support/etcd-suite';
import { rejection } from '../../support/expect-error';
import { waitUntil } from '../../support/wait-until';
import { inBlock } from '../support/pool-nodes';
import { DPU_PREFIX, DpuPoolNode as Node, type DpuPoolNodeOptions } from '../support/dpu-pool-node';
import { dpuSuite } from '../support/dpu-suite';

// Blocks per DPU against a real 3-member etcd: the etcd pool source, the allocator and the slice book
// of one node as the daemon wires them, without the daemon around them. Each DPU claims blocks of its
// own (the key names node and DPU), its ports are addressed from them, a full block gets it another,
// and empty ones go back by the rules of a node's blocks, never with an address in use.

const PREFIX = DPU_PREFIX;

describeEtcd('etcd blocks per DPU (real 3-member etcd cluster)', function () {
  this.timeout(120_000);
  const suite = dpuSuite('wn-dpublk-');

  async function node(
    name: string,
    opts: DpuPoolNodeOptions,
    dpus: string[],
    dir = suite.dir(name),
  ): Promise<Node> {
    const n = new Node(name, dir, suite.etcd, opts);
    suite.nodes.push(n);
    return n.start(dpus);
  }

  /** Waits until DPUs d0 and d1 of `n` have claimed a first block each. */
  const firstBlocks = (n: Node, what = 'a block per DPU'): Promise<void> =>
    waitUntil(async () => n.pools('d0').length === 1 && n.pools('d1').length === 1, what, 30_000, {
      intervalMs: 50,
    });

  it('keeps a plain node name as a node block and an endpoint in JSON, and releases only the exact owner', async () => {
    expect(await suite.registry.create('10.99.0.0/26', 'n1')).to.equal(true);
    expect(await suite.registry.create('10.99.0.64/26', { node: 'n1', endpoint: 'dpu-a' })).to.equal(true);
    expect(await suite.registry.create('10.99.0.64/26', { node: 'n1', endpoint: 'dpu-b' }), 'taken').to.equal(
      false,
    );
    expect(await suite.values()).to.deep.equal({
      '10.99.0.0/26': 'n1',
      '10.99.0.64/26': '{"node":"n1","endpoint":"dpu-a"}',
    });
    expect(Object.fromEntries(await suite.registry.affinities())).to.deep.equal({
      '10.99.0.0/26': { node: 'n1' },
      '10.99.0.64/26': { node: 'n1', endpoint: 'dpu-a' },
    });
    // Readers that know only nodes (cluster blocks, release-node) still see the node.
    expect(Object.fromEntries(await suite.registry.blocks())).to.deep.equal({
      '10.99.0.0/26': 'n1',
      '10.99.0.64/26': 'n1',
    });
    expect(await suite.registry.release('10.99.0.64/26', 'n1'), 'the node is not the DPU').to.equal(false);
    expect(await suite.registry.release('10.99.0.64/26', { node: 'n1', endpoint: 'dpu-b' })).to.equal(false);
    expect(await suite.registry.release('10.99.0.64/26', { node: 'n1', endpoint: 'dpu-a' })).to.equal(true);
    expect(await suite.registry.release('10.99.0.0/26', { node: 'n1', endpoint: 'dpu-a' })).to.equal(false);
    expect(await suite.registry.release('10.99.0.0/26', 'n1')).to.equal(true);
  });

  it("claims a first block for each DPU and addresses each port from its DPU's blocks", async () => {
    const n = await node('n1', { cluster: '10.98.0.0/24', blockSize: 28 }, ['d0', 'd1']);
    await firstBlocks(n, 'a block claimed ahead for each DPU');
    expect(n.pools(undefined), 'no block of the node itself').to.deep.equal([]);
    const v = await suite.values();
    expect(JSON.parse(v[n.pools('d0')[0]!]!)).to.deep.equal({ node: 'n1', endpoint: 'd0' });
    expect(JSON.parse(v[n.pools('d1')[0]!]!)).to.deep.equal({ node: 'n1', endpoint: 'd1' });
    for (let i = 0; i < 3; i++) {
      const a = await n.attach('d0');
      const b = await n.attach('d1');
      expect(inBlock(a.address, n.pools('d0')[0]!), `${a.address} in d0's block`).to.equal(true);
      expect(inBlock(b.address, n.pools('d1')[0]!), `${b.address} in d1's block`).to.equal(true);
    }
    const own = n.book.own();
    expect(own.byEndpoint.get('d0')).to.deep.equal(n.pools('d0'));
    expect(own.byEndpoint.get('d1')).to.deep.equal(n.pools('d1'));
    expect(n.book.borrowed).to.equal(0);
  });

  it('a DPU whose blocks are full claims another for itself, not a borrowed address', async () => {
    const n = await node('n1', { cluster: '10.98.0.0/24', blockSize: 28 }, ['d0', 'd1']);
    await waitUntil(async () => n.pools('d0').length === 1, 'd0 has a block', 30_000, { intervalMs: 50 });
    const first = n.pools('d0')[0]!;
    const addresses: string[] = [];
    for (let i = 0; i < 20; i++) addresses.push((await n.attach('d0')).address);
    expect(new Set(addresses).size).to.equal(20);
    const mine = n.pools('d0');
    expect(mine.length, 'a second block for d0').to.be.greaterThan(1);
    for (const a of addresses)
      expect(
        mine.some((b) => inBlock(a, b)),
        `${a} in d0's blocks`,
      ).to.equal(true);
    expect(n.book.borrowed, 'nothing borrowed').to.equal(0);
    const v = await suite.values();
    for (const b of mine) expect(JSON.parse(v[b]!), b).to.deep.equal({ node: 'n1', endpoint: 'd0' });
    expect(n.pools('d1'), "d1's blocks untouched").to.have.length(1);
    expect(mine).to.include(first);
  });

  it('borrows a /32 only when no block is left, and refuses under strict slices', async () => {
    // Two /28 blocks: one per DPU, nothing left to claim.
    const n = await node('n1', { cluster: '10.97.0.0/27', blockSize: 28 }, ['d0', 'd1']);
    await firstBlocks(n);
    for (let i = 0; i < 15; i++) await n.attach('d0');
    const extra = await n.attach('d0');
    expect(inBlock(extra.address, n.pools('d1')[0]!), "borrowed from d1's block").to.equal(true);
    expect(n.book.borrowed).to.equal(1);
    expect(n.book.own().byEndpoint.get('d0')).to.deep.equal([...n.pools('d0'), `${extra.address}/32`]);
    await n.stop();
    suite.nodes.splice(suite.nodes.indexOf(n), 1);
    await suite.client.delete().prefix(`${PREFIX}/`);

    const s = await node('n2', { cluster: '10.97.0.0/27', blockSize: 28, strict: true }, ['d0', 'd1']);
    await firstBlocks(s);
    for (let i = 0; i < 15; i++) await s.attach('d0');
    const err = await rejection(s.attach('d0'));
    expect(err.code).to.equal('RESOURCE_EXHAUSTED');
    expect(err.message).to.include(`the IPv4 blocks of DPU d0 (${s.pools('d0')[0]})`);
    expect(err.message).to.include('fabric.strictSlices');
    expect(s.book.borrowed).to.equal(0);
  });

  it("serves each DPU's blocks again after a restart, from the local store with etcd's agreement", async () => {
    const dir = suite.dir('restart');
    const opts = { cluster: '10.98.0.0/24', blockSize: 28 };
    let n = await node('n1', opts, ['d0', 'd1'], dir);
    await firstBlocks(n);
    const a = await n.attach('d0');
    const before = { d0: n.pools('d0'), d1: n.pools('d1') };
    await n.stop();
    suite.nodes.splice(suite.nodes.indexOf(n), 1);
    // Restarted with no DPU listed yet: the blocks come back with their DPUs from the store at once.
    n = new Node('n1', dir, suite.etcd, opts);
    suite.nodes.push(n);
    await n.supply.start();
    expect({ d0: n.pools('d0'), d1: n.pools('d1') }).to.deep.equal(before);
    await n.book.load([]);
    n.allocator.markUsed(a.address);
    n.book.restoredAll();
    const b = await n.attach('d1');
    expect(inBlock(b.address, before.d1[0]!)).to.equal(true);
    await new Promise((r) => setTimeout(r, 500));
    expect({ d0: n.pools('d0'), d1: n.pools('d1') }, 'etcd agrees: nothing dropped').to.deep.equal(before);
  });

  it("release-node gives back a dead node's DPU blocks with its own, and cluster blocks names the DPU", async () => {
    await suite.registry.create('10.99.0.0/26', 'gone');
    await suite.registry.create('10.99.0.64/26', { node: 'gone', endpoint: 'g-d0' });
    await suite.registry.create('10.99.0.128/26', { node: 'other', endpoint: 'o-d0' });
    const listed = suite.cli('blocks', '--json');
    expect(listed.code, listed.stderr).to.equal(0);
    expect((JSON.parse(listed.stdout) as { blocks: unknown[] }).blocks).to.deep.include({
      block: '10.99.0.64/26',
      node: 'gone',
      endpoint: 'g-d0',
      nodeAlive: false,
    });
    const r = suite.cli('release-node', 'gone', '--json');
    expect(r.code, r.stderr).to.equal(0);
    expect((JSON.parse(r.stdout) as { released: string[] }).released.sort()).to.deep.equal([
      '10.99.0.0/26',
      '10.99.0.64/26',
    ]);
    expect(await suite.values()).to.deep.equal({ '10.99.0.128/26': '{"node":"other","endpoint":"o-d0"}' });
  });

  it("gives a DPU's empty block back after the grace, keeps its last, and never one with an address in use", async () => {
    const n = await node('n1', { cluster: '10.98.0.0/24', blockSize: 28, graceMs: 300 }, ['d0']);
    await waitUntil(async () => n.pools('d0').length === 1, 'd0 has a block', 30_000, { intervalMs: 50 });
    const held: Array<{ key: string; address: string }> = [];
    for (let i = 0; i < 20; i++) held.push(await n.attach('d0'));
    const [first, second] = n.pools('d0') as [string, string];
    expect(second, 'a second block').to.not.equal(undefined);
    // One address stays in the first block; the second empties: it goes back after the grace, since
    // the first still has a quarter block free; the first, holding a live address, stays.
    const live = held.find((h) => inBlock(h.address, first))!;
    for (const h of held) if (h !== live) n.detach(h.key);
    await waitUntil(
      async () => JSON.stringify(Object.keys(await suite.values())) === JSON.stringify([first]),
      "d0's empty block given back",
      30_000,
      { intervalMs: 100 },
    );
    expect(n.pools('d0')).to.deep.equal([first]);
    expect(n.allocator.poolFor(live.address), 'the live address keeps its pool').to.not.equal(undefined);
    // Empty now, but d0's last block: kept.
    n.detach(live.key);
    await new Promise((r) => setTimeout(r, 1000));
    expect(Object.keys(await suite.values()), "d0's last block is kept").to.have.length(1);
  });
});

import { expect } from 'chai';
import { describeEtcd } from '../support/etcd-suite';
import { setTimeout as sleep } from 'node:timers/promises';
import { waitUntil } from '../../support/wait-until';
import { inBlock } from '../support/pool-nodes';
import { DpuPoolNode, type DpuPoolNodeOptions } from '../support/dpu-pool-node';
import { dpuSuite } from '../support/dpu-suite';

// Blocks follow live DPUs, against a real 3-member etcd: a DPU (agent id) not connected for the gone
// grace gives back its blocks that hold no address, only connected DPUs are claimed blocks ahead, a
// node's DPU identities holding blocks are bounded, and an operator can give back one DPU's blocks.
// Which agents are connected is what the DPU backend's health says; here the test says it.

const GONE_MS = 1500;

describeEtcd('etcd blocks follow live DPUs (real 3-member etcd cluster)', function () {
  this.timeout(120_000);
  const suite = dpuSuite('wn-dpulive-');
  /** The DPU agents connected now, as the backend would list them. */
  let connected: Set<string>;

  beforeEach(() => {
    connected = new Set();
  });

  /** A node whose backend lists `connected` as its connected agents, with a short gone grace. */
  async function node(name: string, opts: DpuPoolNodeOptions, dpus: string[]): Promise<DpuPoolNode> {
    const n = new DpuPoolNode(name, suite.dir(name), suite.etcd, {
      ...opts,
      source: {
        goneGraceMs: GONE_MS,
        connectedDpus: () => Promise.resolve(new Set(connected)),
        ...opts.source,
      },
    });
    suite.nodes.push(n);
    return n.start(dpus);
  }

  it('17 short-lived DPU ids do not exhaust a /22 of /26 blocks: the gone ones give theirs back', async () => {
    // 16 blocks in all. Each DPU connects, is claimed its first block, and goes without a pod.
    const n = await node('n1', { cluster: '10.96.0.0/22', blockSize: 26, graceMs: 200 }, []);
    const listed: string[] = [];
    let most = 0;
    for (let i = 0; i < 17; i++) {
      const id = `short-${i}`;
      connected.add(id);
      listed.push(id);
      // The backend lists every carrier seen in the daemon's life, also once it is away.
      await n.book.setPresent(listed);
      await waitUntil(async () => n.pools(id).length === 1, `${id} claimed a block`, 10_000, {
        intervalMs: 20,
      });
      most = Math.max(most, Object.keys(await suite.values()).length);
      await sleep(250);
      connected.delete(id);
    }
    const last = 'short-17';
    connected.add(last);
    await n.book.setPresent([...listed, last]);
    await waitUntil(async () => n.pools(last).length === 1, 'the 18th DPU claimed a block', 10_000, {
      intervalMs: 20,
    });
    await waitUntil(
      async () => Object.keys(await suite.values()).length === 1,
      "every gone DPU's block given back",
      10_000,
      { intervalMs: 100 },
    );
    expect(Object.values(await suite.values())).to.deep.equal([
      JSON.stringify({ node: 'n1', endpoint: last }),
    ]);
    expect(most, 'blocks held at once, at most').to.be.lessThan(16);
  });

  it("never gives back a gone DPU's block that holds an address, and gives it back once that goes", async () => {
    connected.add('d0');
    const n = await node('n1', { cluster: '10.98.0.0/24', blockSize: 28, graceMs: 100 }, ['d0']);
    await waitUntil(async () => n.pools('d0').length === 1, 'd0 has a block', 30_000, { intervalMs: 50 });
    const held: Array<{ key: string; address: string }> = [];
    for (let i = 0; i < 14; i++) held.push(await n.attach('d0'));
    await waitUntil(async () => n.pools('d0').length === 2, 'a second block claimed ahead', 10_000, {
      intervalMs: 50,
    });
    const [first] = n.pools('d0') as [string];
    const live = held.find((h) => inBlock(h.address, first))!;
    for (const h of held) if (h !== live) n.detach(h.key);
    connected.delete('d0');
    await waitUntil(
      async () => JSON.stringify(Object.keys(await suite.values())) === JSON.stringify([first]),
      "d0's empty block given back",
      10_000,
      { intervalMs: 100 },
    );
    // Gone for twice the grace: the block holding the live address stays, in etcd and served.
    await sleep(2 * GONE_MS);
    expect(Object.keys(await suite.values()), 'the block with an address in use').to.deep.equal([first]);
    expect(n.pools('d0')).to.deep.equal([first]);
    expect(n.allocator.poolFor(live.address), 'the live address keeps its pool').to.not.equal(undefined);
    // Its last address goes: a gone DPU keeps no block free.
    n.detach(live.key);
    await waitUntil(
      async () => Object.keys(await suite.values()).length === 0,
      "the gone DPU's last block given back once empty",
      10_000,
      { intervalMs: 100 },
    );
    expect(n.pools('d0')).to.deep.equal([]);
  });

  it('keeps every block while the backend cannot tell which DPUs are connected', async () => {
    let answer: 'none' | 'fail' = 'none';
    connected.add('d0');
    const n = await node('n1', { cluster: '10.98.0.0/24', blockSize: 28, graceMs: 100 }, ['d0']);
    await waitUntil(async () => n.pools('d0').length === 1, 'd0 has a block', 30_000, { intervalMs: 50 });
    const block = n.pools('d0')[0]!;
    await n.stop();
    suite.nodes.splice(suite.nodes.indexOf(n), 1);
    // Restarted with a backend that cannot answer (none listed, or failing), and d0 no longer listed.
    const again = new DpuPoolNode('n1', suite.dir('unknown'), suite.etcd, {
      cluster: '10.98.0.0/24',
      blockSize: 28,
      graceMs: 100,
      source: {
        goneGraceMs: GONE_MS,
        connectedDpus: () =>
          answer === 'fail' ? Promise.reject(new Error('backend down')) : Promise.resolve(undefined),
      },
    });
    suite.nodes.push(again);
    await again.start([]);
    await waitUntil(async () => again.pools('d0').length === 1, 'd0 block adopted from etcd', 10_000, {
      intervalMs: 50,
    });
    await sleep(2 * GONE_MS);
    answer = 'fail';
    await sleep(2 * GONE_MS);
    expect(Object.keys(await suite.values()), "d0's block, never aged").to.deep.equal([block]);
  });

  it('refuses blocks to a 17th DPU identity of a node, in words, until one of the 16 is gone', async () => {
    const ids = Array.from({ length: 16 }, (_, i) => `dpu-${i}`);
    for (const id of ids) connected.add(id);
    const n = await node('n1', { cluster: '10.80.0.0/20', blockSize: 28, graceMs: 100 }, ids);
    await waitUntil(async () => ids.every((id) => n.pools(id).length === 1), 'a block per DPU', 30_000, {
      intervalMs: 50,
    });
    connected.add('late');
    await n.book.setPresent([...ids, 'late']);
    const attached = await n.attach('late');
    const words =
      'DPU late of node n1 is refused address blocks of its own: 16 DPUs of the node hold blocks already';
    expect(n.book.borrowed, "late's port borrowed an address").to.equal(1);
    expect(ids.some((id) => inBlock(attached.address, n.pools(id)[0]!))).to.equal(true);
    await sleep(1000);
    expect(n.pools('late'), 'no block for the 17th').to.deep.equal([]);
    expect(n.source.status().reasons.join('\n')).to.include(words);
    expect(Object.keys(await suite.values())).to.have.length(16);
    // One of the incumbents goes for good: its empty block goes back, and the newcomer gets one.
    const goner = ids.find((id) => !inBlock(attached.address, n.pools(id)[0]!))!;
    connected.delete(goner);
    await waitUntil(async () => n.pools('late').length === 1, 'late claimed a block', 10_000, {
      intervalMs: 50,
    });
    expect(n.pools(goner)).to.deep.equal([]);
    expect(n.source.status().reasons.join('\n')).to.not.include('is refused address blocks');
  });

  it("release-node --dpu gives back one DPU's blocks only, and refuses while the node is alive", async () => {
    await suite.registry.create('10.99.0.0/26', 'gone');
    await suite.registry.create('10.99.0.64/26', { node: 'gone', endpoint: 'g-d0' });
    await suite.registry.create('10.99.0.128/26', { node: 'gone', endpoint: 'g-d1' });
    await suite.registry.create('10.99.0.192/26', { node: 'other', endpoint: 'g-d0' });
    const r = suite.cli('release-node', 'gone', '--dpu', 'g-d0', '--json');
    expect(r.code, r.stderr).to.equal(0);
    expect(JSON.parse(r.stdout)).to.deep.equal({ node: 'gone', dpu: 'g-d0', released: ['10.99.0.64/26'] });
    expect(await suite.values()).to.deep.equal({
      '10.99.0.0/26': 'gone',
      '10.99.0.128/26': '{"node":"gone","endpoint":"g-d1"}',
      '10.99.0.192/26': '{"node":"other","endpoint":"g-d0"}',
    });
    const text = suite.cli('release-node', 'gone', '--dpu', 'g-d1');
    expect(text.code, text.stderr).to.equal(0);
    expect(text.stdout).to.equal('released 1 block of DPU g-d1 of node gone: 10.99.0.128/26\n');

    connected.add('d0');
    const n = await node('live', { cluster: '10.98.0.0/24', blockSize: 28 }, ['d0']);
    await waitUntil(async () => n.pools('d0').length === 1, 'd0 has a block', 30_000, { intervalMs: 50 });
    const refused = suite.cli('release-node', 'live', '--dpu', 'd0');
    expect(refused.code).to.equal(1);
    expect(refused.stderr).to.include('node live is alive');
    expect(refused.stderr).to.include('the blocks of DPU d0 of node live');
    expect(Object.values(await suite.values())).to.include('{"node":"live","endpoint":"d0"}');
  });
});

import { expect } from 'chai';
import { blockLayout } from '../../../sources/etcd/block-layout';
import { PeerTable } from '../../../sources/etcd/peer-table';
import { tunnelEndpoint } from '../support/node-records';

// A node's DPUs own blocks in etcd (the block key names node and DPU): every other node routes each
// block to the DPU its key names, whatever the node's record says, and refuses a record that gives
// one DPU's block to another.

const layouts = [blockLayout('10.96.0.0/24', 26)];

const endpoint = tunnelEndpoint;

const record = (node: string, endpoints: readonly unknown[]): string =>
  JSON.stringify({ node, underlay: ['192.0.2.1'], mtu: 1500, bootId: 'x', endpoints });

const dpuBlock = (node: string, dpu: string): string => JSON.stringify({ node, endpoint: dpu });

function table(keys: Record<string, string>): PeerTable {
  const t = new PeerTable('self', layouts);
  for (const [k, v] of Object.entries(keys)) t.put(k, v, '7587');
  t.recompute();
  return t;
}

const prefixesOf = (t: PeerTable, node: string): Record<string, string[]> =>
  Object.fromEntries((t.peers().get(node)?.endpoints ?? []).map((e) => [e.id, e.prefixes]));

describe('etcd peer table: blocks of DPUs', () => {
  it("gives each DPU the blocks whose key names it, even those its node's record does not list yet", () => {
    const t = table({
      'blocks/10.96.0.0-26': dpuBlock('b', 'b-d0'),
      'blocks/10.96.0.64-26': dpuBlock('b', 'b-d1'),
      'blocks/10.96.0.128-26': dpuBlock('b', 'b-d0'),
      // The record lists b-d0's first block only, and a borrowed address inside b-d1's block.
      'nodes/b': record('b', [
        endpoint('b-d0', 21, ['10.96.0.0/26', '10.96.0.70/32']),
        endpoint('b-d1', 22, []),
      ]),
    });
    expect(prefixesOf(t, 'b')).to.deep.equal({
      'b-d0': ['10.96.0.0/26', '10.96.0.128/26', '10.96.0.70/32'],
      'b-d1': ['10.96.0.64/26'],
    });
    expect(t.peers().get('b')?.prefixes).to.deep.equal(['10.96.0.0/26', '10.96.0.64/26', '10.96.0.128/26']);
    expect(t.rejected()).to.deep.equal([]);
  });

  it("ignores and reports a record giving one DPU's block, or part of it, to another, and keeps the rest", () => {
    const t = table({
      'blocks/10.96.0.0-26': dpuBlock('b', 'b-d0'),
      'blocks/10.96.0.64-26': dpuBlock('b', 'b-d1'),
      'blocks/10.96.0.128-26': 'b',
      'nodes/b': record('b', [
        endpoint('b-d0', 21, ['10.96.0.64/26', '10.96.0.128/27']),
        endpoint('b-d1', 22, ['10.96.0.0/28', '10.96.0.160/27']),
      ]),
    });
    // Slices of b's own (node) block stay with whom the record gives them; b-d1's block is b-d1's.
    expect(prefixesOf(t, 'b')).to.deep.equal({
      'b-d0': ['10.96.0.0/26', '10.96.0.128/27'],
      'b-d1': ['10.96.0.64/26', '10.96.0.160/27'],
    });
    expect(t.rejected()).to.have.members([
      "node b: endpoint b-d0 claims 10.96.0.64/26, but block 10.96.0.64/26 is DPU b-d1's in etcd; prefix ignored",
      "node b: endpoint b-d1 claims 10.96.0.0/28, but block 10.96.0.0/26 is DPU b-d0's in etcd; prefix ignored",
    ]);
  });

  it("ignores and reports a DPU claiming another node's DPU block, and a block value naming nobody", () => {
    const t = table({
      'blocks/10.96.0.0-26': dpuBlock('a', 'a-d0'),
      'blocks/10.96.0.64-26': dpuBlock('b', 'b-d0'),
      'blocks/10.96.0.128-26': '{"node":"b"',
      'nodes/a': record('a', [endpoint('a-d0', 11, [])]),
      'nodes/b': record('b', [endpoint('b-d0', 21, ['10.96.0.0/26', '10.96.0.64/26'])]),
    });
    expect(prefixesOf(t, 'a')).to.deep.equal({ 'a-d0': ['10.96.0.0/26'] });
    expect(prefixesOf(t, 'b')).to.deep.equal({ 'b-d0': ['10.96.0.64/26'] });
    const rejected = t.rejected();
    expect(
      rejected.some((r) => r.startsWith('node b: endpoint b-d0 claims 10.96.0.0/26, which is not inside')),
    ).to.equal(true);
    expect(rejected.some((r) => r.includes('blocks/10.96.0.128-26') && r.includes('names no node'))).to.equal(
      true,
    );
    expect(t.peers().get('b')?.prefixes).to.deep.equal(['10.96.0.64/26']);
  });

  it('moves a block to its new DPU when its key changes, and drops it when the key goes', () => {
    const t = table({
      'blocks/10.96.0.0-26': dpuBlock('b', 'b-d0'),
      'nodes/b': record('b', [endpoint('b-d0', 21, []), endpoint('b-d1', 22, [])]),
    });
    // An endpoint holding nothing is no part of the peer: nothing to route to it, nothing to admit.
    expect(prefixesOf(t, 'b')).to.deep.equal({ 'b-d0': ['10.96.0.0/26'] });
    t.delete('blocks/10.96.0.0-26');
    t.put('blocks/10.96.0.0-26', dpuBlock('b', 'b-d1'), '7587');
    expect(t.recompute()).to.equal(true);
    expect(prefixesOf(t, 'b')).to.deep.equal({ 'b-d1': ['10.96.0.0/26'] });
    t.delete('blocks/10.96.0.0-26');
    expect(t.recompute()).to.equal(true);
    expect(t.peers().get('b')?.endpoints).to.equal(undefined);
  });
});

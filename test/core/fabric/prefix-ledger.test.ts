import { expect } from 'chai';
import { PrefixLedger } from '../../../core/fabric/prefix-ledger';

// The ledger of which node holds which remote prefix: the rules every source that is handed prefixes
// on someone's word shares, and what it settles again when something is released.

const claim = (node: string, prefixes: string[], underlay = [`192.0.2.${node.slice(1)}`]) => ({
  node,
  prefixes,
  underlay,
});

describe('prefix ledger', () => {
  it('routes a refused prefix once the underlay address it covered moves away', () => {
    const l = new PrefixLedger({ cluster: [], setting: 'fabric.clusterCidrs' });
    l.put([claim('n2', ['10.1.0.0/24']), claim('n3', ['198.51.100.0/24'], ['198.51.100.3'])]);
    l.put([claim('n2', ['10.1.0.0/24', '198.51.100.0/28'])]);
    expect(l.outcome('n2')).to.deep.equal({
      accepted: ['10.1.0.0/24'],
      refused: ['198.51.100.0/28 covers the underlay address 198.51.100.3 of node n3'],
    });
    const changed = l.put([claim('n3', ['198.51.100.0/24'], ['203.0.113.3'])]);
    expect([...changed].sort()).to.deep.equal(['n2', 'n3']);
    // n3's /24 covered its own address and was refused; with the address gone it holds the /24,
    // and n2's /28 inside it is refused for that instead.
    expect(l.outcome('n2')?.refused).to.deep.equal([
      '198.51.100.0/28 overlaps 198.51.100.0/24, which node n3 holds',
    ]);
    l.remove('n3');
    expect(l.outcome('n2')).to.deep.equal({ accepted: ['10.1.0.0/24', '198.51.100.0/28'], refused: [] });
  });

  it('refuses a held prefix once this node states it as its own range, and routes it again when it no longer does', () => {
    const l = new PrefixLedger({ cluster: [], setting: 'fabric.clusterCidrs' });
    l.put([claim('n2', ['10.1.2.0/24'])]);
    expect([...l.setSelf(['10.1.0.0/16'], ['192.0.2.1'])]).to.deep.equal(['n2']);
    expect(l.outcome('n2')?.refused).to.deep.equal([
      "10.1.2.0/24 overlaps this node's own range 10.1.0.0/16",
    ]);
    l.setSelf(['10.1.1.0/24'], ['192.0.2.1']);
    expect(l.outcome('n2')).to.deep.equal({ accepted: ['10.1.2.0/24'], refused: [] });
  });

  it('refuses a prefix repeated or nested within one node, and keeps the first', () => {
    const l = new PrefixLedger({ cluster: ['10.0.0.0/8'], setting: 'fabric.clusterCidrs' });
    l.put([claim('n2', ['10.1.0.0/16', '10.1.0.0/16', '10.1.2.0/24', '10.2.0.0/16'])]);
    expect(l.outcome('n2')).to.deep.equal({
      accepted: ['10.1.0.0/16', '10.2.0.0/16'],
      refused: ['10.1.0.0/16 is listed twice', '10.1.2.0/24 overlaps 10.1.0.0/16, also listed for this node'],
    });
  });

  it('holds IPv6 prefixes to the IPv6 ranges only: a family without a cluster range has none', () => {
    const l = new PrefixLedger({ cluster: ['10.0.0.0/8'], setting: 'fabric.clusterCidrs' });
    l.put([claim('n2', ['10.1.0.0/24', 'fd00:1::/64'])]);
    expect(l.outcome('n2')?.refused).to.deep.equal([
      'fd00:1::/64 is outside the cluster ranges (fabric.clusterCidrs: 10.0.0.0/8)',
    ]);
  });

  it("keeps a node's held prefix when it changes its other prefixes, and a newcomer listed before it does not take it", () => {
    const l = new PrefixLedger({ cluster: [], setting: 'fabric.clusterCidrs' });
    l.put([claim('n2', ['10.1.2.0/24'])]);
    l.put([claim('n4', ['10.1.2.0/25']), claim('n2', ['10.1.3.0/24', '10.1.2.0/24'])]);
    expect(l.outcome('n2')).to.deep.equal({ accepted: ['10.1.3.0/24', '10.1.2.0/24'], refused: [] });
    expect(l.outcome('n4')?.refused).to.deep.equal(['10.1.2.0/25 overlaps 10.1.2.0/24, which node n2 holds']);
  });
});

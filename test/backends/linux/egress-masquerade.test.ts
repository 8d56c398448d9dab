import { expect } from 'chai';
import {
  EGRESS_TABLE,
  EgressMasquerade,
  ForeignEgressTableError,
  egressScript,
} from '../../../backends/linux/egress-masquerade';
import { nftRunner } from '../../../backends/linux/fabric/nft-runner';
import { NetnsSet } from '../../support/netns';
import { egressNode, type EgressNode } from './egress-node';
import { countSources, nftIn } from '../../support/netns-nft';
import { describeRoot } from '../../support/describe-root';
import { pings } from '../../support/ping';
import { requireProgram } from '../../support/system-program';

// The egress node (egress-node.ts): two pods, a forwarding node and an outside that knows no pod range.
// Counting rules in the receiving namespaces say which source address arrived.

describeRoot('Linux backend: egress masquerade (root, test-owned namespaces)', function () {
  this.timeout(60_000);
  const nss = new NetnsSet('wneg-');
  let net: EgressNode;
  let egress: EgressMasquerade;
  const ranges = { pod: ['10.244.1.0/24', '10.244.2.0/24'], cluster: ['10.244.0.0/16'] };

  before(function () {
    requireProgram('nft');
    net = egressNode(nss);
    egress = new EgressMasquerade(nftRunner({ netnsPath: net.node.path }));
  });

  after(() => nss.cleanup());

  it('does not let a pod reach outside without it (the outside knows no pod range)', async () => {
    expect(await pings(net.pod1.name, '198.51.100.2')).to.equal(false);
  });

  it('masquerades a pod leaving the cluster ranges to the node, and keeps pod to pod as it is', async () => {
    const seenOutside = countSources(net.outside.name, ['198.51.100.1', '10.244.1.5']);
    const seenByPod2 = countSources(net.pod2.name, ['10.244.1.5', '10.244.2.1']);
    await egress.apply(ranges);
    expect(await pings(net.pod1.name, '198.51.100.2')).to.equal(true);
    expect(await pings(net.pod1.name, '10.244.2.5')).to.equal(true);
    const outsideCounts = seenOutside();
    expect(outsideCounts['198.51.100.1'], 'echo from the node address').to.be.greaterThan(0);
    expect(outsideCounts['10.244.1.5'], 'echo from the pod address').to.equal(0);
    const pod2Counts = seenByPod2();
    expect(pod2Counts['10.244.1.5'], 'echo from the other pod, unchanged').to.be.greaterThan(0);
    expect(pod2Counts['10.244.2.1'], 'echo rewritten to the node').to.equal(0);
    expect(await egress.readCounter(), 'connections masqueraded').to.be.greaterThan(0);
    expect(egress.describe().egress).to.equal(`masqueraded (table inet ${EGRESS_TABLE})`);
  });

  it('adopts its table across a restart in one transaction, and follows changed ranges', async () => {
    const restarted = new EgressMasquerade(nftRunner({ netnsPath: net.node.path }));
    // Pod 1's range is no longer masqueraded: its traffic leaves as it is, and gets no answer.
    await restarted.apply({ pod: ['10.244.2.0/24'], cluster: ranges.cluster });
    expect(await pings(net.pod1.name, '198.51.100.2')).to.equal(false);
    expect(await pings(net.pod2.name, '198.51.100.2')).to.equal(true);
    await restarted.apply(ranges);
    expect(await pings(net.pod1.name, '198.51.100.2')).to.equal(true);
    // One table, never a second one beside the first.
    const tables = nftIn(net.node.name, 'list tables\n').trim().split('\n');
    expect(tables.filter((t) => t.includes(EGRESS_TABLE))).to.have.length(1);
  });

  it('checks its table on a refresh with one listing, and writes it again only when it was changed by hand', async () => {
    const scripts: string[] = [];
    const run = nftRunner({ netnsPath: net.node.path });
    const counted = new EgressMasquerade((script, flags) => (scripts.push(script), run(script, flags)));
    await counted.apply(ranges);
    scripts.length = 0;
    counted.invalidate();
    await counted.apply(ranges);
    expect(scripts, 'nothing changed: one listing').to.deep.equal([`list table inet ${EGRESS_TABLE}\n`]);
    // Someone deletes our rules: the next refresh finds the table changed and puts them back.
    nftIn(net.node.name, `flush chain inet ${EGRESS_TABLE} postrouting\n`);
    expect(await pings(net.pod1.name, '198.51.100.2')).to.equal(false);
    scripts.length = 0;
    counted.invalidate();
    await counted.apply(ranges);
    expect(scripts.filter((s) => s.includes('masquerade\n'))).to.have.length(1);
    expect(await pings(net.pod1.name, '198.51.100.2')).to.equal(true);
  });

  it('removes only its own table', async () => {
    await egress.remove();
    expect(nftIn(net.node.name, 'list tables\n')).not.to.include(EGRESS_TABLE);
    expect(await pings(net.pod1.name, '198.51.100.2')).to.equal(false);
  });

  it('refuses a foreign table of its name in words, and neither changes nor deletes it', async () => {
    nftIn(
      net.node.name,
      `table inet ${EGRESS_TABLE} {\n  chain operator { type filter hook output priority 0; }\n}\n`,
    );
    const fresh = new EgressMasquerade(nftRunner({ netnsPath: net.node.path }));
    let err: unknown;
    await fresh.apply(ranges).catch((e: unknown) => (err = e));
    expect(err).to.be.instanceOf(ForeignEgressTableError);
    expect((err as Error).message).to.match(/not workloadnet's.*nft delete table/);
    expect(fresh.describe().egress, 'what Status shows').to.match(/^not masqueraded: .*not workloadnet's/);
    await fresh.remove();
    const listing = nftIn(net.node.name, `list table inet ${EGRESS_TABLE}\n`);
    expect(listing).to.include('chain operator');
    expect(listing).not.to.include('masquerade');
  });
});

describe('Linux backend: egress masquerade script', () => {
  it('counts every pod range as a cluster range, per family, canonical and without repeats', () => {
    const s = egressScript({
      pod: ['10.244.1.0/24', 'fd00:0:0:1::/64'],
      cluster: ['10.244.0.0/16', '10.244.0.0/16'],
    });
    expect(s).to.include('add element inet workloadnet_egress pod4 { 10.244.1.0/24 }');
    expect(s).to.include('add element inet workloadnet_egress pod6 { fd00:0:0:1::/64 }');
    expect(s).to.include('add element inet workloadnet_egress cluster4 { 10.244.0.0/16, 10.244.1.0/24 }');
    expect(s).to.include('add element inet workloadnet_egress cluster6 { fd00:0:0:1::/64 }');
  });

  it('refuses a malformed range before anything is programmed', () => {
    expect(() => egressScript({ pod: ['10.244.1.0/33'], cluster: [] })).to.throw(/33|prefix/);
  });
});

import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import {
  EGRESS_TABLE,
  EgressMasquerade,
  ForeignEgressTableError,
  egressScript,
} from '../../../backends/linux/egress-masquerade';
import { nftRunner } from '../../../backends/linux/fabric/nft-runner';
import { NetnsSet, type TestNamespace } from '../../support/netns';
import { egressNode } from './egress-node';
import { describeRoot } from '../../support/describe-root';
import { pings } from '../../support/ping';
import { requireProgram } from '../../support/system-program';

// The egress node (egress-node.ts): two pods, a forwarding node and an outside that knows no pod range.
// Counting rules in the receiving namespaces say which source address arrived.

const nft = (ns: string, script: string): string =>
  execFileSync('ip', ['netns', 'exec', ns, 'nft', '-f', '-'], { input: script, encoding: 'utf8' });

/** A counting rule per source address in `ns`'s input hook; returns a reader of the counts. */
function countSources(ns: string, sources: string[]): () => Record<string, number> {
  nft(
    ns,
    'table ip seen {\n  chain input { type filter hook input priority 0; policy accept; }\n}\n' +
      sources.map((s) => `add rule ip seen input ip saddr ${s} icmp type echo-request counter\n`).join(''),
  );
  return () => {
    const out = nft(ns, 'list chain ip seen input\n');
    const counts: Record<string, number> = {};
    for (const s of sources)
      counts[s] = Number(new RegExp(`saddr ${s.replace(/\./g, '\\.')} .*packets (\\d+)`).exec(out)?.[1]);
    return counts;
  };
}

describeRoot('Linux backend: egress masquerade (root, test-owned namespaces)', function () {
  this.timeout(60_000);
  const nss = new NetnsSet('wneg-');
  let node: TestNamespace;
  let pod1: TestNamespace;
  let pod2: TestNamespace;
  let outside: TestNamespace;
  let egress: EgressMasquerade;
  const ranges = { pod: ['10.244.1.0/24', '10.244.2.0/24'], cluster: ['10.244.0.0/16'] };

  before(function () {
    requireProgram('nft');
    ({ node, pod1, pod2, outside } = egressNode(nss));
    egress = new EgressMasquerade(nftRunner({ netnsPath: node.path }));
  });

  after(() => nss.cleanup());

  it('does not let a pod reach outside without it (the outside knows no pod range)', async () => {
    expect(await pings(pod1.name, '198.51.100.2')).to.equal(false);
  });

  it('masquerades a pod leaving the cluster ranges to the node, and keeps pod to pod as it is', async () => {
    const seenOutside = countSources(outside.name, ['198.51.100.1', '10.244.1.5']);
    const seenByPod2 = countSources(pod2.name, ['10.244.1.5', '10.244.2.1']);
    await egress.apply(ranges);
    expect(await pings(pod1.name, '198.51.100.2')).to.equal(true);
    expect(await pings(pod1.name, '10.244.2.5')).to.equal(true);
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
    const restarted = new EgressMasquerade(nftRunner({ netnsPath: node.path }));
    // Pod 1's range is no longer masqueraded: its traffic leaves as it is, and gets no answer.
    await restarted.apply({ pod: ['10.244.2.0/24'], cluster: ranges.cluster });
    expect(await pings(pod1.name, '198.51.100.2')).to.equal(false);
    expect(await pings(pod2.name, '198.51.100.2')).to.equal(true);
    await restarted.apply(ranges);
    expect(await pings(pod1.name, '198.51.100.2')).to.equal(true);
    // One table, never a second one beside the first.
    const tables = nft(node.name, 'list tables\n').trim().split('\n');
    expect(tables.filter((t) => t.includes(EGRESS_TABLE))).to.have.length(1);
  });

  it('checks its table on a refresh with one listing, and writes it again only when it was changed by hand', async () => {
    const scripts: string[] = [];
    const run = nftRunner({ netnsPath: node.path });
    const counted = new EgressMasquerade((script, flags) => (scripts.push(script), run(script, flags)));
    await counted.apply(ranges);
    scripts.length = 0;
    counted.invalidate();
    await counted.apply(ranges);
    expect(scripts, 'nothing changed: one listing').to.deep.equal([`list table inet ${EGRESS_TABLE}\n`]);
    // Someone deletes our rules: the next refresh finds the table changed and puts them back.
    nft(node.name, `flush chain inet ${EGRESS_TABLE} postrouting\n`);
    expect(await pings(pod1.name, '198.51.100.2')).to.equal(false);
    scripts.length = 0;
    counted.invalidate();
    await counted.apply(ranges);
    expect(scripts.filter((s) => s.includes('masquerade\n'))).to.have.length(1);
    expect(await pings(pod1.name, '198.51.100.2')).to.equal(true);
  });

  it('removes only its own table', async () => {
    await egress.remove();
    expect(nft(node.name, 'list tables\n')).not.to.include(EGRESS_TABLE);
    expect(await pings(pod1.name, '198.51.100.2')).to.equal(false);
  });

  it('refuses a foreign table of its name in words, and neither changes nor deletes it', async () => {
    nft(
      node.name,
      `table inet ${EGRESS_TABLE} {\n  chain operator { type filter hook output priority 0; }\n}\n`,
    );
    const fresh = new EgressMasquerade(nftRunner({ netnsPath: node.path }));
    let err: unknown;
    await fresh.apply(ranges).catch((e: unknown) => (err = e));
    expect(err).to.be.instanceOf(ForeignEgressTableError);
    expect((err as Error).message).to.match(/not workloadnet's.*nft delete table/);
    expect(fresh.describe().egress, 'what Status shows').to.match(/^not masqueraded: .*not workloadnet's/);
    await fresh.remove();
    const listing = nft(node.name, `list table inet ${EGRESS_TABLE}\n`);
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

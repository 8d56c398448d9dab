import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { NodeRecord } from '../../../core/peer-source';
import { silentLogger } from '../../../core/logger';
import { KubernetesPeerSource } from '../../../sources/kubernetes/kubernetes-peer-source';
import { waitUntil } from '../../support/wait-until';
import { StandInKubeApiServer } from '../../support/standin-kube-apiserver';

// The Kubernetes peer source routes a Node's podCIDR only inside fabric.clusterCidrs, over no
// InternalIP, no range of this node and no podCIDR another Node holds: the incumbent keeps it, the
// newcomer's is refused and named in `rejected`. Anyone who may write Nodes can write a podCIDR; the
// test plays that writer against the stand-in API server.

const record = (node: string, ip: string): NodeRecord => ({ node, underlay: [ip], mtu: 1500, bootId: '' });

describe('kubernetes peer source: which podCIDRs it routes (stand-in API server)', function () {
  this.timeout(60_000);
  let root: string;
  let api: StandInKubeApiServer;
  /** n1, told no cluster ranges. */
  let s1: KubernetesPeerSource;
  /** n3, told the cluster ranges. */
  let s3: KubernetesPeerSource;

  function addNode(name: string, ip: string, podCIDRs: string[]): void {
    api.setNode(name, podCIDRs);
    api.setAddresses(name, [{ type: 'InternalIP', address: ip }]);
  }

  const prefixes = (s: KubernetesPeerSource, node: string): string[] | undefined =>
    s.peers().get(node)?.prefixes;

  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-kube-prefixes-'));
    api = await StandInKubeApiServer.start(path.join(root, 'api'));
    addNode('n1', '192.0.2.1', ['10.50.1.0/24']);
    addNode('n2', '192.0.2.2', ['10.50.2.0/24']);
    addNode('n3', '192.0.2.3', ['10.50.3.0/24']);
    const opts = {
      kubeconfig: api.kubeconfig(),
      logger: silentLogger(),
      backoffMs: { initial: 50, max: 500 },
    };
    s1 = new KubernetesPeerSource({ ...opts, nodeName: 'n1' });
    s3 = new KubernetesPeerSource({ ...opts, nodeName: 'n3', clusterCidrs: ['10.50.0.0/16'] });
    await s1.start(record('n1', '192.0.2.1'));
    await s3.start(record('n3', '192.0.2.3'));
    await waitUntil(() => s1.peers().has('n2') && s3.peers().has('n2'), 'both sources listing n2');
  });
  after(async () => {
    await s1?.stop();
    await s3?.stop();
    await api?.stop();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  it("refuses a podCIDR covering the underlay's /16 and keeps the Node's other podCIDR", async () => {
    addNode('n4', '192.0.2.4', ['10.50.4.0/24', '192.0.0.0/16']);
    await waitUntil(() => s1.peers().has('n4'), 'n4 seen');
    expect(prefixes(s1, 'n4')).to.deep.equal(['10.50.4.0/24']);
    expect(s1.status().rejected).to.deep.equal([
      'Node n4: spec.podCIDRs: 192.0.0.0/16 covers the underlay address 192.0.2.1 of this node; ' +
        "not routed, the Node's other podCIDRs are",
    ]);
    api.deleteNode('n4');
    await waitUntil(() => !s1.peers().has('n4') && s1.status().rejected.length === 0, 'n4 gone');
  });

  it("keeps the incumbent's /24 when a new Node lists a /31 inside it, and routes the /31 once the /24 goes", async () => {
    addNode('n5', '192.0.2.5', ['10.50.5.0/24', '10.50.2.0/31']);
    await waitUntil(() => s1.peers().has('n5') && s3.peers().has('n5'), 'n5 seen');
    for (const s of [s1, s3]) {
      expect(prefixes(s, 'n2'), 'the incumbent keeps its pods').to.deep.equal(['10.50.2.0/24']);
      expect(prefixes(s, 'n5')).to.deep.equal(['10.50.5.0/24']);
      expect(s.status().rejected).to.deep.equal([
        'Node n5: spec.podCIDRs: 10.50.2.0/31 overlaps 10.50.2.0/24, which node n2 holds; ' +
          "not routed, the Node's other podCIDRs are",
      ]);
    }
    api.deleteNode('n2');
    await waitUntil(() => prefixes(s1, 'n5')?.length === 2, "the /31 routed once n2's /24 is gone");
    expect(prefixes(s1, 'n5')).to.deep.equal(['10.50.2.0/31', '10.50.5.0/24']);
    expect(s1.status().rejected).to.deep.equal([]);
    api.deleteNode('n5');
    addNode('n2', '192.0.2.2', ['10.50.2.0/24']);
    await waitUntil(() => prefixes(s1, 'n2') !== undefined && !s1.peers().has('n5'), 'n2 back, n5 gone');
  });

  it('refuses a podCIDR outside the cluster ranges', async () => {
    addNode('n6', '192.0.2.6', ['10.50.6.0/24', '10.99.0.0/24']);
    await waitUntil(() => s3.peers().has('n6'), 'n6 seen');
    expect(prefixes(s3, 'n6')).to.deep.equal(['10.50.6.0/24']);
    expect(s3.status().rejected).to.deep.equal([
      'Node n6: spec.podCIDRs: 10.99.0.0/24 is outside the cluster ranges (fabric.clusterCidrs: ' +
        "10.50.0.0/16); not routed, the Node's other podCIDRs are",
    ]);
    // n1 was told no cluster ranges: it routes both.
    await waitUntil(() => s1.peers().has('n6'), 'n6 seen by n1');
    expect(prefixes(s1, 'n6')).to.deep.equal(['10.50.6.0/24', '10.99.0.0/24']);
    api.deleteNode('n6');
    await waitUntil(() => !s3.peers().has('n6') && !s1.peers().has('n6'), 'n6 gone');
  });

  it("refuses a podCIDR over this node's own range: a Node left with none is not a peer", async () => {
    addNode('n7', '192.0.2.7', ['10.50.1.128/25']);
    addNode('n8', '192.0.2.8', ['10.50.8.0/24']);
    await waitUntil(() => s1.peers().has('n8') && s1.status().rejected.length > 0, 'n7 refused');
    expect(s1.peers().has('n7')).to.equal(false);
    expect(s1.status().rejected).to.deep.equal([
      "Node n7: spec.podCIDRs: 10.50.1.128/25 overlaps this node's own range 10.50.1.0/24; not routed, nor the Node",
    ]);
    // To n3 the range is n1's, which n1 held first.
    await waitUntil(() => s3.status().rejected.length > 0, 'n7 refused by n3');
    expect(s3.status().rejected).to.deep.equal([
      'Node n7: spec.podCIDRs: 10.50.1.128/25 overlaps 10.50.1.0/24, which node n1 holds; not routed, nor the Node',
    ]);
    api.deleteNode('n7');
    api.deleteNode('n8');
    await waitUntil(() => !s1.peers().has('n8') && s1.status().rejected.length === 0, 'n7, n8 gone');
  });

  it("refuses a new Node whose InternalIP lies inside the incumbent's podCIDR, not the incumbent's podCIDR", async () => {
    addNode('n9', '10.50.2.9', ['10.50.9.0/24']);
    await waitUntil(() => s1.status().rejected.length > 0, 'n9 refused');
    expect(s1.peers().has('n9')).to.equal(false);
    expect(prefixes(s1, 'n2')).to.deep.equal(['10.50.2.0/24']);
    expect(s1.status().rejected).to.deep.equal([
      'Node n9: not routed: its underlay address 10.50.2.9 lies inside 10.50.2.0/24, which node n2 holds',
    ]);
    api.deleteNode('n9');
    await waitUntil(() => s1.status().rejected.length === 0, 'n9 gone');
  });
});

import { expect } from 'chai';
import { nodeRecord, tunnelEndpoint } from '../support/node-records';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DEFAULT_CONFIG } from '../../../core/config';
import { mergeConfig } from '../../../core/daemon/config-check';
import { PEER_SOURCE, type NodeRecord, type Peer, type PeerSource } from '../../../core/peer-source';
import { silentLogger } from '../../../core/logger';
import { FABRIC_ANNOTATION, encodeAnnotation } from '../../../sources/kubernetes/fabric-annotation';
import { KubernetesPeerSource } from '../../../sources/kubernetes/kubernetes-peer-source';
import { kubernetesPoolSourceModule } from '../../../sources/kubernetes/module';
import { waitUntil } from '../../support/wait-until';
import { StandInKubeApiServer } from '../../support/standin-kube-apiserver';
import { loadedOverBindings } from '../support/module-container';

// The Kubernetes peer source with the real @kubernetes/client-node against the stand-in API server
// (real HTTPS, a list of all Nodes, a watch from its resourceVersion, 410 on expired versions, merge
// patches of annotations). Sources in this process act as nodes; the test plays kube-controller-manager
// (podCIDRs), the kubelets (addresses) and an operator (hand edits of annotations).

const KEY = FABRIC_ANNOTATION;

const record = (node: string, ip: string): NodeRecord => nodeRecord(node, ip);

const peerOf = (node: string, ip: string, prefixes: string[]): Peer => ({ ...record(node, ip), prefixes });

describe('kubernetes peer source (real client library, stand-in API server)', function () {
  this.timeout(60_000);
  let root: string;
  let api: StandInKubeApiServer;
  let s1: KubernetesPeerSource;
  let s2: KubernetesPeerSource;
  let changes1 = 0;
  const running: KubernetesPeerSource[] = [];

  function source(node: string): KubernetesPeerSource {
    const s = new KubernetesPeerSource({
      nodeName: node,
      kubeconfig: api.kubeconfig(),
      logger: silentLogger(),
      backoffMs: { initial: 50, max: 500 },
    });
    running.push(s);
    return s;
  }

  /** A Node as kube-controller-manager and its kubelet leave it: a range and an InternalIP. */
  function addNode(name: string, ip: string, podCIDRs: string[]): void {
    api.setNode(name, podCIDRs);
    api.setAddresses(name, [
      { type: 'Hostname', address: name },
      { type: 'InternalIP', address: ip },
    ]);
  }

  const peer = (s: PeerSource, node: string): Peer | undefined => s.peers().get(node);

  before(async () => {
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-kube-peers-'));
    api = await StandInKubeApiServer.start(path.join(root, 'api'));
    addNode('n1', '192.0.2.1', ['10.50.1.0/24']);
    addNode('n2', '192.0.2.2', ['10.50.2.0/24']);
  });
  after(async () => {
    for (const s of running) await s.stop();
    await api?.stop();
    if (root) fs.rmSync(root, { recursive: true, force: true });
  });

  it('two nodes publish their annotation and see each other with podCIDRs, InternalIP and VTEP', async () => {
    s1 = source('n1');
    s2 = source('n2');
    s1.onChange(() => changes1++);
    expect(s1.synced).to.equal(false);
    await s1.start(record('n1', '192.0.2.1'));
    await s2.start(record('n2', '192.0.2.2'));
    await waitUntil(
      () => peer(s1, 'n2')?.vtep !== undefined && peer(s2, 'n1')?.vtep !== undefined,
      'each node seeing the other with its VTEP',
    );
    expect(s1.synced).to.equal(true);
    expect(changes1).to.be.greaterThan(0);
    expect([...s1.peers().keys()], 'never itself').to.deep.equal(['n2']);
    expect(peer(s1, 'n2')).to.deep.equal(peerOf('n2', '192.0.2.2', ['10.50.2.0/24']));
    expect(peer(s2, 'n1')).to.deep.equal(peerOf('n1', '192.0.2.1', ['10.50.1.0/24']));
    // What the Node carries: the record less what the Node already says (name, addresses, ranges).
    const annotation = api.node('n1')?.metadata.annotations?.[KEY];
    expect(JSON.parse(annotation ?? '')).to.deep.equal({
      mtu: 1500,
      bootId: 'boot-of-n1',
      vtep: { mac: '0e:77:c0:00:02:01', vni: 30574, port: 4789 },
    });
    // Written through the status subresource (RBAC: nodes/status patch, never the Node's spec).
    const patches = api.requests.filter((r) => r.verb === 'patch');
    expect(patches.map((p) => p.path)).to.include('/api/v1/nodes/n1/status');
    expect(patches.every((p) => p.path?.endsWith('/status'))).to.equal(true);
    const st = s1.status();
    expect(st).to.deep.include({ kind: 'kubernetes', ready: true, connected: true, rejected: [] });
    expect(st.reasons).to.deep.equal([]);
    // Both sources list all Nodes (no field selector) from the watch cache.
    const lists = api.requests.filter((r) => r.verb === 'list');
    expect(lists.every((r) => r.fieldSelector === undefined && r.resourceVersion === '0')).to.equal(true);
  });

  it('writes its annotation again when it is removed or changed on the Node', async () => {
    const want = encodeAnnotation(record('n1', '192.0.2.1'));
    api.setAnnotation('n1', KEY, undefined);
    await waitUntil(
      () => api.node('n1')?.metadata.annotations?.[KEY] === want,
      'the annotation written again',
    );
    api.setAnnotation('n1', KEY, '{"mtu":9000,"bootId":"forged"}');
    await waitUntil(() => api.node('n1')?.metadata.annotations?.[KEY] === want, 'the changed one put back');
    await waitUntil(() => peer(s2, 'n1')?.mtu === 1500, 'n2 seeing the restored record');
    // Other annotations of the Node are left alone.
    api.setAnnotation('n1', 'example.com/other', 'x');
    await waitUntil(() => api.node('n1')?.metadata.annotations?.['example.com/other'] === 'x', 'set');
    expect(api.node('n1')?.metadata.annotations?.[KEY]).to.equal(want);
  });

  it('sees a Node that joins and one that leaves', async () => {
    const before = changes1;
    addNode('n3', '192.0.2.3', ['10.50.3.0/24', 'fd50:3::/64']);
    api.setAnnotation('n3', KEY, encodeAnnotation(record('n3', '192.0.2.3')));
    await waitUntil(() => peer(s1, 'n3')?.vtep !== undefined, 'n3 joining');
    expect(peer(s1, 'n3')).to.deep.equal(peerOf('n3', '192.0.2.3', ['10.50.3.0/24', 'fd50:3::/64']));
    expect(changes1).to.be.greaterThan(before);
    api.deleteNode('n3');
    await waitUntil(() => !s1.peers().has('n3'), 'n3 leaving');
    expect([...s1.peers().keys()]).to.deep.equal(['n2']);
  });

  it('resumes a dropped watch from the last resourceVersion, without a list', async () => {
    const lists = api.count('list');
    const ownLists = s1.listCount;
    const watches = api.count('watch');
    const seen = api.resourceVersion;
    api.dropWatches();
    api.setNode('n2', ['10.50.2.0/24', 'fd50:2::/64']); // while disconnected
    await waitUntil(
      () => peer(s1, 'n2')?.prefixes.includes('fd50:2::/64') === true && peer(s2, 'n1') !== undefined,
      'the change made while disconnected',
    );
    const rewatch = api.requests.filter((r) => r.verb === 'watch').slice(watches);
    expect(rewatch.length).to.be.greaterThan(0);
    expect(rewatch.map((r) => Number(r.resourceVersion))).to.include(seen);
    expect(
      rewatch.every((r) => Number(r.resourceVersion) >= seen),
      'never from before',
    ).to.equal(true);
    expect(api.count('list'), 'no relist').to.equal(lists);
    expect(s1.listCount).to.equal(ownLists);
    await waitUntil(() => s1.status().connected, 'connected again');
  });

  it('lists again after 410 Gone, and the table is what the list says', async () => {
    addNode('n4', '192.0.2.4', ['10.50.4.0/24']);
    await waitUntil(() => s1.peers().has('n4'), 'n4 seen');
    const ownLists = s1.listCount;
    // Changes in the gap whose events are lost to compaction: a Node gone, a Node new, a range changed.
    api.dropWatches();
    api.deleteNode('n4');
    addNode('n5', '192.0.2.5', ['10.50.5.0/24']);
    api.setNode('n2', ['10.50.2.0/24']);
    api.expireHistory();
    await waitUntil(
      () => s1.listCount > ownLists && !s1.peers().has('n4') && s1.peers().has('n5'),
      'relisted',
    );
    expect([...s1.peers().keys()].sort()).to.deep.equal(['n2', 'n5']);
    expect(peer(s1, 'n2')?.prefixes).to.deep.equal(['10.50.2.0/24']);
    // n5 publishes nothing: reached directly only, and said so.
    expect(peer(s1, 'n5')).to.deep.equal({
      node: 'n5',
      underlay: ['192.0.2.5'],
      mtu: 1500,
      bootId: '',
      prefixes: ['10.50.5.0/24'],
    });
    expect(s1.status().reasons.join('\n')).to.match(/without a workloadnet\.io\/fabric annotation .*: n5;/);
    api.deleteNode('n5');
    await waitUntil(() => !s1.peers().has('n5'), 'n5 gone');
  });

  it('reports a Node without podCIDRs or without an InternalIP, and routes neither', async () => {
    api.setNode('n6'); // registered, no range yet
    api.setAddresses('n6', [{ type: 'InternalIP', address: '192.0.2.6' }]);
    api.setNode('n7', ['10.50.7.0/24']); // no addresses reported yet
    await waitUntil(() => s1.status().reasons.length >= 2, 'both reported');
    const reasons = s1.status().reasons.join('\n');
    expect(reasons).to.match(/Nodes without spec\.podCIDRs are not routed to: n6 /);
    expect(reasons).to.match(
      /Nodes without an InternalIP address in status\.addresses are not routed to: n7/,
    );
    expect(s1.peers().has('n6')).to.equal(false);
    expect(s1.peers().has('n7')).to.equal(false);
    expect(s1.status().ready, 'the others are still served').to.equal(true);
    // The range and address arrive: peers, and the reasons go.
    api.setNode('n6', ['10.50.6.0/24']);
    api.setAddresses('n7', [{ type: 'InternalIP', address: '192.0.2.7' }]);
    await waitUntil(() => s1.peers().has('n6') && s1.peers().has('n7'), 'n6 and n7 routed');
    expect(s1.status().reasons.join('\n')).to.not.match(/not routed to/);
    api.deleteNode('n6');
    api.deleteNode('n7');
    await waitUntil(() => !s1.peers().has('n6') && !s1.peers().has('n7'), 'gone');
  });

  it('keeps a Node with a malformed annotation routable directly, without a VTEP, and reports it', async () => {
    addNode('n8', '192.0.2.8', ['10.50.8.0/24']);
    api.setAnnotation('n8', KEY, '{"mtu":"big","vtep":{"mac":"0e:77:c0:00:02:08","vni":30574,"port":4789}}');
    await waitUntil(() => s1.status().rejected.length > 0, 'rejected');
    expect(s1.status().rejected).to.deep.equal([
      'Node n8: its workloadnet.io/fabric annotation has MTU "big", not a number 576-65535; ' +
        'annotation ignored, the node is reached only directly',
    ]);
    // Its range and address are the API server's word, not the annotation's: still a peer, no VTEP.
    expect(peer(s1, 'n8')).to.deep.equal({
      node: 'n8',
      underlay: ['192.0.2.8'],
      mtu: 1500,
      bootId: '',
      prefixes: ['10.50.8.0/24'],
    });
    api.setAnnotation('n8', KEY, encodeAnnotation(record('n8', '192.0.2.8')));
    await waitUntil(() => peer(s1, 'n8')?.vtep !== undefined, 'the fixed annotation used');
    expect(s1.status().rejected).to.deep.equal([]);
    expect(peer(s1, 'n8')).to.deep.equal(peerOf('n8', '192.0.2.8', ['10.50.8.0/24']));
    api.deleteNode('n8');
    await waitUntil(() => !s1.peers().has('n8'), 'n8 gone');
  });

  it('update() patches the annotation again with the DPU endpoints (once, nothing when unchanged); peers get the slices of the podCIDRs only', async () => {
    // A slice and a borrowed /32 of n2's range, and a slice of n1's it has no right to.
    const endpoint = tunnelEndpoint('dpu-0', 20, ['10.50.2.0/26', '10.50.2.200/32', '10.50.1.0/26']);
    const withDpu = { ...record('n2', '192.0.2.2'), endpoints: [endpoint] };
    const patches = api.count('patch');
    await s2.update(withDpu);
    expect(api.count('patch')).to.equal(patches + 1);
    expect(JSON.parse(api.node('n2')?.metadata.annotations?.[KEY] ?? '')).to.deep.equal({
      mtu: 1500,
      bootId: 'boot-of-n2',
      vtep: { mac: '0e:77:c0:00:02:02', vni: 30574, port: 4789 },
      endpoints: [endpoint],
    });
    await waitUntil(() => peer(s1, 'n2')?.endpoints !== undefined, 'n1 seeing the endpoint');
    expect(peer(s1, 'n2')).to.deep.equal({
      ...peerOf('n2', '192.0.2.2', ['10.50.2.0/24']),
      endpoints: [{ ...endpoint, prefixes: ['10.50.2.0/26', '10.50.2.200/32'] }],
    });
    expect(s1.status().rejected).to.deep.equal([
      'Node n2: endpoint dpu-0 claims 10.50.1.0/26, which is not inside its spec.podCIDRs (10.50.2.0/24); prefix ignored',
    ]);
    await s2.update({ ...withDpu, endpoints: [{ ...endpoint }] });
    expect(api.count('patch'), 'unchanged: not written').to.equal(patches + 1);
    expect(s2.status().reasons).to.deep.equal([]);
    // Back to no endpoints: the annotation as a node without DPUs writes it.
    await s2.update(record('n2', '192.0.2.2'));
    expect(api.node('n2')?.metadata.annotations?.[KEY]).to.equal(encodeAnnotation(record('n2', '192.0.2.2')));
    await waitUntil(() => peer(s1, 'n2')?.endpoints === undefined, 'n1 seeing it gone');
    expect(s1.status().rejected).to.deep.equal([]);
  });

  it('refuses a malformed endpoint list in an annotation whole: the node is reached only directly', async () => {
    addNode('n7', '192.0.2.7', ['10.50.7.0/24']);
    api.setAnnotation(
      'n7',
      KEY,
      JSON.stringify({
        ...JSON.parse(encodeAnnotation(record('n7', '192.0.2.7'))),
        endpoints: [{ id: 'd' }],
      }),
    );
    await waitUntil(() => s1.status().rejected.length > 0, 'rejected');
    expect(s1.status().rejected[0]).to.match(
      /^Node n7: its workloadnet\.io\/fabric annotation has an invalid endpoint list: endpoints\[0\]\.underlay must be one IP address/,
    );
    expect(peer(s1, 'n7')?.vtep).to.equal(undefined);
    api.deleteNode('n7');
    await waitUntil(() => !s1.peers().has('n7') && s1.status().rejected.length === 0, 'n7 gone');
  });

  it('keeps its peers while the API server is down, and says it is disconnected', async () => {
    await api.stop();
    await waitUntil(() => !s1.status().connected, 'disconnected');
    expect([...s1.peers().keys()]).to.deep.equal(['n2']);
    expect(s1.status().ready).to.equal(true);
    expect(s1.status().reasons.join('\n')).to.match(
      /Kubernetes API unreachable .*keeping the last known 1 peers/,
    );
    await api.listen();
    api.setNode('n2', ['10.50.2.0/24', 'fd50:2::/64']);
    await waitUntil(() => s1.status().connected && peer(s1, 'n2')?.prefixes.length === 2, 'back');
  });

  it('leaves its annotation on the Node when it stops', async () => {
    const want = encodeAnnotation(record('n2', '192.0.2.2'));
    expect(api.node('n2')?.metadata.annotations?.[KEY]).to.equal(want);
    const patches = api.count('patch');
    await s2.stop();
    expect(api.node('n2')?.metadata.annotations?.[KEY]).to.equal(want);
    expect(api.count('patch')).to.equal(patches);
  });

  it('says when its own Node does not exist, and publishes once it is registered, again after a re-registration', async () => {
    const s9 = source('n9');
    await s9.start(record('n9', '192.0.2.9'));
    await waitUntil(() => s9.synced, 'listed');
    await waitUntil(
      () => /Node n9 does not exist in the Kubernetes API/.test(s9.status().reasons.join('\n')),
      'the missing Node reported',
    );
    addNode('n9', '192.0.2.9', ['10.50.9.0/24']);
    await waitUntil(() => api.node('n9')?.metadata.annotations?.[KEY] !== undefined, 'published');
    await waitUntil(() => peer(s1, 'n9')?.vtep !== undefined, 'n1 sees n9 with its VTEP');
    await waitUntil(() => s9.status().reasons.length === 0, 'no reason left');
    // Deleted and registered again (a node re-joined): the annotation is written on the new Node.
    api.deleteNode('n9');
    await waitUntil(
      () => /Node n9 does not exist in the Kubernetes API/.test(s9.status().reasons.join('\n')),
      'the deleted Node reported',
    );
    addNode('n9', '192.0.2.9', ['10.50.9.0/24']);
    await waitUntil(() => api.node('n9')?.metadata.annotations?.[KEY] !== undefined, 'published again');
    await waitUntil(() => s9.status().reasons.length === 0, 'no reason left again');
  });

  it('says when the node address is not an InternalIP of its Node', async () => {
    const s10 = source('n10');
    addNode('n10', '192.0.2.10', ['10.50.10.0/24']);
    await s10.start(record('n10', '198.51.100.10'));
    await waitUntil(() => s10.synced, 'listed');
    await waitUntil(
      () =>
        s10
          .status()
          .reasons.some((r) =>
            r.includes(
              "this node's underlay address 198.51.100.10 is not an InternalIP of Node n10 (192.0.2.10)",
            ),
          ),
      'the mismatch reported',
    );
  });
});

describe('kubernetes module', () => {
  it('binds the Kubernetes peer source beside the pool source, whether or not one was bound before', () => {
    const config = mergeConfig(DEFAULT_CONFIG, { poolSource: 'kubernetes', nodeName: 'worker-1' });
    for (const boundBefore of [false, true]) {
      const module = kubernetesPoolSourceModule(config, silentLogger());
      const peers = loadedOverBindings(module, boundBefore).get<PeerSource>(PEER_SOURCE);
      expect(peers).to.be.instanceOf(KubernetesPeerSource);
      expect(peers.kind).to.equal('kubernetes');
      expect(peers.synced).to.equal(false);
    }
  });

  it('refuses at start a record of another node, connecting nothing', async () => {
    const s = new KubernetesPeerSource({
      nodeName: 'worker-1',
      kubeconfig: '/nonexistent',
      logger: silentLogger(),
    });
    const err = await s.start({ node: 'worker-2', underlay: ['192.0.2.1'], mtu: 1500, bootId: '' }).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err?.message).to.match(/names worker-2, but this source serves node worker-1/);
  });
});

import { expect } from 'chai';
import type { Peer } from '../../../core/peer-source';
import type { LinuxFabric } from '../../../backends/linux/fabric/linux-fabric';
import { NodeFabrics } from '../../support/node-fabrics';
import { vtepMac } from '../../../lib/vtep-mac';
import { ip } from '../../support/netns-fixture';
import { addRogueVtep, countSources, forge } from '../../support/forged-traffic';
import { FabricTopology, settings, type BareNode, type TopologyNode } from '../../support/fabric-topology';
import { nodeSpec } from '../../support/node-spec';
import { describeRoot } from '../../support/describe-root';
import { pings } from '../../support/ping';
import { requireProgram } from '../../support/system-program';
import { waitUntil } from '../../support/wait-until';

// A forged outer source: a host on na's subnet that holds nc's underlay address sends VXLAN to na as
// if it were nc, with an inner source of another node's pods (nb's, a peer of na without a namespace
// of its own). The outer source is a peer's, so an outer-only filter lets it in; the inner source is
// not one nc may send, so the filter must drop it. What reached the pod is read from a counter inside
// the pod's namespace.

const SPOOFED = '10.244.2.99'; // nb's pod range, sent under nc's underlay address
const FORGED = 20;

describeRoot('Linux fabric: the VXLAN source filter against a forged outer source', function () {
  this.timeout(90_000);
  const topo = new FabricTopology();
  const fabrics = new NodeFabrics();
  let na: TopologyNode;
  let nc: TopologyNode;
  let rogue: BareNode;

  const open = (n: TopologyNode): LinuxFabric => fabrics.open(n);
  /** nb: a peer of na's across the router, on paper only (its prefix is routed into wn-vxlan). */
  const nb: Peer = {
    node: 'nb',
    underlay: ['10.100.2.50'],
    mtu: 1500,
    vtep: { mac: vtepMac('10.100.2.50'), vni: 30574, port: 4789 },
    bootId: '',
    prefixes: ['10.244.2.0/24'],
  };
  const peersOfA = (): Peer[] => [...topo.peersOf('na', fabrics.locals), nb];

  /** Sends FORGED echo requests as nb's pod under nc's outer address; how many reached the pod. */
  const spoof = (): Promise<number> =>
    forge({
      from: rogue.ns,
      source: SPOOFED,
      podNs: na.pod,
      podIp: na.podIp,
      counter: 'spoofed',
      count: FORGED,
    });

  before(async () => {
    requireProgram('nft');
    await topo.build([nodeSpec('na', 1, 1), nodeSpec('nc', 2, 3)]);
    na = topo.node('na');
    nc = topo.node('nc');
    await countSources(na.pod, { spoofed: SPOOFED });
    // The rogue sits on na's subnet and holds nc's underlay address, so its VXLAN device sends from it.
    rogue = await topo.addBareNode({ name: 'nx', subnet: 1, host: 9 });
    await ip('-n', rogue.ns, 'addr', 'add', `${nc.address}/32`, 'dev', 'eth0');
    await ip('-n', rogue.ns, 'route', 'add', `${na.address}/32`, 'dev', 'eth0', 'src', nc.address);
    await addRogueVtep({
      ns: rogue.ns,
      local: nc.address,
      remote: na.address,
      podIp: na.podIp,
      sources: [SPOOFED],
    });

    const fa = open(na);
    const fc = open(nc);
    fabrics.locals.set('na', await fa.prepare(settings('vxlan')));
    fabrics.locals.set('nc', await fc.prepare(settings('vxlan')));
    await fc.apply(topo.peersOf('nc', fabrics.locals));
  });

  after(async () => {
    await fabrics.stopAll();
    await topo.cleanup();
  });

  it("drops and counts VXLAN from a peer's underlay address whose inner source is not that peer's", async () => {
    // The rig delivers: without the filter the forged packets reach the pod.
    const off = open(na);
    await off.prepare(settings('vxlan', { sourceFilter: false }));
    await off.apply(peersOfA());
    expect(await spoof(), 'received by the pod without the filter').to.be.at.least(FORGED);

    const fabric = open(na);
    await fabric.prepare(settings('vxlan'));
    await fabric.apply(peersOfA());
    let before = -1;
    await waitUntil(() => (before = fabric.report().filteredPackets ?? -1) >= 0, 'the counter to be read');
    expect(await spoof(), 'received by the pod with the filter').to.equal(0);
    await waitUntil(
      () => (fabric.report().filteredPackets ?? -1) >= before + FORGED,
      `the filter's counter to grow by ${FORGED}`,
    );
    // nc itself, sending as its own pod, still gets through both ways.
    const opts = { count: 3, waitSeconds: 2, intervalSeconds: 0.2 };
    expect(await pings(nc.pod, na.podIp, opts), 'nc pod → na pod').to.equal(true);
    expect(await pings(na.pod, nc.podIp, opts), 'na pod → nc pod').to.equal(true);
  });
});

import { expect } from 'chai';
import type { Peer } from '../../../core/peer-source';
import { NodeFabrics } from '../../support/node-fabrics';
import { directSources } from '../../../backends/linux/fabric/direct-sources';
import { discoverUnderlay } from '../../../backends/linux/fabric/underlay';
import { VxlanSourceFilter, nftRunner } from '../../../backends/linux/fabric/vxlan-source-filter';
import { NetnsHandle } from '../../../lib/netns/netns-handle';
import { NetlinkSocket } from '../../../lib/rtnetlink';
import { ip, ipJson, netnsExec } from '../../support/netns-fixture';
import { countSources, counted, forge } from '../../support/forged-traffic';
import {
  CLUSTER,
  FabricTopology,
  settings,
  type BareNode,
  type TopologyNode,
} from '../../support/fabric-topology';
import { nodeSpec } from '../../support/node-spec';
import { netnsPath } from '../../support/netns';
import { describeRoot } from '../../support/describe-root';
import { pings } from '../../support/ping';
import { requireProgram } from '../../support/system-program';

// The direct path of hybrid mode: n1 and n2 share a subnet and route each other's pods as plain IP. A
// third host on that subnet sends to n1's pod with a source in n2's pod range, routed via n1; strict
// rp_filter lets it in (the route back to n2's range leaves by the same uplink). The filter admits a
// pod-range source on the uplink only with the MAC of the peer that owns it. What reached the pod is
// read from a counter inside the pod's namespace.

const SPOOFED = '10.244.2.77'; // n2's pod range
const FORGED = 20;

describeRoot("Linux fabric: hybrid's direct path admits pod sources only from their owner", function () {
  this.timeout(90_000);
  const topo = new FabricTopology();
  const fabrics = new NodeFabrics();
  let n1: TopologyNode;
  let n2: TopologyNode;
  let rogue: BareNode;
  let ns: NetnsHandle;
  let sock: NetlinkSocket;

  // The answers go to n2.
  const spoof = (): Promise<number> =>
    forge({
      from: rogue.ns,
      source: SPOOFED,
      podNs: n1.pod,
      podIp: n1.podIp,
      counter: 'spoofed',
      count: FORGED,
    });

  const directCounter = (): Promise<number> => counted(n1.ns, 'direct_filtered', 'workloadnet');

  before(async () => {
    requireProgram('nft');
    await topo.build([nodeSpec('n1', 1, 1), nodeSpec('n2', 1, 2)]);
    n1 = topo.node('n1');
    n2 = topo.node('n2');
    for (const key of ['all', 'default', 'eth0'])
      await netnsExec(n1.ns, 'sysctl', '-q', '-w', `net.ipv4.conf.${key}.rp_filter=1`);
    await countSources(n1.pod, { spoofed: SPOOFED });
    rogue = await topo.addBareNode({ name: 'n3', subnet: 1, host: 3 });
    await ip('-n', rogue.ns, 'addr', 'add', `${SPOOFED}/32`, 'dev', 'eth0');
    await ip('-n', rogue.ns, 'route', 'add', n1.prefix, 'via', n1.address, 'src', SPOOFED);
    for (const n of [n1, n2]) {
      const f = fabrics.open(n);
      // No filter of the fabric's own: the test programs it (below) after showing the hole.
      fabrics.locals.set(n.name, await f.prepare(settings('hybrid', { sourceFilter: false })));
    }
    for (const n of [n1, n2]) await fabrics.of(n).apply(topo.peersOf(n.name, fabrics.locals));
    ns = await NetnsHandle.open(netnsPath(n1.ns));
    sock = NetlinkSocket.openIn(ns);
  });

  after(async () => {
    await fabrics.stopAll();
    await sock.close();
    ns.close();
    await topo.cleanup();
  });

  it('drops and counts a pod-range source from a host that does not own it; the owner gets through', async () => {
    // Without the guard the forged packets reach the pod, rp_filter=1 or not.
    expect(await spoof(), 'received by the pod without the direct-path guard').to.be.at.least(FORGED);

    // n1 has not sent n2 anything yet: the guard asks the kernel for n2's MAC.
    await ip('-n', n1.ns, 'neigh', 'flush', 'dev', 'eth0');
    const peers: Peer[] = topo.peersOf('n1', fabrics.locals);
    const underlay = await discoverUnderlay(sock, '');
    const direct = await directSources(sock, underlay, peers, [CLUSTER]);
    const [n2Link] = await ipJson<{ address: string }>(n2.ns, 'link', 'show', 'eth0');
    expect([...direct.owners].map(([mac, cs]) => [mac, cs.map((c) => c.text)])).to.deep.equal([
      [n2Link?.address, [n2.prefix]],
    ]);
    expect(direct.unresolved).to.deep.equal([]);
    const filter = new VxlanSourceFilter(nftRunner({ netnsPath: netnsPath(n1.ns) }));
    await filter.apply(4789, peers, { vni: 30574, direct });

    const before = await directCounter();
    expect(await spoof(), 'received by the pod with the guard').to.equal(0);
    expect(await directCounter()).to.be.at.least(before + FORGED);
    const opts = { count: 3, waitSeconds: 2, intervalSeconds: 0.2 };
    expect(await pings(n2.pod, n1.podIp, opts), 'n2 pod → n1 pod').to.equal(true);
    expect(await pings(n1.pod, n2.podIp, opts), 'n1 pod → n2 pod').to.equal(true);
  });
});

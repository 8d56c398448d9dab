import { expect } from 'chai';
import { describeRoot } from '../support/describe-root';
import { FabricCluster, usualNodes, type ClusterNode } from '../support/fabric-cluster';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import type { StandInKubeApiServer } from '../support/standin-kube-apiserver';
import { vtepMac } from '../../lib/vtep-mac';

// Ranges and routes from the Kubernetes API: three daemons take their pod ranges from their Node's
// spec.podCIDRs and their peers from every Node (podCIDRs, InternalIP, and the fabric annotation each
// daemon writes on its own Node), through the real client library against the test's stand-in API
// server. Each daemon runs beside the stand-in (it reaches it on loopback) and programs only its node
// namespace on the test's underlay (--host-netns): na and nb share a subnet, nc sits behind a router.

describeRoot(
  'fabric from the Kubernetes API between three daemons (hybrid; stand-in API server)',
  function () {
    this.timeout(120_000);
    let c: FabricCluster;
    let api: StandInKubeApiServer;

    const node = (name: string): ClusterNode => c.node(name);

    before(async () => {
      c = await FabricCluster.start({
        source: 'kubernetes',
        fabric: 'hybrid',
        mtu: 1450,
        nodes: usualNodes({ na: { range: 11 }, nb: { range: 12 }, nc: { range: 13 } }),
        podsPerNode: 1,
      });
      api = c.kube as StandInKubeApiServer;
    });

    after(async () => {
      await c?.teardown();
    });

    it("routes each Node's podCIDRs, directly on the subnet and over VXLAN across the router", async () => {
      const na = node('na');
      await c.waitForRoutes(na, 2);
      expect(c.routes(na)).to.have.members([
        '10.244.12.0/24 via 10.100.1.2 dev eth0 metric 1024 mtu 1450',
        '10.244.13.0/24 via 10.244.13.0 dev wn-vxlan metric 1024 onlink mtu 1450',
      ]);
      expect(c.pod('na').ip).to.match(/^10\.244\.11\./);
      expect(await c.silentPairs(), 'pod pairs that did not answer').to.deep.equal([]);
    });

    it('publishes its VTEP on its own Node and takes a VTEP from the others', () => {
      const annotation = api.node('nc')?.metadata.annotations?.['workloadnet.io/fabric'];
      expect(annotation, "nc's fabric annotation").to.be.a('string');
      const rec = JSON.parse(annotation as string) as { vtep?: { mac?: string } };
      // Derived from its name too: the annotation carries it to the peers.
      expect(rec.vtep?.mac).to.equal(vtepMac('10.100.2.3', 'nc'));
      const seen = c.peersOf(node('na')).find((p) => p.node === 'nc');
      expect(seen?.path).to.equal('vxlan');
    });

    it('keeps routing a peer while the API server is away, and withdraws a deleted Node only', async () => {
      const na = node('na');
      await api.stop();
      try {
        // Losing the API never empties the table: the last list stands.
        await new Promise((r) => setTimeout(r, 1_500));
        expect(c.routes(na)).to.have.length(2);
        expect(await pings(c.pod('na').ns, c.pod('nc').ip, { count: 2 })).to.equal(true);
      } finally {
        await api.listen();
      }
      api.deleteNode('nb');
      await waitUntil(
        async () => c.peersOf(na).some((p) => p.node === 'nb' && !!p.withdrawnAt),
        "nb's deletion seen by na (kept for the withdrawal grace)",
        30_000,
        { intervalMs: 200 },
      );
      // Within the grace the route stays: a deleted Node object is not yet evidence its pods are gone.
      expect(c.routes(na)).to.have.length(2);
      expect(await pings(c.pod('na').ns, c.pod('nc').ip)).to.equal(true);
    });
  },
);

import { expect } from 'chai';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { FabricTopology, fabricRoutes, peersOf, type BareNode } from '../backends/linux/fabric-topology';
import { attachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { describeRoot } from '../support/describe-root';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import { StandInKubeApiServer } from '../pools/support/standin-kube-apiserver';
import { vtepMac } from '../../lib/vtep-mac';

// Ranges and routes from the Kubernetes API: three daemons take their pod ranges from their Node's
// spec.podCIDRs and their peers from every Node (podCIDRs, InternalIP, and the fabric annotation each
// daemon writes on its own Node), through the real client library against the test's stand-in API
// server. Each daemon runs beside the stand-in (it reaches it on loopback) and programs only its node
// namespace on the test's underlay (--host-netns): na and nb share a subnet, nc sits behind a router.

interface Node extends BareNode {
  range: number;
  dir: string;
  daemon?: DaemonProcess;
  pod?: string;
  podIp?: string;
}

describeRoot(
  'fabric from the Kubernetes API between three daemons (hybrid; stand-in API server)',
  function () {
    this.timeout(120_000);
    const topo = new FabricTopology();
    const nodes: Node[] = [];
    let root: string;
    let api: StandInKubeApiServer;

    const node = (name: string): Node => nodes.find((n) => n.name === name) as Node;
    const socketOf = (n: Node): string => path.join(n.dir, 'api.sock');

    before(async () => {
      root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-fabk8s-'));
      api = await StandInKubeApiServer.start(path.join(root, 'api'));
      await topo.build([]);
      for (const [name, subnet, host, range] of [
        ['na', 1, 1, 11],
        ['nb', 1, 2, 12],
        ['nc', 2, 3, 13],
      ] as const) {
        const bare = await topo.addBareNode({ name, subnet, host });
        api.setNode(name, [`10.244.${range}.0/24`]);
        api.setAddresses(name, [{ type: 'InternalIP', address: bare.address }]);
        nodes.push({ ...bare, range, dir: path.join(root, name) });
      }
      for (const n of nodes) {
        fs.mkdirSync(n.dir, { recursive: true });
        n.daemon = await DaemonProcess.start({
          dir: n.dir,
          flags: {
            'pool-source': 'kubernetes',
            kubeconfig: api.kubeconfig(),
            'node-name': n.name,
            'host-netns': `/var/run/netns/${n.ns}`,
            fabric: 'hybrid',
            mtu: '1450',
          },
        });
      }
      for (const n of nodes) {
        const pod = topo.pool.add(`${n.name}pod`);
        await waitUntil(
          async () =>
            n
              .daemon!.client.call(n.daemon!.client.raw.attach, attachRequest(`${n.name}-pod`, pod.path))
              .then((res) => {
                n.podIp = (res.ips[0]?.cidr ?? '').split('/')[0];
                return true;
              }),
          `${n.name} attaches its pod from its Node's podCIDRs`,
          30_000,
          { intervalMs: 200, retryOnError: true },
        );
        n.pod = pod.name;
      }
    });

    after(async () => {
      for (const n of nodes) await n.daemon?.stop().catch(() => undefined);
      topo.cleanup();
      await api?.stop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    it("routes each Node's podCIDRs, directly on the subnet and over VXLAN across the router", async () => {
      const na = node('na');
      await waitUntil(async () => fabricRoutes(na.ns).length === 2, "na routes both peers' ranges", 30_000, {
        intervalMs: 200,
      });
      expect(fabricRoutes(na.ns)).to.have.members([
        '10.244.12.0/24 via 10.100.1.2 dev eth0 metric 1024 mtu 1450',
        '10.244.13.0/24 via 10.244.13.0 dev wn-vxlan metric 1024 onlink mtu 1450',
      ]);
      expect(node('na').podIp).to.match(/^10\.244\.11\./);
      for (const from of nodes)
        for (const to of nodes)
          if (from !== to)
            expect(
              await pings(from.pod as string, to.podIp as string, { count: 3, waitSeconds: 2 }),
              `${from.name} → ${to.name}`,
            ).to.equal(true);
    });

    it('publishes its VTEP on its own Node and takes a VTEP from the others', () => {
      const annotation = api.node('nc')?.metadata.annotations?.['workloadnet.io/fabric'];
      expect(annotation, "nc's fabric annotation").to.be.a('string');
      const rec = JSON.parse(annotation as string) as { vtep?: { mac?: string } };
      // Derived from its name too: the annotation carries it to the peers.
      expect(rec.vtep?.mac).to.equal(vtepMac('10.100.2.3', 'nc'));
      const seen = peersOf(socketOf(node('na'))).find((p) => p.node === 'nc');
      expect(seen?.path).to.equal('vxlan');
    });

    it('keeps routing a peer while the API server is away, and withdraws a deleted Node only', async () => {
      const na = node('na');
      await api.stop();
      try {
        // Losing the API never empties the table: the last list stands.
        await new Promise((r) => setTimeout(r, 1_500));
        expect(fabricRoutes(na.ns)).to.have.length(2);
        expect(await pings(na.pod as string, node('nc').podIp as string, { count: 2 })).to.equal(true);
      } finally {
        await api.listen();
      }
      api.deleteNode('nb');
      await waitUntil(
        async () => peersOf(socketOf(na)).some((p) => p.node === 'nb' && !!p.withdrawnAt),
        "nb's deletion seen by na (kept for the withdrawal grace)",
        30_000,
        { intervalMs: 200 },
      );
      // Within the grace the route stays: a deleted Node object is not yet evidence its pods are gone.
      expect(fabricRoutes(na.ns)).to.have.length(2);
      expect(await pings(na.pod as string, node('nc').podIp as string)).to.equal(true);
    });
  },
);

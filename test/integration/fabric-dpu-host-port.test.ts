import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { FabricHostPort } from '../../proto/gen/workloadnet/v1/workload';
import { cidrContains, parseAddress, parseCidr } from '../../lib/cidr';
import { ETCD_VXLAN, FabricCluster, type ClusterNode, type ClusterPod } from '../support/fabric-cluster';
import { CLUSTER } from '../support/fabric-topology';
import { HOST_PORT, hostLink, routeDevice } from '../support/host-port';
import type { SimulatedDpu } from '../support/simulated-dpu';
import { attachRequest } from '../support/attach-request';
import { CLI } from '../support/daemon-process';
import { isRoot } from '../support/netns';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import { haveEtcd } from '../support/etcd-cluster';

// The host port end to end: with the DPUs carrying the fabric, the daemon attaches the node's own
// namespace to the network on its DPUs (wn-host0), and the host reaches every pod through it: a pod
// behind its own DPU, one behind a DPU of another node, one on a Linux-backend node. ha and hb run the
// DPU backend with one simulated DPU each (workloadnet-dpu-sim in netns mode); hl runs the Linux backend.

const describeEtcdRoot = isRoot && haveEtcd ? describe : describe.skip;
const SKIP = isRoot && haveEtcd ? '' : ' (skipped: needs root and etcd-server)';

describeEtcdRoot(
  `the host port: the node's namespace reaches the overlay through its DPU${SKIP}`,
  function () {
    this.timeout(240_000);
    let c: FabricCluster;

    const node = (name: string): ClusterNode => c.node(name);
    const pod = (name: string): ClusterPod => c.pod(name);
    const hostPortOf = async (n: ClusterNode): Promise<FabricHostPort | undefined> =>
      (await c.status(n)).fabric?.hostPort;

    /** The host port's port as the node's simulated DPU holds it. */
    const simPort = (d: SimulatedDpu): { name: string; generation: number } | undefined =>
      d.sim?.state()?.ports.find((p) => p.name === `${HOST_PORT}/wn-host0`);

    before(async () => {
      c = await FabricCluster.start({
        ...ETCD_VXLAN,
        nodes: [
          { name: 'ha', subnet: 1, host: 1, dpus: [{ name: 'ha-d0', host: 11 }] },
          { name: 'hb', subnet: 2, host: 2, dpus: [{ name: 'hb-d0', host: 21 }] },
          { name: 'hl', subnet: 1, host: 3 },
        ],
        podsPerNode: 1,
      });
      await c.fabricReady();
      for (const n of [node('ha'), node('hb')])
        await waitUntil(
          async () => (await hostPortOf(n))?.state === 'attached',
          `${n.name}'s host port attached`,
          60_000,
          { intervalMs: 200 },
        );
    });

    after(async () => {
      await c?.teardown();
    });

    it('attaches the host namespace to its DPU as wn-host0, without a default route, routing the cluster range', async () => {
      const ha = node('ha');
      const hp = await hostPortOf(ha);
      expect(hp).to.include({ state: 'attached', interface: 'wn-host0', dpu: 'ha-d0', reason: '' });
      expect(hp?.routes).to.deep.equal([CLUSTER]);
      const st = await c.status(ha);
      const slices = st.fabric?.endpoints.find((e) => e.id === 'ha-d0')?.prefixes ?? [];
      expect(slices.length).to.be.greaterThan(0);
      const link = hostLink(ha.ns);
      expect(link?.address).to.equal(hp?.addresses[0]);
      // Its address comes from its DPU's slices like any pod's, so other nodes route it to that DPU.
      expect(
        slices.some((s) => within(link!.address, s)),
        `${link?.address} in ${slices.join(',')}`,
      ).to.equal(true);
      const routes = execFileSync('ip', ['-n', ha.ns, 'route', 'show', 'default'], { encoding: 'utf8' });
      expect(routes, "the host's default route is left alone").to.not.include('wn-host0');
      const attachments = (await ha.daemon!.client.call(ha.daemon!.client.raw.list, {})).attachments;
      expect(attachments.find((a) => a.workloadId === HOST_PORT)).to.include({
        ifName: 'wn-host0',
        netnsPath: `/var/run/netns/${ha.ns}`,
      });
    });

    it("reaches a local pod, a pod behind another node's DPU and a Linux node's pod, all through wn-host0", async () => {
      for (const [n, targets] of [
        [node('ha'), ['ha', 'hb', 'hl']],
        [node('hb'), ['hb', 'ha', 'hl']],
      ] as const) {
        for (const t of targets) {
          expect(routeDevice(n.ns, pod(t).ip), `${n.name} → ${t}'s pod (${pod(t).ip}) goes out of`).to.equal(
            'wn-host0',
          );
          expect(
            await pings(n.ns, pod(t).ip, { count: 3, waitSeconds: 2 }),
            `${n.name} → ${t}'s pod`,
          ).to.equal(true);
        }
      }
    });

    it("the node's simulated DPU holds the host port as one of its ports", async () => {
      const port = simPort(c.dpu('ha-d0'));
      expect(port, 'the host port on ha-d0').to.not.equal(undefined);
      const hp = await hostPortOf(node('ha'));
      expect((port as unknown as { ips: string[] }).ips).to.deep.equal([`${hp?.addresses[0]}/32`]);
    });

    it('refuses an Attach of its workload id, and neither a GC nor a forced sweep takes it', async () => {
      const ha = node('ha');
      const api = ha.daemon!.client;
      const before = hostLink(ha.ns);
      const ns = c.topo.pool.add('impostor');
      let refused = '';
      await api
        .call(api.raw.attach, attachRequest(HOST_PORT, ns.path, 'eth1'))
        .catch((err: Error) => (refused = err.message));
      expect(refused).to.include("the daemon's own host port");
      // A keep list that names only ha's pod, as a runtime's GC would; then the sweep twice, forced.
      const gc = await api.call(api.raw.gc, {
        keep: [{ workloadId: pod('ha').workload, ifName: '' }],
        namespacesGone: false,
        dryRun: false,
      });
      expect(gc.removed.map((r) => r.workloadId)).to.not.include(HOST_PORT);
      for (let i = 0; i < 2; i++) {
        const swept = await api.call(api.raw.gc, { keep: [], namespacesGone: true, dryRun: false });
        expect([...swept.removed, ...swept.suspected].map((r) => r.workloadId)).to.not.include(HOST_PORT);
      }
      const cli = JSON.parse(
        execFileSync(process.execPath, [CLI, 'gc', '--namespaces-gone', '--json', '--socket', ha.api], {
          encoding: 'utf8',
        }),
      ) as { removed: string[] };
      expect(cli.removed).to.not.include(HOST_PORT);
      expect(hostLink(ha.ns)).to.deep.equal(before);
      expect((await hostPortOf(ha))?.state).to.equal('attached');
      expect(await pings(ha.ns, pod('hb').ip, { count: 2, waitSeconds: 2 })).to.equal(true);
    });

    it('a daemon restart keeps the host port as it is: same interface, same address, no new attach', async () => {
      const ha = node('ha');
      const d = c.dpu('ha-d0');
      const link = hostLink(ha.ns);
      const port = simPort(d);
      const hp = await hostPortOf(ha);
      const logFile = path.join(ha.dir, 'daemon.log');
      const attachedLines = (): number =>
        fs.readFileSync(logFile, 'utf8').split('host port attached').length - 1;
      const attachedBefore = attachedLines();
      expect(attachedBefore, 'the first start attached it').to.equal(1);
      await c.stop(ha);
      // Down with the daemon, the host still reaches the pods: the DPU keeps its dataplane.
      expect(
        await pings(ha.ns, pod('hb').ip, { count: 2, waitSeconds: 2 }),
        'while the daemon is down',
      ).to.equal(true);
      await c.startDaemon(ha);
      await waitUntil(
        async () => (await hostPortOf(ha))?.state === 'attached',
        'host port seen again',
        30_000,
        {
          intervalMs: 200,
          retryOnError: true,
        },
      );
      await d.sim!.waitForState((s) => s.session.state === 'connected' && s.synced, 'reconnected');
      // A few of the controller's passes, so that a re-attach, if there were one, would have happened.
      await waitUntil(async () => (await c.status(ha)).ready, 'ha ready', 30_000, { intervalMs: 200 });
      await new Promise((r) => setTimeout(r, 4500));
      expect(hostLink(ha.ns)).to.deep.equal(link);
      expect((await hostPortOf(ha))?.addresses).to.deep.equal(hp?.addresses);
      expect(simPort(d)?.generation, 'the port was not programmed again').to.equal(port?.generation);
      expect(attachedLines(), 'no attach since the restart').to.equal(attachedBefore);
      expect(routeDevice(ha.ns, pod('hl').ip)).to.equal('wn-host0');
      expect(await pings(ha.ns, pod('hl').ip, { count: 2, waitSeconds: 2 })).to.equal(true);
    });
  },
);

/** Whether an IPv4 address lies in a CIDR. */
function within(ip: string, cidr: string): boolean {
  return cidrContains(parseCidr(cidr), parseAddress(ip).value);
}

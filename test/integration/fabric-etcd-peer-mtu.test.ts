import { expect } from 'chai';
import { execFile, execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { FabricTopology, peersOf, type BareNode } from '../backends/linux/fabric-topology';
import { attachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { isRoot } from '../support/netns';
import { waitUntil } from '../support/wait-until';
import { EtcdCluster, haveEtcd } from '../pools/support/etcd-cluster';

// A node's uplink MTU reaches its peers through its etcd record: two daemons in VXLAN mode (no --mtu)
// across a router, nb's uplink smaller than the underlay's. na routes nb's block at what nb's pods carry;
// nb restarted with its uplink lowered again publishes the new MTU, and na, running on, follows it. A
// don't-fragment packet too large for nb is refused in na's pod with the MTU that fits, never lost.

const CLUSTER = '10.244.0.0/16';

interface Node extends BareNode {
  dir: string;
  daemon?: DaemonProcess;
  pod?: string;
  podIp?: string;
}

const describeEtcdRoot = isRoot && haveEtcd ? describe : describe.skip;
const SKIP = isRoot && haveEtcd ? '' : ' (skipped: needs root and etcd-server)';

/** One don't-fragment ping of `size` bytes of IP packet from a namespace; its output and outcome. */
function dfPing(ns: string, to: string, size: number): Promise<{ ok: boolean; out: string }> {
  const args = ['netns', 'exec', ns, 'ping', '-M', 'do', '-c', '1', '-W', '2', '-s', String(size - 28), to];
  return new Promise((resolve) =>
    execFile('ip', args, (err, stdout, stderr) => resolve({ ok: err === null, out: `${stdout}${stderr}` })),
  );
}

/** The MTU our route to `prefix` carries in a node namespace (NaN without one). */
function routeMtu(ns: string, prefix: string): number {
  const out = execFileSync('ip', ['-n', ns, 'route', 'show', prefix, 'proto', '119'], { encoding: 'utf8' });
  return Number(/ mtu (\d+)/.exec(out)?.[1]);
}

describeEtcdRoot(
  `a peer's MTU followed through its etcd record (vxlan; real etcd, real kernel)${SKIP}`,
  function () {
    this.timeout(180_000);
    const topo = new FabricTopology();
    const nodes: Node[] = [];
    let root: string;
    let etcd: EtcdCluster;
    let nbBlock = '';

    const node = (name: string): Node => nodes.find((n) => n.name === name) as Node;
    const startDaemon = async (n: Node): Promise<void> => {
      n.daemon = await DaemonProcess.start({
        dir: n.dir,
        netns: etcd.netns,
        args: [
          ...['--pool-source', 'etcd', '--node-name', n.name, '--etcd-endpoints', etcd.endpoints.join(',')],
          ...['--cluster-cidr', CLUSTER, '--host-netns', `/var/run/netns/${n.ns}`, '--fabric', 'vxlan'],
        ],
      });
    };

    before(async () => {
      root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-peermtu-'));
      etcd = await EtcdCluster.start(path.join(root, 'etcd'), 1, 'wn-peermtu-');
      await topo.build([]);
      for (const [name, subnet, host] of [
        ['na', 1, 1],
        ['nb', 2, 2],
      ] as const) {
        const bare = await topo.addBareNode({ name, subnet, host });
        nodes.push({ ...bare, dir: path.join(root, name) });
      }
      // nb's uplink is smaller than the underlay's: it publishes 1400, its pods carry 1350.
      execFileSync('ip', ['-n', node('nb').ns, 'link', 'set', 'eth0', 'mtu', '1400']);
      for (const n of nodes) await startDaemon(n);
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
          `${n.name} attaches its pod once it holds a block`,
          30_000,
          { intervalMs: 200, retryOnError: true },
        );
        n.pod = pod.name;
      }
      const na = node('na');
      await waitUntil(
        async () => {
          nbBlock = peersOf(path.join(na.dir, 'api.sock')).find((p) => p.node === 'nb')?.prefixes[0] ?? '';
          return nbBlock !== '' && !Number.isNaN(routeMtu(na.ns, nbBlock));
        },
        "na routes nb's block",
        30_000,
        { intervalMs: 200 },
      );
    });

    after(async () => {
      for (const n of nodes) await n.daemon?.stop().catch(() => undefined);
      topo.cleanup();
      await etcd?.stop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
    });

    it("routes the peer's block at the MTU its record states, and refuses a larger DF packet where it is sent", async () => {
      const na = node('na');
      const nb = node('nb');
      const record = JSON.parse(etcd.etcdctl('get', '/workloadnet/nodes/nb', '--print-value-only')) as {
        mtu: number;
      };
      expect(record.mtu).to.equal(1400);
      await waitUntil(async () => routeMtu(na.ns, nbBlock) === 1350, "na's route to nb at 1350", 30_000, {
        intervalMs: 200,
      });
      const fits = await dfPing(na.pod as string, nb.podIp as string, 1350);
      expect(fits.ok, fits.out).to.equal(true);
      // The case: 1422 bytes fit na's pods (1450) but not nb once encapsulated.
      const large = await dfPing(na.pod as string, nb.podIp as string, 1422);
      expect(large.ok, large.out).to.equal(false);
      expect(large.out, large.out).to.match(/mtu ?=? ?1350/);
    });

    it("follows a change of the peer's MTU while this node runs on", async () => {
      const na = node('na');
      const nb = node('nb');
      const naPid = na.daemon?.child.pid;
      await nb.daemon?.stop();
      execFileSync('ip', ['-n', nb.ns, 'link', 'set', 'eth0', 'mtu', '1300']);
      await startDaemon(nb);
      await waitUntil(async () => routeMtu(na.ns, nbBlock) === 1250, "na's route to nb at 1250", 30_000, {
        intervalMs: 200,
      });
      expect(na.daemon?.child.pid, 'na was not restarted').to.equal(naPid);
      // nb's pod is brought to its new MTU in place; then what fits crosses and more is refused in na's pod.
      await waitUntil(
        async () => (await dfPing(na.pod as string, nb.podIp as string, 1250)).ok,
        'a DF packet of 1250 bytes crosses',
        30_000,
        { intervalMs: 500 },
      );
      const large = await dfPing(na.pod as string, nb.podIp as string, 1350);
      expect(large.ok, large.out).to.equal(false);
      expect(large.out, large.out).to.match(/mtu ?=? ?1250/);
    });
  },
);

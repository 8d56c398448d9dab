import { expect } from 'chai';
import { execFile, execFileSync } from 'node:child_process';
import { FabricCluster, type ClusterNode } from '../support/fabric-cluster';
import { isRoot } from '../support/netns';
import { waitUntil } from '../support/wait-until';
import { EtcdCluster, haveEtcd } from '../support/etcd-cluster';

// A node's uplink MTU reaches its peers through its etcd record: two daemons in VXLAN mode (no --mtu)
// across a router, nb's uplink smaller than the underlay's. na routes nb's block at what nb's pods carry;
// nb's uplink lowered again while both run: nb publishes the new MTU and na follows it, no restart. A
// don't-fragment packet too large for nb is refused in na's pod with the MTU that fits, never lost.

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
    let c: FabricCluster;
    let etcd: EtcdCluster;
    let nbBlock = '';

    const node = (name: string): ClusterNode => c.node(name);

    before(async () => {
      c = await FabricCluster.start({
        source: 'etcd',
        etcdMembers: 1,
        fabric: 'vxlan',
        nodes: [
          { name: 'na', subnet: 1, host: 1 },
          { name: 'nb', subnet: 2, host: 2 },
        ],
        // nb's uplink is smaller than the underlay's: it publishes 1400, its pods carry 1350.
        prepare: (n) => {
          if (n.name === 'nb') execFileSync('ip', ['-n', n.ns, 'link', 'set', 'eth0', 'mtu', '1400']);
        },
        podsPerNode: 1,
      });
      etcd = c.etcd as EtcdCluster;
      const na = node('na');
      await waitUntil(
        async () => {
          nbBlock = c.peersOf(na).find((p) => p.node === 'nb')?.prefixes[0] ?? '';
          return nbBlock !== '' && !Number.isNaN(routeMtu(na.ns, nbBlock));
        },
        "na routes nb's block",
        30_000,
        { intervalMs: 200 },
      );
    });

    after(async () => {
      await c?.teardown();
    });

    it("routes the peer's block at the MTU its record states, and refuses a larger DF packet where it is sent", async () => {
      const na = node('na');
      const record = JSON.parse(etcd.etcdctl('get', '/workloadnet/nodes/nb', '--print-value-only')) as {
        mtu: number;
      };
      expect(record.mtu).to.equal(1400);
      await waitUntil(async () => routeMtu(na.ns, nbBlock) === 1350, "na's route to nb at 1350", 30_000, {
        intervalMs: 200,
      });
      const fits = await dfPing(c.pod('na').ns, c.pod('nb').ip, 1350);
      expect(fits.ok, fits.out).to.equal(true);
      // The case: 1422 bytes fit na's pods (1450) but not nb once encapsulated.
      const large = await dfPing(c.pod('na').ns, c.pod('nb').ip, 1422);
      expect(large.ok, large.out).to.equal(false);
      expect(large.out, large.out).to.match(/mtu ?=? ?1350/);
    });

    it("follows a change of the peer's uplink MTU while both nodes run on", async () => {
      const na = node('na');
      const nb = node('nb');
      const pids = [na.daemon?.child.pid, nb.daemon?.child.pid];
      execFileSync('ip', ['-n', nb.ns, 'link', 'set', 'eth0', 'mtu', '1300']);
      const published = (): number =>
        (JSON.parse(etcd.etcdctl('get', '/workloadnet/nodes/nb', '--print-value-only')) as { mtu: number })
          .mtu;
      await waitUntil(() => published() === 1300, "nb's record at 1300", 30_000, { intervalMs: 200 });
      await waitUntil(async () => routeMtu(na.ns, nbBlock) === 1250, "na's route to nb at 1250", 30_000, {
        intervalMs: 200,
      });
      expect([na.daemon?.child.pid, nb.daemon?.child.pid], 'neither restarted').to.deep.equal(pids);
      // nb's pod is brought to its new MTU in place; then what fits crosses and more is refused in na's pod.
      await waitUntil(
        async () => (await dfPing(c.pod('na').ns, c.pod('nb').ip, 1250)).ok,
        'a DF packet of 1250 bytes crosses',
        30_000,
        { intervalMs: 500 },
      );
      const large = await dfPing(c.pod('na').ns, c.pod('nb').ip, 1350);
      expect(large.ok, large.out).to.equal(false);
      expect(large.out, large.out).to.match(/mtu ?=? ?1250/);
    });
  },
);

import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { FabricCluster, type ClusterNode } from '../support/fabric-cluster';
import { isRoot } from '../support/netns';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import { EtcdCluster, haveEtcd } from '../support/etcd-cluster';

// hybrid → off → hybrid on an etcd node, pods attached in between. With the fabric off no fabric runs,
// so the tunnel address the hybrid start put on wn-vxlan stays there: it is a local address of the
// host, and a pod given it would never hear its node's answers. So an off start keeps it reserved, and
// the next hybrid start uses it again. Blocks of 4 addresses: the off start's pods fill the tunnel
// address's block, so a freed address would be handed out.

const NODE_IP = '10.100.1.1';

const describeEtcdRoot = isRoot && haveEtcd ? describe : describe.skip;
const SKIP = isRoot && haveEtcd ? '' : ' (skipped: needs root and etcd-server)';

describeEtcdRoot(
  `fabric mode change hybrid → off → hybrid keeps the tunnel address off pods${SKIP}`,
  function () {
    this.timeout(240_000);
    let c: FabricCluster;
    let etcd: EtcdCluster;
    let na: ClusterNode;
    const pods: Array<{ ns: string; ip: string }> = [];

    const restart = async (mode: 'hybrid' | 'off'): Promise<void> => {
      await c.restart(na, { fabric: mode });
    };
    /** Global IPv4 addresses on wn-vxlan. */
    const deviceAddresses = (): string[] =>
      [
        ...execFileSync(
          'ip',
          ['-n', na.ns, '-4', '-o', 'addr', 'show', 'dev', 'wn-vxlan', 'scope', 'global'],
          {
            encoding: 'utf8',
          },
        ).matchAll(/inet (\S+)\/32/g),
      ].map((m) => m[1] as string);
    const published = (): string | undefined => {
      const out = etcd.etcdctl('get', '/workloadnet/nodes/na', '--print-value-only');
      if (out.trim() === '') return undefined;
      return (JSON.parse(out) as { vtep?: { gateways?: { 4?: string } } }).vtep?.gateways?.[4];
    };
    async function attach(name: string): Promise<{ ns: string; ip: string }> {
      const p = await c.attachPod(na, name);
      pods.push(p);
      return p;
    }

    before(async () => {
      c = await FabricCluster.start({
        source: 'etcd',
        etcdMembers: 1,
        fabric: 'hybrid',
        mtu: 1450,
        config: { etcd: { blockSize: 30 }, fabric: { leaseTtlSeconds: 3 } },
        nodes: [{ name: 'na', subnet: 1, host: 1 }],
      });
      etcd = c.etcd as EtcdCluster;
      na = c.node('na');
    });

    after(async () => {
      await c?.teardown();
    });

    it('gives no pod the tunnel address while off, every pod reaches its node, and hybrid again uses the same address', async () => {
      const first = await attach('mode-pod1');
      await waitUntil(
        () => published() !== undefined && deviceAddresses().length === 1,
        'the tunnel address published and on wn-vxlan',
        30_000,
        { intervalMs: 200 },
      );
      const tunnel = published() as string;
      expect(deviceAddresses()).to.deep.equal([tunnel]);
      expect(first.ip).to.not.equal(tunnel);

      await restart('off');
      // The fabric does not run: the address stays on the device.
      expect(deviceAddresses()).to.deep.equal([tunnel]);
      for (const name of ['mode-pod2', 'mode-pod3', 'mode-pod4']) await attach(name);
      expect(
        pods.map((p) => p.ip),
        'pods attached with the fabric off',
      ).to.not.include(tunnel);
      for (const p of pods)
        expect(await pings(p.ns, NODE_IP, { count: 2, waitSeconds: 2 }), `pod ${p.ip} → its node`).to.equal(
          true,
        );

      await restart('hybrid');
      await waitUntil(() => published() === tunnel, 'the same tunnel address published again', 30_000, {
        intervalMs: 200,
      });
      expect(deviceAddresses()).to.deep.equal([tunnel]);
      const last = await attach('mode-pod5');
      expect(last.ip).to.not.equal(tunnel);
      for (const p of pods)
        expect(await pings(p.ns, NODE_IP, { count: 2, waitSeconds: 2 }), `pod ${p.ip} → its node`).to.equal(
          true,
        );
    });
  },
);

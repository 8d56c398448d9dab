import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { FabricTopology, type BareNode } from '../backends/linux/fabric-topology';
import { attachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { isRoot } from '../support/netns';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import { EtcdCluster, haveEtcd } from '../pools/support/etcd-cluster';

// hybrid → off → hybrid on an etcd node, pods attached in between. With the fabric off no fabric runs,
// so the tunnel address the hybrid start put on wn-vxlan stays there: it is a local address of the
// host, and a pod given it would never hear its node's answers. So an off start keeps it reserved, and
// the next hybrid start uses it again. Blocks of 4 addresses: the off start's pods fill the tunnel
// address's block, so a freed address would be handed out.

const CLUSTER = '10.244.0.0/16';
const NODE_IP = '10.100.1.1';

const describeEtcdRoot = isRoot && haveEtcd ? describe : describe.skip;
const SKIP = isRoot && haveEtcd ? '' : ' (skipped: needs root and etcd-server)';

describeEtcdRoot(
  `fabric mode change hybrid → off → hybrid keeps the tunnel address off pods${SKIP}`,
  function () {
    this.timeout(240_000);
    const topo = new FabricTopology();
    let root: string;
    let etcd: EtcdCluster;
    let config: string;
    let na: BareNode;
    let dir: string;
    let daemon: DaemonProcess | undefined;
    const pods: Array<{ ns: string; ip: string }> = [];

    const start = (mode: 'hybrid' | 'off'): Promise<DaemonProcess> =>
      DaemonProcess.start({
        dir,
        netns: etcd.netns,
        args: [
          ...['--config', config, '--pool-source', 'etcd', '--node-name', 'na'],
          ...['--etcd-endpoints', etcd.endpoints.join(',')],
          ...['--cluster-cidr', CLUSTER, '--host-netns', `/var/run/netns/${na.ns}`],
          ...['--fabric', mode, '--mtu', '1450'],
        ],
      });
    const restart = async (mode: 'hybrid' | 'off'): Promise<void> => {
      await daemon?.stop();
      daemon = await start(mode);
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
      const pod = topo.pool.add(name);
      const d = daemon as DaemonProcess;
      let ip = '';
      await waitUntil(
        () =>
          d.client.call(d.client.raw.attach, attachRequest(name, pod.path)).then((res) => {
            ip = (res.ips[0]?.cidr ?? '').split('/')[0] ?? '';
            return true;
          }),
        `${name} attached`,
        30_000,
        { intervalMs: 200, retryOnError: true },
      );
      const p = { ns: pod.name, ip };
      pods.push(p);
      return p;
    }

    before(async () => {
      root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-fabmode-'));
      etcd = await EtcdCluster.start(path.join(root, 'etcd'), 1, 'wn-fabmode-');
      await topo.build([]);
      config = path.join(root, 'config.json');
      fs.writeFileSync(config, JSON.stringify({ etcd: { blockSize: 30 }, fabric: { leaseTtlSeconds: 3 } }));
      na = await topo.addBareNode({ name: 'na', subnet: 1, host: 1 });
      dir = path.join(root, 'na');
      daemon = await start('hybrid');
    });

    after(async () => {
      await daemon?.stop().catch(() => undefined);
      topo.cleanup();
      await etcd?.stop();
      if (root) fs.rmSync(root, { recursive: true, force: true });
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

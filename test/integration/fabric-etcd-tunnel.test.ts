import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { FabricTopology, peersOf, type BareNode } from '../backends/linux/fabric-topology';
import { attachRequest } from '../support/attach-request';
import { DaemonProcess } from '../support/daemon-process';
import { isRoot } from '../support/netns';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import { EtcdCluster, haveEtcd } from '../pools/support/etcd-cluster';
import { cidrContains, parseAddress, parseCidr } from '../../lib/cidr';

// The tunnel address of an etcd node: etcd blocks hand out their first address to pods, so each node
// reserves one address of its own blocks, puts it on wn-vxlan and publishes it in its record; peers
// key its routes on it and probe it. With strict rp_filter (=1) on every node, traffic a node itself
// sends to a remote pod leaves with it as its source and its answer passes the filter. Hybrid: na and
// nb share a subnet (routed), nc sits behind a router (VXLAN); vxlan: every peer over VXLAN.

const CLUSTER = '10.244.0.0/16';

interface Node extends BareNode {
  dir: string;
  daemon?: DaemonProcess;
  podIp?: string;
}

const describeEtcdRoot = isRoot && haveEtcd ? describe : describe.skip;
const SKIP = isRoot && haveEtcd ? '' : ' (skipped: needs root and etcd-server)';

function strictRpFilter(ns: string): void {
  for (const dev of ['all', 'default', 'eth0'])
    execFileSync('ip', ['netns', 'exec', ns, 'sysctl', '-q', '-w', `net.ipv4.conf.${dev}.rp_filter=1`]);
}

/** Global IPv4 addresses on wn-vxlan. */
function deviceAddresses(ns: string): string[] {
  const out = execFileSync(
    'ip',
    ['-n', ns, '-4', '-o', 'addr', 'show', 'dev', 'wn-vxlan', 'scope', 'global'],
    {
      encoding: 'utf8',
    },
  );
  return [...out.matchAll(/inet (\S+)/g)].map((m) => m[1] as string);
}

/** Permanent neighbours on wn-vxlan: the peers' keys. */
function neighbourKeys(ns: string): string[] {
  const out = execFileSync('ip', ['-n', ns, '-4', 'neigh', 'show', 'dev', 'wn-vxlan', 'nud', 'permanent'], {
    encoding: 'utf8',
  });
  return out
    .split('\n')
    .map((l) => l.trim().split(' ')[0] ?? '')
    .filter(Boolean);
}

for (const mode of ['hybrid', 'vxlan'] as const)
  describeEtcdRoot(
    `fabric from etcd: each node's tunnel address (${mode}, strict rp_filter)${SKIP}`,
    function () {
      this.timeout(240_000);
      const topo = new FabricTopology();
      const nodes: Node[] = [];
      let root: string;
      let etcd: EtcdCluster;
      let config: string;

      const node = (name: string): Node => nodes.find((n) => n.name === name) as Node;
      const start = (n: Node): Promise<DaemonProcess> =>
        DaemonProcess.start({
          dir: n.dir,
          netns: etcd.netns,
          args: [
            ...['--config', config, '--pool-source', 'etcd', '--node-name', n.name],
            ...['--etcd-endpoints', etcd.endpoints.join(',')],
            ...['--cluster-cidr', CLUSTER, '--host-netns', `/var/run/netns/${n.ns}`],
            ...['--fabric', mode, '--mtu', '1450'],
          ],
        });
      /** The tunnel address a node publishes in its etcd record, if any. */
      const published = (n: Node): string | undefined => {
        const out = etcd.etcdctl('get', `/workloadnet/nodes/${n.name}`, '--print-value-only');
        if (out.trim() === '') return undefined;
        return (JSON.parse(out) as { vtep?: { gateways?: { 4?: string } } }).vtep?.gateways?.[4];
      };

      before(async () => {
        root = fs.mkdtempSync(path.join(os.tmpdir(), 'wn-fabtun-'));
        etcd = await EtcdCluster.start(path.join(root, 'etcd'), 3, 'wn-fabtun-');
        await topo.build([]);
        config = path.join(root, 'config.json');
        fs.writeFileSync(config, JSON.stringify({ fabric: { leaseTtlSeconds: 3, probeIntervalSeconds: 1 } }));
        for (const [name, subnet, host] of [
          ['na', 1, 1],
          ['nb', 1, 2],
          ['nc', 2, 3],
        ] as const) {
          const bare = await topo.addBareNode({ name, subnet, host });
          strictRpFilter(bare.ns);
          const n: Node = { ...bare, dir: path.join(root, name) };
          n.daemon = await start(n);
          nodes.push(n);
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
            `${n.name} attaches its pod once it holds a block`,
            30_000,
            { intervalMs: 200, retryOnError: true },
          );
        }
      });

      after(async () => {
        for (const n of nodes) await n.daemon?.stop().catch(() => undefined);
        topo.cleanup();
        await etcd?.stop();
        if (root) fs.rmSync(root, { recursive: true, force: true });
      });

      it('holds on wn-vxlan an address of its own block that no pod holds, and peers key its routes on it', async () => {
        const na = node('na');
        for (const n of nodes)
          await waitUntil(
            async () => published(n) !== undefined && deviceAddresses(n.ns).length === 1,
            `${n.name} publishes its tunnel address and holds it on wn-vxlan`,
            30_000,
            { intervalMs: 200 },
          );
        for (const n of nodes) {
          const address = published(n) as string;
          expect(deviceAddresses(n.ns), n.name).to.deep.equal([`${address}/32`]);
          expect(address, n.name).to.not.be.oneOf(nodes.map((m) => m.podIp));
          const seenBy = nodes.find((m) => m !== n) as Node;
          const blocks =
            peersOf(path.join(seenBy.dir, 'api.sock')).find((p) => p.node === n.name)?.prefixes ?? [];
          expect(
            blocks.some((b) => cidrContains(parseCidr(b), parseAddress(address).value)),
            `${n.name}'s ${address} inside its blocks ${blocks.join(', ')}`,
          ).to.equal(true);
        }
        // Over VXLAN each peer's neighbour key is the address it publishes: in hybrid only nc's on na (nb is
        // on the subnet, routed), both on nc (across the router); in vxlan every peer's on every node.
        for (const n of nodes) {
          const tunnelled = nodes.filter(
            (m) => m !== n && (mode === 'vxlan' || (n.name === 'nc') !== (m.name === 'nc')),
          );
          await waitUntil(
            async () => neighbourKeys(n.ns).length === tunnelled.length,
            `${n.name} has a neighbour per tunnelled peer`,
            30_000,
            { intervalMs: 200 },
          );
          expect(neighbourKeys(n.ns), n.name).to.have.members(tunnelled.map((m) => published(m)));
        }
        expect(neighbourKeys(na.ns)).to.include(published(node('nc')));
      });

      it('a node reaches every remote pod with rp_filter=1 everywhere, and probes show its VXLAN peers reachable', async () => {
        // Every node's fabric has programmed both peers (routed or over VXLAN) before the node pings.
        for (const n of nodes)
          await waitUntil(
            async () =>
              peersOf(path.join(n.dir, 'api.sock')).filter((p) => p.path !== 'unreachable').length === 2,
            `${n.name} reaches both peers`,
            30_000,
            { intervalMs: 200 },
          );
        for (const from of nodes)
          for (const to of nodes)
            if (from !== to)
              expect(
                await pings(from.ns, to.podIp as string, { count: 3, waitSeconds: 2 }),
                `node ${from.name} → pod on ${to.name}`,
              ).to.equal(true);
        const nc = node('nc');
        await waitUntil(
          async () =>
            peersOf(path.join(nc.dir, 'api.sock')).filter(
              (p) => (p as { probe?: { state?: string } }).probe?.state === 'reachable',
            ).length === 2,
          "nc's probes of na and nb (over VXLAN, to their tunnel addresses) reachable",
          30_000,
          { intervalMs: 300 },
        );
      });

      it('keeps the same tunnel address across a restart', async () => {
        const na = node('na');
        const before = published(na);
        const reserved = (): number =>
          (fs.readFileSync(na.daemon!.logFile, 'utf8').match(/fabric tunnel address reserved/g) ?? []).length;
        const reservedBefore = reserved();
        expect(reservedBefore).to.equal(1);
        await na.daemon?.stop();
        na.daemon = await start(na);
        // The restarted daemon has applied its table once its probe of nc (over VXLAN) answers.
        await waitUntil(
          async () =>
            peersOf(path.join(na.dir, 'api.sock')).some(
              (p) => p.node === 'nc' && (p as { probe?: { state?: string } }).probe?.state === 'reachable',
            ),
          "the restarted na's probe of nc reachable",
          30_000,
          { intervalMs: 300 },
        );
        expect(reserved(), 'no second reservation').to.equal(reservedBefore);
        expect(deviceAddresses(na.ns)).to.deep.equal([`${before}/32`]);
        // The record is published again once this daemon holds the name, and names the tunnel address
        // once the store has given it back (an update under the same lease).
        await waitUntil(
          () => published(na) === before,
          'the record to name the same tunnel address',
          10_000,
          {
            intervalMs: 100,
          },
        );
        expect(await pings(node('nc').ns, na.podIp as string, { count: 2, waitSeconds: 2 })).to.equal(true);
        expect(await pings(na.ns, node('nc').podIp as string, { count: 2, waitSeconds: 2 })).to.equal(true);
      });
    },
  );

import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import { FabricCluster, usualNodes, type ClusterNode } from '../support/fabric-cluster';
import { isRoot } from '../support/netns';
import { pings } from '../support/ping';
import { waitUntil } from '../support/wait-until';
import { EtcdCluster, haveEtcd } from '../support/etcd-cluster';
import { cidrContains, parseAddress, parseCidr } from '../../lib/cidr';

// The tunnel address of an etcd node: etcd blocks hand out their first address to pods, so each node
// reserves one address of its own blocks, puts it on wn-vxlan and publishes it in its record; peers
// key its routes on it and probe it. With strict rp_filter (=1) on every node, traffic a node itself
// sends to a remote pod leaves with it as its source and its answer passes the filter. Hybrid: na and
// nb share a subnet (routed), nc sits behind a router (VXLAN); vxlan: every peer over VXLAN.

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
      let c: FabricCluster;
      let etcd: EtcdCluster;
      let nodes: ClusterNode[];

      const node = (name: string): ClusterNode => c.node(name);
      const podIp = (n: ClusterNode): string => c.pod(n.name).ip;
      /** The tunnel address a node publishes in its etcd record, if any. */
      const published = (n: ClusterNode): string | undefined => {
        const out = etcd.etcdctl('get', `/workloadnet/nodes/${n.name}`, '--print-value-only');
        if (out.trim() === '') return undefined;
        return (JSON.parse(out) as { vtep?: { gateways?: { 4?: string } } }).vtep?.gateways?.[4];
      };

      before(async () => {
        c = await FabricCluster.start({
          source: 'etcd',
          fabric: mode,
          mtu: 1450,
          config: { fabric: { leaseTtlSeconds: 3, probeIntervalSeconds: 1 } },
          nodes: usualNodes({ na: {}, nb: {}, nc: {} }),
          prepare: (n) => strictRpFilter(n.ns),
          podsPerNode: 1,
        });
        etcd = c.etcd as EtcdCluster;
        nodes = c.nodes;
      });

      after(async () => {
        await c?.teardown();
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
          expect(address, n.name).to.not.be.oneOf(nodes.map(podIp));
          const seenBy = nodes.find((m) => m !== n) as ClusterNode;
          const blocks = c.peersOf(seenBy).find((p) => p.node === n.name)?.prefixes ?? [];
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
            async () => c.peersOf(n).filter((p) => p.path !== 'unreachable').length === 2,
            `${n.name} reaches both peers`,
            30_000,
            { intervalMs: 200 },
          );
        for (const from of nodes)
          for (const to of nodes)
            if (from !== to)
              expect(
                await pings(from.ns, podIp(to), { count: 3, waitSeconds: 2 }),
                `node ${from.name} → pod on ${to.name}`,
              ).to.equal(true);
        const nc = node('nc');
        await waitUntil(
          async () =>
            c.peersOf(nc).filter((p) => (p as { probe?: { state?: string } }).probe?.state === 'reachable')
              .length === 2,
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
        await c.restart(na);
        // The restarted daemon has applied its table once its probe of nc (over VXLAN) answers.
        await waitUntil(
          async () =>
            c
              .peersOf(na)
              .some(
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
        expect(await pings(node('nc').ns, podIp(na), { count: 2, waitSeconds: 2 })).to.equal(true);
        expect(await pings(na.ns, podIp(node('nc')), { count: 2, waitSeconds: 2 })).to.equal(true);
      });
    },
  );
